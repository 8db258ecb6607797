"""Every scenario's ``scenario run --json``, ``triage --json`` and ``trace.json`` against snapshots.

The snapshots in ``tests/snapshots/`` were taken from the kit before its modules were regrouped
into sub-packages; the outputs must stay the same except for the changes documented in
``docs/outputs.md`` (applied by :func:`documented_changes` below, so every difference is named).
Regenerate only for a documented change: ``python tests/test_output_snapshots.py --write``.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

SNAPSHOTS = Path(__file__).resolve().parent / "snapshots"


def compute(name: str, workdir: Path) -> dict:
    """Return the three outputs of scenario ``name``, each as the CLI writes it (parsed JSON)."""
    env_python = sys.executable

    def cli(*args: str) -> dict:
        done = subprocess.run([env_python, "-m", "kimi_viz", *args], capture_output=True, text=True,
                              cwd=workdir, check=False)
        assert done.returncode in (0, 1), done.stderr
        return json.loads(done.stdout)

    manifest = workdir / f"{name}-manifest"
    out = workdir / f"{name}-out"
    scenario_run = cli("scenario", "run", name, "--json", "--manifest-out", str(manifest))
    triage = cli("triage", str(manifest), "--json", "--out", str(out))
    trace = json.loads((out / "trace.json").read_text(encoding="utf-8"))
    return {"scenario_run": scenario_run, "triage": triage, "trace": trace}


def documented_changes(outputs: dict) -> dict:
    """Return ``outputs`` with every documented change since the snapshots undone (see docs/outputs.md)."""
    return outputs


def _names() -> list[str]:
    return sorted(p.stem for p in SNAPSHOTS.glob("*.json"))


@pytest.mark.slow
@pytest.mark.parametrize("name", _names())
def test_outputs_equal_the_snapshot(name, tmp_path):
    expected = json.loads((SNAPSHOTS / f"{name}.json").read_text(encoding="utf-8"))
    assert documented_changes(compute(name, tmp_path)) == expected


if __name__ == "__main__":  # python tests/test_output_snapshots.py --write
    import tempfile

    from kimi_viz.scenarios import SCENARIOS

    if "--write" not in sys.argv:
        sys.exit("usage: python tests/test_output_snapshots.py --write")
    SNAPSHOTS.mkdir(exist_ok=True)
    for scenario in SCENARIOS:
        with tempfile.TemporaryDirectory() as tmp:
            data = compute(scenario, Path(tmp))
        (SNAPSHOTS / f"{scenario}.json").write_text(json.dumps(data, sort_keys=True, separators=(",", ":")) + "\n",
                                                   encoding="utf-8")
        print("wrote", scenario)
