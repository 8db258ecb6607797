"""The public names: every one callable, twice, whatever was imported first; and no function named like a module.

One naming rule holds in the whole package: no function shares its name with a module or
sub-package beside it (a verb's own module is private: ``_explain/``, ``split/_replay.py``). When
the rule is broken, importing the module replaces the package's attribute: ``kv.explain`` turns into
a module after ``import kimi_viz.explain`` and the next call raises ``TypeError: 'module' object is
not callable``. The first test imports every submodule in a fresh interpreter and then calls every
name of ``kimi_viz.__all__`` twice; the second reads the rule off the package itself.
"""

from __future__ import annotations

import importlib
import inspect
import pkgutil
import subprocess
import sys
import textwrap

import kimi_viz

# One call per public name (run twice). ``tmp`` is a fresh folder; ``tiny`` and ``chelsea`` sample paths.
CALLS: dict[str, str] = {
    # the exception tree
    **{
        name: f"try:\n    raise kv.{name}('probe')\nexcept kv.KimiVizError as exc:\n    assert str(exc) == 'probe'"
        for name in (
            "KimiVizError",
            "ArgumentError",
            "ImageLoadError",
            "ImageNotFoundError",
            "NotAnImageError",
            "TruncatedImageError",
            "EmptyImageError",
            "DecompressionBombError",
            "UnsupportedImageError",
            "ConfigError",
            "CheckpointError",
            "DeviceError",
            "RowCountError",
            "LayoutLookupError",
            "ScenarioError",
            "OutputError",
            "CaptureError",
            "WhatIfError",
            "SettingNotInReleaseError",
            "ServerInputError",
        )
    },
    "ManifestError": "assert str(kv.ManifestError('bad', json_path='items[0]')) == 'items[0]: bad'",
    # constants
    "__version__": "assert kv.__version__.count('.') == 2",
    "NEWEST": "assert kv.NEWEST in kv.RELEASES",
    "RELEASES": "assert list(kv.RELEASES)[0] == '0.5.17'",
    "SAMPLE_PHOTOS": "assert kv.SAMPLE_PHOTOS",
    "SCENARIOS": "assert 's1-cpu' in kv.SCENARIOS",
    # preprocess
    "load_image": "assert kv.load_image(tiny).size == (20, 5)",
    "ProcessorConfig": "assert replace(kv.get_config('kimi-k3')).patch_size == 14",
    "get_config": "assert kv.get_config('kimi-k25').in_patch_limit == 16384",
    "load_preprocessor_config": (
        "try:\n    kv.load_preprocessor_config(tmp / 'missing')\nexcept kv.KimiVizError as exc:\n"
        "    assert 'missing' in str(exc)"
    ),
    "resize_config": "assert kv.resize_config(451, 300).grid == (1, 22, 34)",
    "Processor": "assert kv.Processor('kimi-k3', device='cpu').preprocess(tiny).grid_thws.tolist() == [[1, 2, 2]]",
    "ProcessorOutput": "assert len(replace(output)) == 1",
    "ImageRecord": "assert replace(output.records[0]).rows == (0, 4)",
    "compare": (
        "assert kv.compare(kv.Processor('kimi-k3', device='cpu'), kv.Processor('kimi-k3', 'torch', device='cpu'), "
        "[tiny])"
    ),
    "load_hf_processor": (
        "try:\n    kv.load_hf_processor(tmp / 'no-checkpoint')\nexcept kv.KimiVizError as exc:\n"
        "    assert 'no-checkpoint' in str(exc)"
    ),
    "BatchLayout": "assert kv.BatchLayout.from_grids([(1, 2, 2)]).total_rows == 4",
    "compare_layouts": "assert kv.compare_layouts(layout, layout).equal",
    "resolve_device": "assert str(kv.resolve_device('cpu')) == 'cpu'",
    # the encoder
    "VisionEncoder": (
        "assert kv.VisionEncoder.random('tiny', device='cpu').encode(output.pixel_values, output.grid_thws)"
    ),
    # the request side
    "ServerSettings": "assert kv.ServerSettings().serving == 'normal'",
    "RequestImage": "assert replace(kv.probe_image(chelsea)).size == (451, 300)",
    "probe_image": "assert kv.probe_image(chelsea).mode == 'RGB'",
    "image_sources": "assert kv.image_sources(['chelsea.png'])[0].name == 'chelsea.png'",
    "build_request": (
        "assert len(kv.build_request([kv.probe_image(chelsea)], kv.ServerSettings(), '0.5.23').items) == 1"
    ),
    "Release": "assert replace(kv.RELEASES['0.5.18']).code_path == 'pre-fix'",
    # the deferred split
    "Batch": "assert len(kv.Batch(items=[])) == 0",
    "Item": "assert kv.Item({'grid_thws': [[1, 2, 2]]}, feature).grid_source() == 'grid_thws'",
    "Feature": "assert kv.Feature.shape_only('chw', (3, 28, 28), 'uint8').kind == 'shape_only'",
    "assign_ranks": "assert kv.assign_ranks([4, 9, 1], 2) == [[1], [0, 2]]",
    "replay": "assert [r.outcome for r in kv.replay(s1, tp_size=2, mode='shapes').ranks] == ['ok', 'error']",
    "Trace": "assert replace(trace).divergence is trace.divergence",
    "build_verdict": "assert kv.build_verdict(trace).status is kv.Status.ERROR_REPRODUCED",
    "Verdict": "assert replace(verdict).exit_code == 1",
    "Status": "assert kv.Status('clean') is kv.Status.CLEAN",
    "format_verdict": "assert 'ERROR REPRODUCED' in kv.format_verdict(verdict)",
    # scenarios, manifests, views
    "get_scenario": "assert kv.get_scenario('s1-cpu').tp_size == 2",
    "run_scenario": "assert kv.run_scenario('s2-cpu', mode='shapes').outcome == 'error'",
    "write_manifest": "assert (kv.write_manifest(s1, fresh('m')) / 'manifest.json').is_file()",
    "read_manifest": "assert len(kv.read_manifest(manifest)) == 3",
    "Stepper": "assert 'Step 6 of 6' in kv.Stepper(trace).to_html()",
    # the verbs
    "explain": (
        "assert kv.explain('x') == [] and kv.explain('Kimi-K3 deferred feature length does not match image grids')"
    ),
    "triage": "assert kv.triage(manifest, mode='shapes').exit_code == 1",
    "TriageResult": "assert replace(kv.triage(manifest, mode='shapes')).code_path == 'pre-fix'",
    "write_triage_outputs": (
        "assert 'report' in kv.write_triage_outputs(kv.triage(manifest, mode='shapes'), fresh('out'))"
    ),
    "whatif": "assert kv.whatif([chelsea], sglang_version='0.5.23', tp_size=1).status.value == 'clean'",
    "Answer": "assert replace(kv.whatif([chelsea], sglang_version='0.5.23', tp_size=1)).failed is False",
    "answer_text": "assert 'CLEAN REPLAY' in kv.answer_text(kv.whatif([chelsea], sglang_version='0.5.23', tp_size=1))",
    "answer_json": "assert kv.answer_json(kv.whatif(pair, sglang_version='0.5.18', tp_size=2))['exit_code'] == 1",
    "request_table": ("assert kv.request_table(kv.whatif([chelsea], sglang_version='0.5.23', tp_size=1).replay.built)"),
    "sweep": "assert len(kv.sweep(pair).cells) == 16",
    "Sweep": "assert replace(kv.sweep(pair, tp_sizes=(2,))).exit_code == 1",
    "sweep_text": "assert 'clean from 0.5.19' in kv.sweep_text(kv.sweep(pair, tp_sizes=(2,)))",
    "sweep_table": "assert len(kv.sweep_table(kv.sweep(kv.together(pair), tp_sizes=(2,))).rows) == 5",
    "minimize": "assert kv.minimize(pair, sglang_version='0.5.18', tp_size=2).kept == (0, 1)",
    "Minimized": "assert replace(kv.minimize(pair, sglang_version='0.5.18', tp_size=2)).units",
    "minimized_text": (
        "assert 'minimal set: 2 of 2' in kv.minimized_text(kv.minimize(kv.together(pair), sglang_version='0.5.18', "
        "tp_size=2))"
    ),
    "sweep_summary": "assert kv.sweep_summary(kv.sweep(pair, tp_sizes=(2,))).endswith('clean from 0.5.19')",
    "minimized_table": (
        "assert [r[4] for r in kv.minimized_table(kv.minimize(pair, sglang_version='0.5.18', tp_size=2)).rows]"
        " == ['kept', 'kept']"
    ),
    "pass_table": "assert kv.pass_table(kv.whatif(kv.together(pair), sglang_version='0.5.18', tp_size=2).replay).rows",
    "workload_table": (
        "assert len(kv.workload_table(kv.whatif(kv.together(pair), sglang_version='0.5.19', tp_size=2).replay).rows)"
        " == 2"
    ),
    "Workload": "assert len(replace(kv.together(pair)).requests) == 2",
    "Request": "assert kv.Request('r', kv.together([chelsea]).requests[0].images).to_json()['id'] == 'r'",
    "CacheSeed": "assert kv.CacheSeed(kv.together([chelsea]).requests[0].images[0], 120).tokens == 120",
    "together": "assert [r.rid for r in kv.together(pair).requests] == ['r1', 'r2']",
    "read_workload": "assert kv.read_workload(workload_file).images == 2",
    "parse_workload": "assert kv.parse_workload({'requests': [{'images': [str(chelsea)]}]}).images == 1",
    "LoadSettings": "assert kv.LoadSettings(cache_mb=0).flags().endswith('SGLANG_VLM_CACHE_SIZE_MB=0 (cuda)')",
    "sweep_pairs": "assert len(kv.sweep_pairs(pair, tp_sizes=(2,)).failing()) == 1",
    "pairs_table": "assert len(kv.pairs_table(kv.sweep_pairs(pair, tp_sizes=(2,))).rows) == 1",
    "parse_request": ("assert kv.parse_request({'text': 'x', 'image_data': [str(chelsea)]}).entry == 'generate-text'"),
    "read_request": "assert kv.read_request(chat_file).images[0].size == (451, 300)",
    "check_table": (
        "assert kv.check_table(kv.whatif(kv.read_request(chat_file), sglang_version='0.5.23', tp_size=1)"
        ".replay.outcome).rows"
    ),
    "prompt_table": (
        "assert len(kv.prompt_table(kv.whatif(kv.read_request(chat_file), sglang_version='0.5.18', tp_size=1)"
        ".replay.outcome).rows) == 1"
    ),
    "LOAD_SCENARIOS": "assert 's14-two-requests-one-call' in kv.LOAD_SCENARIOS",
    "run_load_scenario": "assert kv.run_load_scenario('s15-straddling-image').status.value == 'clean'",
    "run_demo": (
        "assert kv.run_demo(fresh('demo'), scenarios=['s1-cpu'], gallery=False, progress=None).name == 'index.html'"
    ),
    # the user's own deployment as input
    "DeploymentInput": "assert replace(kv.DeploymentInput(server_log=str(log))).server_log.endswith('.log')",
    "Deployment": "assert replace(kv.read_deployment(kv.DeploymentInput(server_log=str(log)))).tp_size == 2",
    "read_deployment": (
        "assert kv.read_deployment(kv.DeploymentInput(server='python -m sglang.launch_server --model-path m --tp 4', "
        "sglang_version='0.5.23')).tp_size == 4"
    ),
    "ModelFolder": "assert replace(kv.read_model_folder(checkpoint)).is_k3",
    "read_model_folder": "assert kv.read_model_folder(checkpoint).placeholder.tokenizer_id == 163605",
    "write_demo_checkpoint": "assert (kv.write_demo_checkpoint(fresh('ckpt')) / 'SYNTHETIC.md').is_file()",
    # the sample data
    "sample_log": "assert kv.sample_log().name == 'kimi-k3-0.5.18.log'",
    "sample_images": "assert len(kv.sample_images()) >= 10",
    "sample_path": "assert kv.sample_path('chelsea.png').is_file()",
}

