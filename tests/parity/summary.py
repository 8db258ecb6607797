"""Print the real-SGLang lane's counts per release from its report file, and fail on any disagreement.

python tests/parity/summary.py build/parity.jsonl
"""

from __future__ import annotations

import json
import sys
from collections import defaultdict
from pathlib import Path

SUITES = (
    "scenarios",
    "random",
    "capture",
    "capture-context",
    "processor",
    "forward",
    "adjust",
    "scheduler",
    "resolution",
    "memory",
    "recency",
    "conversation",
    "conversation-memory",
    "conversation-scenarios",
    "planted-bug",
    "chat",
    "repro",
    "triage-repro",
    "messages",
    "messages-gap",
    "server-args",
    "server-input",
)


def main(path: str) -> int:
    entries = [json.loads(line) for line in Path(path).read_text(encoding="utf-8").splitlines() if line.strip()]
    by_release: dict[str, list[dict]] = defaultdict(list)
    for entry in entries:
        by_release[entry["release"]].append(entry)
    problems = []
    print("real-SGLang lane: what was compared against the real code, per release")
    for release, found in sorted(by_release.items()):
        print(f"SGLang {release}")
        for entry in found:
            facts = ", ".join(f"{k} {v}" for k, v in entry.items() if k not in ("release", "suite"))
            print(f"  {entry['suite']:<13} {facts}")
            if entry["suite"] != "planted-bug" and int(entry.get("disagreements", 0)):
                problems.append(f"{release} {entry['suite']}: {entry['disagreements']} disagreements")
            if entry["suite"] == "planted-bug" and not int(entry.get("disagreements", 0)):
                problems.append(f"{release}: the planted bug {entry.get('plant')!r} went unnoticed")
            if entry["suite"] == "messages-gap" and int(entry.get("caught", 0)) < int(entry.get("plants", 1)):
                problems.append(f"{release}: the catalogue check missed a planted gap")
        missing = [s for s in SUITES if s not in {e["suite"] for e in found}]
        if missing:
            problems.append(f"{release}: suites that reported nothing: {missing}")
    total = sum(int(e.get("disagreements", 0)) for e in entries if e["suite"] != "planted-bug")
    print(f"disagreements with the real code: {total}")
    for problem in problems:
        print(f"PROBLEM: {problem}")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
