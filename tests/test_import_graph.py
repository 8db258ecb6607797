"""The package's import graph: no cycles anywhere, and every sub-package points only downward.

Every ``import`` and ``from ... import`` in ``kimi_viz`` counts — module level, inside functions
(a deferred import is still a dependency) and under ``if TYPE_CHECKING:`` alike (a circle closed
only for the type checker is still a circle of the design: the two modules cannot be read, or
split, apart). The layers below are the pipeline a newcomer reads: a module may import its own
layer's lower modules and anything in a lower layer, never a higher one.

Imports inside functions are kept to a short list (:data:`DEFERRED_ALLOWED`): a heavy third-party
library that only some paths need, or a CLI sub-command's own verb, imported when the sub-command
runs so that ``kimi-viz --help`` stays light. Every other import sits at the top of its module.
"""

from __future__ import annotations

import ast
from fnmatch import fnmatch
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parent.parent / "kimi_viz"

# What a function body may import; every other import sits at the top of its module.
# A heavy third-party library, imported by the function that uses it: at the top it would load on every path
# through the module, `kimi-viz --help`, `explain` and a shapes triage among them (tests/test_cli_latency.py).
DEFERRED_LIBRARIES = {
    "numpy": "about 50 ms to import; --help and explain load none of it",
    "torch": "seconds to import; only pixels, the encoder and a live capture need it",
    "matplotlib": "only a figure needs it; --help, explain and a shapes triage without --out draw none",
    "PIL": "only decoded pixels need it; --help, explain and a shapes triage read none",
    "jsonschema": "only a manifest off the fast path is validated with it",
    "safetensors": "only a checkpoint or a manifest's tensors file is read with it",
    "transformers": "optional: only the comparison with the Hugging Face processor uses it",
    "tqdm": "the encoder's progress bar, shown only for a long interactive encode; tqdm.auto probes for Jupyter",
    "IPython": "optional: only the stepper's notebook display uses it",
    "ipywidgets": "optional: only the stepper's notebook widgets use it",
    "sglang": "present only inside the SGLang process a capture wraps",
    "tiktoken": "only a checkpoint folder's tokenizer needs it (a chat tokenized as the server does)",
}
# A kit or standard-library module that one place imports late on purpose: (file under kimi_viz/, module) -> why.
_TORCH_AT_TOP = "imports torch at its top"
DEFERRED_PLACES = {
    # The CLI's sub-commands: `kimi-viz --help` imports every *_cmd.py, so each loads its verb when it runs.
    ("cli/*.py", "kimi_viz._triage"): "triage's verb: the replay, the verdict and the report",
    ("cli/*.py", "kimi_viz.report.answer_views"): "the answer's text and tables, loaded with whatif's verb",
    ("cli/*.py", "kimi_viz.report.answer_documents"): "the answer's JSON, loaded with whatif's verb",
    ("cli/*.py", "kimi_viz._whatif"): "whatif's verbs (and a load scenario's): the request sides and the replay",
    ("cli/*.py", "kimi_viz._explain"): "explain's verb: the message catalogue and its patterns",
    ("cli/*.py", "kimi_viz._demo"): "demo's verb: the replays, the reports and the gallery",
    ("cli/*.py", "kimi_viz.manifest"): "triage's check and scenario run's writer: the reader imports the split's batch",
    ("cli/*.py", "kimi_viz.split.verdict"): "scenario run's verdict: the trace, the divergence and the diagnosis",
    ("cli/*.py", "kimi_viz.request.chat"): "whatif --chat's request reader: the chat template and its checks",
    ("cli/*.py", "kimi_viz.request.workload"): "whatif --requests and --together: the workload reader",
    ("cli/*.py", "kimi_viz.request.model_folder"): "--model-path's folder reader: the tokenizer, only with a folder",
    ("cli/*.py", "kimi_viz._whatif.deployment"): "--server / --server-log read into a deployment",
    ("cli/*.py", "kimi_viz.repro"): "--emit-repro's writer, loaded only when a repro is asked for",
    ("cli/*.py", "kimi_viz.scenarios.catalogue"): f"the scenario catalogue {_TORCH_AT_TOP} (and Pillow)",
    ("cli/*.py", "kimi_viz.scenarios.under_load"): "the load scenarios import Pillow and numpy (the request side)",
    ("cli/*.py", "kimi_viz.preprocess.images"): "the image loader imports Pillow and numpy at its top",
    ("cli/*.py", "kimi_viz.preprocess.processor"): f"the processor {_TORCH_AT_TOP}",
    ("cli/*.py", "kimi_viz.encoder"): f"the vision encoder {_TORCH_AT_TOP}",
    # The capture: its shim and hook load in every Python process the captured command starts.
    ("capture/_shim/sitecustomize.py", "importlib.machinery"): "the shim imports nothing it can do without",
    ("capture/_shim/sitecustomize.py", "kimi_viz.capture.hook"): "installed only when KIMI_VIZ_CAPTURE_DIR is set",
    ("capture/hook.py", "kimi_viz.capture.record"): "the recorder (manifest writer, torch): when a call is recorded",
    ("capture/hook.py", "pathlib"): "the hook imports only modules the interpreter loaded at start-up",
    ("capture/run.py", "subprocess"): "capture.run loads at every `kimi-viz --help`: about 6 ms",
    ("capture/run.py", "shutil"): "capture.run loads at every `kimi-viz --help`: about 3 ms",
    ("capture/run.py", "signal"): "capture.run loads at every `kimi-viz --help`",
    # `kimi-viz --help` reads DEMO_SCENARIOS from _demo (demo_cmd): the demo's work loads when it runs.
    ("_demo.py", "kimi_viz._triage"): "the triage's replay and report",
    ("_demo.py", "kimi_viz.scenarios.catalogue"): f"the scenario catalogue {_TORCH_AT_TOP}",
    ("_demo.py", "kimi_viz.report.gallery"): "the gallery imports matplotlib at its top",
    ("_demo.py", "kimi_viz.scenarios.under_load"): "the load scenarios import Pillow and numpy (the request side)",
    ("_demo.py", "kimi_viz._whatif"): "a load scenario's replay and its report with the forward-pass figure",
    ("_demo.py", "kimi_viz.request.workload"): "the sample log's two requests: the workload reader imports Pillow",
    ("_demo.py", "kimi_viz.request.chat"): "the demo's chat: the request reader imports Pillow",
    # A module on a light path that reaches, on one branch, a module importing a heavy library at its top.
    ("manifest/sources.py", "kimi_viz.preprocess.images"): "Pillow and numpy; a shapes triage opens no image",
    ("report/context.py", "kimi_viz.plots.call_requests"): "matplotlib; a report draws its figure only with --out",
    ("report/summary.py", "kimi_viz.plots.summary"): "matplotlib; a triage draws summary.png only with --out",
    ("report/markdown.py", "kimi_viz.report.answer_views"): (
        "the answer's presenters pull in the workload replay; a triage's issue.md never needs them"
    ),
    ("request/producer.py", "kimi_viz.preprocess.pixels_torch"): f"the torch pixel path {_TORCH_AT_TOP}",
    ("request/producer.py", "kimi_viz.preprocess.pixels_checkpoint"): f"the checkpoint pixel path {_TORCH_AT_TOP}",
    ("manifest/read.py", "kimi_viz.preprocess.pixels_torch"): f"a gpu-backend image's CHW tensor; {_TORCH_AT_TOP}",
    ("_whatif/ask.py", "kimi_viz._whatif.chat"): "the chat template and the request side's checks: a chat request only",
    ("server_args/table.py", "kimi_viz.server_args._handling"): (
        "the classification (and the TOML parser) loads only for SERVER_ARGS or ENV_VARS; args_of never needs it"
    ),
    (
        "report/stepper.py",
        "kimi_viz.plots",
    ): "matplotlib; triage imports the stepper, which draws only when shown",
    ("split/cpu_group.py", "kimi_viz.preprocess.pixels_checkpoint"): f"the pixels branch; {_TORCH_AT_TOP}",
    ("split/gpu_group.py", "kimi_viz.preprocess.pixels_torch"): f"the pixels branch; {_TORCH_AT_TOP}",
    ("split/state.py", "kimi_viz.preprocess.images"): "Pillow; only an image already in memory is asked for alpha",
}