PRELUDE = """
import importlib, itertools, pkgutil, tempfile
from dataclasses import replace
from pathlib import Path
import kimi_viz
for info in pkgutil.walk_packages(kimi_viz.__path__, 'kimi_viz.'):
    if not info.name.endswith('__main__') and '._shim' not in info.name:
        importlib.import_module(info.name)
import kimi_viz as kv
root = Path(tempfile.mkdtemp())
counter = itertools.count()
def fresh(name):
    return root / f'{name}-{next(counter)}'
tmp = fresh('tmp'); tmp.mkdir()
tiny, chelsea = kv.sample_path('astronaut_tiny_20x5.png'), kv.sample_path('chelsea.png')
pair = [kv.sample_path('rocket.jpg'), kv.sample_path('astronaut.png')]
output = kv.Processor('kimi-k3', device='cpu').preprocess(tiny)
layout = kv.BatchLayout.from_output(output)
feature = kv.Feature.shape_only('patches', (4, 3, 14, 14), 'float32')
s1 = kv.get_scenario('s1-cpu').build()
trace = kv.replay(s1, tp_size=2, mode='shapes')
verdict = kv.build_verdict(trace)
manifest = kv.write_manifest(s1, fresh('manifest'))
checkpoint = kv.write_demo_checkpoint(fresh('checkpoint'))
log = kv.sample_log()
workload_file = fresh('workload.json')
workload_file.write_text('{"requests": [{"images": ["rocket.jpg"]}, {"images": ["astronaut.png"]}]}')
chat_file = fresh('chat.json')
chat_file.write_text(
    '{"messages": [{"role": "user", "content": [{"type": "text", "text": "What is this?"}, '
    '{"type": "image_url", "image_url": {"url": "chelsea.png"}}]}]}'
)
"""