# Ground first. A name is a top-level module or sub-package of kimi_viz.
LAYERS = [
    {
        "_lazy",
        "_records",
        "errors",
        "message_catalogue",
        "server_args",
        "releases",
        "release_changes",
        "scheduler_rules",
        "devices",
        "data",
        "files",
        "terminal",
    },
    {"preprocess"},
    {"encoder", "split"},
    {"request", "scheduler"},
    {"forward"},
    {"scenarios", "manifest", "plots", "answer"},
    {"capture", "report"},
    {"_explain", "_triage", "_whatif", "_demo", "repro"},
    {"cli", "__main__", "__init__"},
]
LAYER_OF = {name: depth for depth, names in enumerate(LAYERS) for name in names}


def _module_name(path: Path, package: Path = PACKAGE) -> str:
    parts = list(path.relative_to(package.parent).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts = parts[:-1]
    return ".".join(parts)


def _imports(path: Path, modules: set[str], root: Path = PACKAGE) -> set[str]:
    """Return the kimi_viz modules ``path`` imports (resolved; TYPE_CHECKING blocks included)."""
    name = _module_name(path, root)
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    tree = ast.parse(path.read_text(encoding="utf-8"))
    found: set[str] = set()

    def visit(node: ast.AST) -> None:
        if isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name.startswith("kimi_viz"):
                    found.add(_known(alias.name, modules))
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")
                base = base[: len(base) - (node.level - 1)]
                target = ".".join(base + ([node.module] if node.module else []))
            else:
                target = node.module or ""
            if target.startswith("kimi_viz"):
                for alias in node.names:
                    full = f"{target}.{alias.name}"
                    found.add(full if full in modules else _known(target, modules))
        for child in ast.iter_child_nodes(node):
            visit(child)

    visit(tree)
    found.discard(name)
    return found


def _known(name: str, modules: set[str]) -> str:
    while name not in modules and "." in name:
        name = name.rpartition(".")[0]
    return name


def _graph(root: Path = PACKAGE) -> dict[str, set[str]]:
    files = [p for p in root.rglob("*.py") if "_shim" not in p.parts]
    modules = {_module_name(p, root) for p in files}
    return {_module_name(p, root): _imports(p, modules, root) for p in files}


def _pruned(graph: dict[str, set[str]]) -> dict[str, set[str]]:
    # A module importing its own package's __init__ is how Python loads it anyway: not a cycle of the design.
    return {m: {t for t in targets if t not in _parents(m)} for m, targets in graph.items()}


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Return the strongly connected components with more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    out: list[list[str]] = []
    counter = [0]

    def strong(v: str) -> None:
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on_stack.add(v)
        for w in graph.get(v, ()):
            if w not in index:
                strong(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                out.append(sorted(component))

    for v in sorted(graph):
        if v not in index:
            strong(v)
    return out


def _parents(module: str) -> set[str]:
    parts = module.split(".")
    return {".".join(parts[:i]) for i in range(1, len(parts))}


def test_no_import_cycles():
    assert _cycles(_pruned(_graph())) == []


def test_the_cycle_finder_finds_a_planted_cycle():
    assert _cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]


def test_a_cycle_closed_under_type_checking_is_a_cycle(tmp_path):
    """A planted package: ``a`` imports ``b`` at run time, ``b`` imports ``a`` only for the type checker."""
    root = tmp_path / "kimi_viz"
    (root / "sub").mkdir(parents=True)
    (root / "__init__.py").write_text("")
    (root / "sub" / "__init__.py").write_text("")
    (root / "sub" / "a.py").write_text("from .b import B\n")
    (root / "sub" / "b.py").write_text(
        "from __future__ import annotations\n"
        "import typing\n"
        "from typing import TYPE_CHECKING\n"
        "if TYPE_CHECKING:\n"
        "    from .a import A\n"
        "if typing.TYPE_CHECKING:\n"
        "    import kimi_viz.sub.a\n"
        "class B: ...\n"
    )
    graph = _graph(root)
    assert graph["kimi_viz.sub.b"] == {"kimi_viz.sub.a"}
    assert _cycles(_pruned(graph)) == [["kimi_viz.sub.a", "kimi_viz.sub.b"]]


def _layer(module: str) -> int:
    part = module.split(".")[1] if "." in module else "__init__"
    if part not in LAYER_OF:
        pytest.fail(f"{module}: the sub-package or module {part!r} has no layer in tests/test_import_graph.py")
    return LAYER_OF[part]


def test_every_import_points_down_or_sideways_within_a_layer():
    upward = []
    for module, targets in _graph().items():
        if module == "kimi_viz":
            continue
        for target in targets:
            if target == "kimi_viz":
                continue
            if _layer(target) > _layer(module):
                upward.append(f"{module} -> {target}")
    assert upward == []


def test_the_package_root_holds_at_most_12_flat_modules():
    """The root is the ground and the entry points; everything else lives in the sub-package of its stage."""
    flat = sorted(p.stem for p in PACKAGE.glob("*.py") if p.stem not in ("__init__", "__main__"))
    assert len(flat) <= 12, flat


def test_no_module_is_over_about_600_lines_but_the_encoder_model():
    long = {
        str(p.relative_to(PACKAGE)): n
        for p in PACKAGE.rglob("*.py")
        if (n := len(p.read_text(encoding="utf-8").splitlines())) > 620 and p.name != "model.py"
    }
    assert long == {}


def test_every_kit_module_the_ci_scripts_name_exists():
    """The CI and GPU scripts import kit modules by name (the parity venvs' import check); a module
    renamed in the package must be renamed there too, or the lane fails before it starts."""
    import importlib
    import re

    root = Path(__file__).resolve().parent.parent
    scripts = [
        root / ".ci" / "sglang-envs.sh",
        root / ".ci" / "wheel-check.sh",
        root / "benchmarks" / "run_gpu_checks.sh",
    ]
    named = set()
    for script in scripts:
        named |= set(re.findall(r"\b(kimi_viz(?:\.[a-z_0-9]+)+)\b", script.read_text()))
    assert named, "the scripts name no kit module: the pattern is wrong"
    missing = []
    for name in sorted(named):
        try:
            importlib.import_module(name)
        except ModuleNotFoundError:
            parent, _, attr = name.rpartition(".")
            if not (parent and hasattr(importlib.import_module(parent), attr)):
                missing.append(name)
    assert not missing, missing


def _module_of(node: ast.Import | ast.ImportFrom, package: str) -> list[str]:
    """Return the absolute module names ``node`` imports (a relative import resolved against ``package``)."""
    if isinstance(node, ast.Import):
        return [alias.name for alias in node.names]
    if not node.level:
        return [node.module or ""]
    base = package.split(".")
    base = base[: len(base) - (node.level - 1)]
    target = ".".join(base + ([node.module] if node.module else []))
    return [target] if node.module else [f"{target}.{alias.name}" for alias in node.names]


def _deferred_imports(root: Path = PACKAGE) -> list[tuple[str, int, str]]:
    """Return (file under the package, line, module) for every import inside a function body."""
    found = []
    for path in sorted(root.rglob("*.py")):
        name = _module_name(path, root)
        package = name if path.name == "__init__.py" else name.rpartition(".")[0]
        rel = path.relative_to(root).as_posix()

        def visit(node: ast.AST, in_function: bool) -> None:
            for child in ast.iter_child_nodes(node):
                if in_function and isinstance(child, (ast.Import, ast.ImportFrom)):
                    found.extend((rel, child.lineno, module) for module in _module_of(child, package))  # noqa: B023
                visit(child, in_function or isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)))

        visit(ast.parse(path.read_text(encoding="utf-8")), False)
    return found


def _within(module: str, prefix: str) -> bool:
    return module == prefix or module.startswith(prefix + ".")


def _deferred_reason(rel: str, module: str) -> str | None:
    top = module.partition(".")[0]
    if top in DEFERRED_LIBRARIES:
        return DEFERRED_LIBRARIES[top]
    for (pattern, allowed), why in DEFERRED_PLACES.items():
        if fnmatch(rel, pattern) and _within(module, allowed):
            return why
    return None


def test_every_import_inside_a_function_is_on_the_deferred_list():
    late = [
        f"kimi_viz/{rel}:{line}: {module}"
        for rel, line, module in _deferred_imports()
        if not _deferred_reason(rel, module)
    ]
    assert late == [], (
        "import these at the top of the module (or add the module, with why, to DEFERRED_*):\n" + "\n".join(late)
    )


def test_every_deferred_place_is_still_used():
    used = {
        key
        for rel, _, module in _deferred_imports()
        for key in DEFERRED_PLACES
        if fnmatch(rel, key[0]) and _within(module, key[1])
    }
    assert set(DEFERRED_PLACES) - used == set()


def test_the_deferred_list_catches_a_planted_import(tmp_path):
    root = tmp_path / "kimi_viz"
    root.mkdir()
    (root / "__init__.py").write_text("")
    (root / "a.py").write_text(
        "import json\n\n\ndef f():\n    import torch\n    from . import b\n    import re\n    return torch, b, re\n"
    )
    (root / "b.py").write_text("")
    found = _deferred_imports(root)
    assert found == [("a.py", 5, "torch"), ("a.py", 6, "kimi_viz.b"), ("a.py", 7, "re")]
    assert [module for rel, _, module in found if not _deferred_reason(rel, module)] == ["kimi_viz.b", "re"]