def test_every_public_name_is_called():
    assert sorted(CALLS) == sorted(kimi_viz.__all__)


def test_every_public_name_works_twice_after_every_submodule_is_imported(tmp_path):
    body = "".join(
        f"for _ in range(2):\n    try:\n{textwrap.indent(code, '        ')}\n"
        f"    except BaseException as exc:\n        raise SystemExit(f'{name}: {{type(exc).__name__}}: {{exc}}')\n"
        for name, code in sorted(CALLS.items())
    )
    script = PRELUDE + body + "print('ok', len(kv.__all__))\n"
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=600, cwd=tmp_path)
    assert done.returncode == 0 and done.stdout.split()[0] == "ok", done.stderr[-4000:]


def _clashes(root) -> list[str]:
    """Return ``package.name`` for every public name a package (or one of its modules) lists that is also a module."""
    names = [root.__name__] + [
        info.name
        for info in pkgutil.walk_packages(root.__path__, root.__name__ + ".")
        if info.ispkg and "._shim" not in info.name
    ]
    broken = []
    for package_name in names:
        package = importlib.import_module(package_name)
        modules = {info.name for info in pkgutil.iter_modules(package.__path__)} - {"__main__"}
        exported = set(getattr(package, "__all__", ()))
        for module_name in modules:
            exported |= set(getattr(importlib.import_module(f"{package_name}.{module_name}"), "__all__", ()))
        broken += [f"{package_name}.{name}" for name in sorted(exported & modules)]
    return broken


def test_no_function_shares_its_name_with_a_module_beside_it():
    """The rule itself, for every package of the kit: nothing it exports is named like a module beside it."""
    assert _clashes(kimi_viz) == []


def test_the_rule_catches_a_function_named_like_its_module(tmp_path, monkeypatch):
    """A planted package in the old layout (``explain.py`` exporting ``explain``) is reported."""
    package = tmp_path / "planted"
    package.mkdir()
    (package / "__init__.py").write_text("from .explain import explain\n__all__ = ['explain']\n")
    (package / "explain.py").write_text("def explain(text):\n    return []\n__all__ = ['explain']\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    planted = importlib.import_module("planted")
    assert inspect.isfunction(planted.explain)
    assert _clashes(planted) == ["planted.explain"]
