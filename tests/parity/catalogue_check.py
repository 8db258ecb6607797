"""The messages SGLang's own files raise or log on the Kimi vision path, read with ``ast``, and the
check of :data:`kimi_viz.message_catalogue.CATALOGUE` against them.

No SGLang import: the walk parses the installed release's source files (``find_spec("sglang")``
locates them), so it also runs on a tree written by a test or an unpacked wheel.

What counts as a message (:func:`extract`):

- ``raise E(...)``: the first argument that renders to text (or a ``msg=`` / ``message=`` / ``detail=``
  keyword); ``raise err`` where ``err = E(...)`` earlier in the function; ``raise make(...)`` where
  ``make`` is a function of the same module returning exceptions (each ``return`` is one message);
  ``raise E(text)`` where ``text = helper(...)`` and ``helper`` returns strings (one message each);
- ``assert cond, msg``;
- ``logger.<level>(msg, *args)`` on any receiver whose name holds ``log``, ``print_warning_once``,
  ``print_info_once``, ``rank0_log``, and ``warnings.warn``;
- ``maybe_assert_sum(tensor, expected, msg)`` and ``torch._assert_async(cond, msg)``: the device-side
  checks (a ``RuntimeError`` where the check runs on the CPU).

Text is rendered literally: f-string fields, ``%`` arguments (only when a logging call passes
arguments, as ``logging`` formats only then), ``.format`` fields and parts that cannot be resolved
become ``{}``; ``f"{x=}"`` keeps its ``x=``. A name bound to text earlier in the same function is
followed (``=`` and ``+=``); a conditional expression or a name bound in several branches gives one
message per alternative. A message with no literal letter or digit has no template (a re-raise, a
forwarded error string): nothing to recognise in a log.

Which messages are on the path (:func:`classify`) follows calls, not a list of files:
:func:`call_graph.reach` builds the release's static call graph from the Kimi entry points (the request
side's processors, the tokenizer manager's multimodal branch, the forward pass, the models'
``get_image_feature``, the EPD encoder and receiver; see :data:`call_graph.ENTRIES` and what the graph
skips), and a message is ON the path when the function emitting it is reached. The files walked are those
the graph reaches (and the catalogue's own, so a catalogued site off the graph still counts as present).
The rules of :data:`OFF_PATH` then take out, each with its reason, what a Kimi request reaches but is not
about its images: progress logs (``info``, ``debug``); messages without literal text; infrastructure every
request shares (configuration, addresses, custom ops, tracing, IPC plumbing); other models', modalities'
and hardware's helpers reached through shared code (the EPD preprocessor's video path, NPU patches);
bookkeeping that leaves the features unchanged (the EPD global embedding cache, the feature transport's
pools, the preprocess cache's keys); and, in the model-agnostic EPD encoder, the control plane, transport
plumbing, the encode API's request-format checks and the audio / video paths.
"""

from __future__ import annotations

import ast
import re
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field, replace
from pathlib import Path

from .call_graph import reach

LOG_LEVELS = {
    "debug": "debug",
    "info": "info",
    "warning": "warning",
    "warn": "warning",
    "warning_once": "warning",
    "info_once": "info",
    "error": "error",
    "exception": "exception",
    "critical": "critical",
    "fatal": "critical",
}
LOG_HELPERS = {"print_warning_once": "warning", "print_info_once": "info", "rank0_log": "info"}
DEVICE_ASSERTS = {"maybe_assert_sum": 2, "_assert_async": 1}  # callee -> index of the message argument
MESSAGE_KEYWORDS = ("msg", "message", "detail", "text", "reason")


@dataclass(frozen=True)
class Found:
    """One message site in a release's source: where, how it is emitted, and its text."""

    file: str  # relative to sglang/srt
    function: str  # qualified name: Class.method, outer.inner, <module>
    kind: str  # the exception class, or the log level (warnings.warn: UserWarning)
    template: str | None  # literal text with {} for each formatted part; None when there is none
    line: int
    reached: bool | None = None  # on a call path from the Kimi entry points (None: not walked)


# --------------------------------------------------------------------------------------------------
# Rendering an expression to the message texts it can produce
# --------------------------------------------------------------------------------------------------
_PERCENT = re.compile(r"%(?:\([^)]*\))?[-#0 +]*(?:\*|\d+)?(?:\.(?:\*|\d+))?[hlL]?[diouxXeEfFgGcrsa%]")
_FORMAT_FIELD = re.compile(r"\{\{|\}\}|\{[^{}]*\}")


def _percent(text: str) -> str:
    return _PERCENT.sub(lambda m: "%" if m.group(0) == "%%" else "{}", text)


def _format(text: str) -> str:
    return _FORMAT_FIELD.sub(lambda m: {"{{": "{", "}}": "}"}.get(m.group(0), "{}"), text)


def _literal_text(template: str | None) -> bool:
    return template is not None and re.search(r"[A-Za-z0-9]", template.replace("{}", "")) is not None


def _name(node: ast.AST) -> str:
    if isinstance(node, ast.Attribute):
        return node.attr
    if isinstance(node, ast.Name):
        return node.id
    return ""


def _is_exception_class(node: ast.AST) -> bool:
    name = _name(node)
    return bool(name) and name[0].isupper() and not name.isupper()


def _own_nodes(node: ast.AST) -> Iterator[ast.AST]:
    """Every node of a function body, not entering nested functions, classes or lambdas."""
    stack = list(ast.iter_child_nodes(node))
    while stack:
        child = stack.pop()
        yield child
        if not isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef, ast.Lambda)):
            stack.extend(ast.iter_child_nodes(child))


class _Scope:
    """The text assignments of one function body: name -> [(line, "=" or "+=", value or None)]."""

    def __init__(self, node: ast.AST):
        self.bindings: dict[str, list[tuple[int, str, ast.AST | None]]] = {}
        for child in _own_nodes(node):
            if isinstance(child, ast.Assign):
                for target in child.targets:
                    self._bind(target, child.lineno, child.value)
            elif isinstance(child, (ast.AnnAssign, ast.NamedExpr)) and child.value is not None:
                self._bind(child.target, child.lineno, child.value)
            elif isinstance(child, ast.AugAssign) and isinstance(child.target, ast.Name):
                op = "+=" if isinstance(child.op, ast.Add) else "="
                self.bindings.setdefault(child.target.id, []).append((child.lineno, op, child.value))
            elif isinstance(child, (ast.For, ast.AsyncFor, ast.With, ast.AsyncWith, ast.ExceptHandler)):
                targets: list[ast.AST] = []
                if isinstance(child, (ast.For, ast.AsyncFor)):
                    targets = [child.target]
                elif isinstance(child, (ast.With, ast.AsyncWith)):
                    targets = [item.optional_vars for item in child.items if item.optional_vars is not None]
                elif child.name:
                    targets = [ast.Name(id=child.name)]
                for target in targets:
                    self._bind(target, child.lineno, None)

    def _bind(self, target: ast.AST, line: int, value: ast.AST | None) -> None:
        if isinstance(target, ast.Name):
            self.bindings.setdefault(target.id, []).append((line, "=", value))
        else:
            for node in ast.walk(target):
                if isinstance(node, ast.Name):
                    self.bindings.setdefault(node.id, []).append((line, "=", None))

    def values(self, name: str, line: int) -> list[list[tuple[str, ast.AST | None]]] | None:
        """Return the ways ``name`` can hold text at ``line``: one chain ("=" then "+="...) per plain binding."""
        entries = sorted((e for e in self.bindings.get(name, []) if e[0] < line), key=lambda e: e[0])
        if not entries:
            return None
        chains: list[list[tuple[str, ast.AST | None]]] = []
        for index, (_, op, value) in enumerate(entries):
            if op == "=":
                tail = [(o, v) for _, o, v in entries[index + 1 :] if o == "+="]
                # a later plain binding replaces this one only on the same straight path; keep both
                chains.append([("=", value), *tail])
        return chains


class _Renderer:
    def __init__(self, scopes: list[_Scope]):
        self.scopes = scopes

    def render(self, node: ast.AST | None, line: int, depth: int = 0) -> list[str]:
        """Return the texts ``node`` can evaluate to (``{}`` for unknown parts); [] when it is no text."""
        if node is None or depth > 8:
            return []
        if isinstance(node, ast.Constant):
            return [node.value] if isinstance(node.value, str) else []
        if isinstance(node, ast.JoinedStr):
            return [
                "".join(
                    v.value if isinstance(v, ast.Constant) and isinstance(v.value, str) else "{}" for v in node.values
                )
            ]
        if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Add):
            left = self.render(node.left, line, depth + 1)
            right = self.render(node.right, line, depth + 1)
            if not left and not right:
                return []
            return [a + b for a in (left or ["{}"]) for b in (right or ["{}"])]
        if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Mod):
            return [_percent(text) for text in self.render(node.left, line, depth + 1)]
        if isinstance(node, ast.IfExp):
            return _unique(self.render(node.body, line, depth + 1) + self.render(node.orelse, line, depth + 1))
        if isinstance(node, ast.Call):
            func = node.func
            if isinstance(func, ast.Attribute) and func.attr == "format":
                return [_format(text) for text in self.render(func.value, line, depth + 1)]
            if isinstance(func, ast.Name) and func.id == "str" and len(node.args) == 1:
                return self.render(node.args[0], line, depth + 1)
            if _is_exception_class(func):
                for arg in node.args:
                    texts = self.render(arg, line, depth + 1)
                    if texts:
                        return texts
            return []
        if isinstance(node, ast.Name):
            for scope in reversed(self.scopes):
                chains = scope.values(node.id, line)
                if chains is None:
                    continue
                out: list[str] = []
                for chain in chains:
                    parts = [""]
                    for op, value in chain:
                        texts = self.render(value, line, depth + 1)
                        if op == "=" and not texts:
                            parts = []
                            break
                        parts = [p + t for p in parts for t in (texts or ["{}"])]
                    out.extend(parts)
                return _unique(out)
            return []
        return []


def _unique(items: Iterable[str]) -> list[str]:
    return list(dict.fromkeys(items))


class _Walker(ast.NodeVisitor):
    def __init__(self, file: str, module: ast.Module):
        self.file = file
        self.qualname: list[str] = []
        self.scopes: list[_Scope] = []
        self.found: list[Found] = []
        self.module_functions = {
            n.name: n for n in module.body if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))
        }

    # --- where we are -------------------------------------------------------------------------
    def visit_ClassDef(self, node: ast.ClassDef) -> None:
        self.qualname.append(node.name)
        self.generic_visit(node)
        self.qualname.pop()

    def _function(self, node: ast.FunctionDef | ast.AsyncFunctionDef) -> None:
        self.qualname.append(node.name)
        self.scopes.append(_Scope(node))
        self.generic_visit(node)
        self.scopes.pop()
        self.qualname.pop()

    visit_FunctionDef = _function
    visit_AsyncFunctionDef = _function

    def _emit(self, node: ast.AST, kind: str, texts: Iterable[str | None]) -> None:
        function = ".".join(self.qualname) or "<module>"
        emitted = False
        for text in _unique(t for t in texts if t is not None):
            self.found.append(Found(self.file, function, kind, text if _literal_text(text) else None, node.lineno))
            emitted = True
        if not emitted:
            self.found.append(Found(self.file, function, kind, None, node.lineno))

    # --- how a message is obtained ---------------------------------------------------------------
    def _renderer(self) -> _Renderer:
        return _Renderer(self.scopes)

    def _returns(self, name: str) -> list[tuple[str | None, str]]:
        """(exception class or None, text) for each ``return`` of the module function ``name``."""
        function = self.module_functions.get(name)
        if function is None:
            return []
        renderer = _Renderer([_Scope(function)])
        out = []
        for node in sorted(_own_nodes(function), key=lambda n: getattr(n, "lineno", 0)):
            if isinstance(node, ast.Return) and node.value is not None:
                call = node.value if isinstance(node.value, ast.Call) else None
                kind = _name(call.func) if call is not None and _is_exception_class(call.func) else None
                out.extend((kind, text) for text in renderer.render(node.value, node.lineno))
        return out

    def _bound(self, name: str, line: int) -> ast.AST | None:
        for scope in reversed(self.scopes):
            chains = scope.values(name, line)
            if chains:
                return chains[-1][0][1] if len(chains) == 1 and len(chains[0]) == 1 else None
        return None

    def _texts(self, call: ast.Call, line: int, *, percent: bool) -> list[str]:
        """The message texts of a call: its first argument that renders to text (or a message keyword)."""
        renderer = self._renderer()
        candidates: list[str] = []
        for index, arg in enumerate(call.args):
            if isinstance(arg, ast.Starred):
                continue
            texts = renderer.render(arg, line)
            if percent and index == 0 and len(call.args) > 1:
                texts = [_percent(t) for t in texts]
            if any(_literal_text(t) for t in texts):
                return texts
            candidates.extend(texts)
        for keyword in call.keywords:
            if keyword.arg in MESSAGE_KEYWORDS:
                texts = renderer.render(keyword.value, line)
                if any(_literal_text(t) for t in texts):
                    return texts
        if call.args and not isinstance(call.args[0], ast.Starred):
            value = call.args[0]
            if isinstance(value, ast.Name):
                value = self._bound(value.id, line) or value
            if isinstance(value, ast.Call) and isinstance(value.func, ast.Name):
                helper = [text for _, text in self._returns(value.func.id)]
                if any(_literal_text(t) for t in helper):
                    return helper
        return candidates

    # --- the statements ----------------------------------------------------------------------------
    def visit_Raise(self, node: ast.Raise) -> None:
        exc = node.exc
        if exc is None:
            self._emit(node, "re-raise", [None])
        elif isinstance(exc, ast.Call):
            func = exc.func
            made = self._returns(func.id) if isinstance(func, ast.Name) and not _is_exception_class(func) else []
            if any(kind for kind, _ in made):
                for kind, text in made:
                    if kind is not None:
                        self._emit(node, kind, [text])
            else:
                self._emit(node, _name(func) or ast.unparse(func), self._texts(exc, node.lineno, percent=False))
        elif isinstance(exc, ast.Name):
            bound = self._bound(exc.id, node.lineno)
            if isinstance(bound, ast.Call) and _is_exception_class(bound.func):
                self._emit(node, _name(bound.func), self._texts(bound, node.lineno, percent=False))
            else:
                self._emit(node, exc.id if _is_exception_class(exc) else "re-raise", [None])
        else:
            self._emit(node, _name(exc) or "re-raise", [None])
        self.generic_visit(node)

    def visit_Assert(self, node: ast.Assert) -> None:
        if node.msg is not None:
            self._emit(node, "AssertionError", self._renderer().render(node.msg, node.lineno))
        self.generic_visit(node)

    def visit_Call(self, node: ast.Call) -> None:
        func = node.func
        if isinstance(func, ast.Attribute):
            receiver = ast.unparse(func.value)
            if func.attr in LOG_LEVELS and "log" in receiver.split(".")[-1].lower():
                self._emit(node, LOG_LEVELS[func.attr], self._texts(node, node.lineno, percent=True))
            elif receiver == "warnings" and func.attr == "warn":
                self._emit(node, "UserWarning", self._texts(node, node.lineno, percent=False))
            elif receiver == "torch" and func.attr in DEVICE_ASSERTS:
                self._device_assert(node, DEVICE_ASSERTS[func.attr])
        elif isinstance(func, ast.Name):
            if func.id in LOG_HELPERS:
                self._emit(node, LOG_HELPERS[func.id], self._texts(node, node.lineno, percent=False))
            elif func.id in DEVICE_ASSERTS:
                self._device_assert(node, DEVICE_ASSERTS[func.id])
        self.generic_visit(node)

    def _device_assert(self, node: ast.Call, index: int) -> None:
        renderer = self._renderer()
        texts = renderer.render(node.args[index], node.lineno) if len(node.args) > index else []
        for keyword in node.keywords:
            if not texts and keyword.arg in MESSAGE_KEYWORDS:
                texts = renderer.render(keyword.value, node.lineno)
        self._emit(node, "RuntimeError", texts)


def extract_source(text: str, file: str) -> list[Found]:
    """Return the message sites of one module's source ``text`` (``file`` is its name relative to sglang/srt)."""
    module = ast.parse(text)
    walker = _Walker(file, module)
    walker.visit(module)
    return sorted(walker.found, key=lambda f: (f.line, f.kind, f.template or ""))


def defined_functions(srt: Path, files: list[str]) -> set[tuple[str, str]]:
    """Return (file, qualified name) of every function and method the files define."""
    out: set[tuple[str, str]] = set()

    def visit(node: ast.AST, prefix: str, file: str) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                name = f"{prefix}{child.name}"
                if not isinstance(child, ast.ClassDef):
                    out.add((file, name))
                visit(child, name + ".", file)
            else:
                visit(child, prefix, file)

    for rel in files:
        visit(ast.parse((srt / rel).read_text(encoding="utf-8")), "", rel)
    return out


def extract(srt: Path, also: Iterable[str] = ()) -> tuple[list[str], list[Found]]:
    """Return the files walked and every message site in them, for the release whose sglang/srt is ``srt``.

    The files are those holding a function the Kimi entry points reach (:func:`call_graph.reach`), and the
    ones of ``also`` the release has (the catalogue's own files, so a catalogued site off the graph is still
    seen); each site says whether its function is reached.
    """
    graph = reach(srt)
    files = sorted(set(graph.files) | {rel for rel in also if (srt / rel).is_file()})
    found: list[Found] = []
    for rel in files:
        for site in extract_source((srt / rel).read_text(encoding="utf-8"), rel):
            found.append(replace(site, reached=graph.reached(site.file, site.function, site.line)))
    return files, found


# --------------------------------------------------------------------------------------------------
# Which messages are on the Kimi vision path
# --------------------------------------------------------------------------------------------------
_EPD = r"disaggregation/(encode_server|encode_receiver|encode_grpc_server|encoder/[a-z_]+)\.py"
# (file, function, text or None, reason): a message matching all three is not on the path. First match wins.
OFF_PATH: tuple[tuple[str, str | None, str | None, str], ...] = (
    # --- reached, but not about the images: startup and settings ------------------------------------------
    (
        r"multimodal/kimi_k3_vit_cuda_graph_runner\.py",
        r"KimiK3ViTCudaGraphRunner\.__init__",
        None,
        "startup: the ViT CUDA-graph runner's settings, checked once when it is built",
    ),
    (
        r"runtime_context\.py|utils/(network|custom_op|common)\.py|(utils/)?cuda_vmm_utils\.py|distributed/parallel_state\.py"
        r"|observability/.*|model_executor/runner_utils/pool\.py|layers/moe/.*",
        None,
        None,
        "infrastructure every request shares: configuration lookups, addresses, custom-op registration, parallel "
        "groups, tracing, graph pools, a kernel dispatcher's other ops (a misconfigured server, not the images)",
    ),
    (
        r"managers/io_struct\.py|managers/schedule_batch\.py|multimodal/modality\.py",
        r"_maybe_wrap_pickle|get_return_hidden_states_mode|Modality\.from_str|MultimodalDataItem\.set_identity",
        None,
        "request-object plumbing: IPC serialisation, the hidden-states flag, modality names and identity bytes "
        "SGLang writes itself",
    ),
    # --- reached, but other models, modalities or hardware --------------------------------------------------
    (
        r"multimodal/processors/(glm4v|qwen_vl)\.py",
        None,
        None,
        "other models' video helpers, reached through the EPD preprocessor's video path; Kimi EPD traffic is images",
    ),
    (r"hardware_backend/npu/.*", None, None, "the NPU backend's image-processor patches for other models"),
    (
        r"multimodal/processors/base_processor\.py",
        r"BaseMultimodalProcessor\.submit_data_loading_tasks",
        r"Mismatch between image tokens and estimated frame counts\.",
        "image frame estimates: no caller passes them",
    ),
    (
        r"multimodal/media_artifacts/base\.py",
        r"MediaArtifactCacheMixin\.(decode_media_snapshot|snapshot_media_source|prepare_artifact_batch)",
        None,
        "abstract methods: the Kimi-K3 artifact adapter overrides them",
    ),
    # --- reached, but bookkeeping that leaves the features as they are -------------------------------------
    (
        r"mem_cache/(storage/mooncake_store/)?embedding_cache_controller\.py",
        None,
        None,
        "the EPD global embedding cache's pool housekeeping: a miss or a full pool falls back to encoding",
    ),
    (
        r"multimodal/transport/.*|utils/cuda_ipc_transport_utils\.py",
        None,
        None,
        "the feature transport between tokenizer and scheduler: pool leases and the fallback to plain IPC",
    ),
    (
        r"multimodal/cache/.*",
        r"(?!_snapshot_pil$).*",
        None,
        "the preprocess cache's keys: checks of a caller-supplied content hash's format and of the identity "
        "values SGLang builds itself (only an image that does not decode is about the images)",
    ),
    # --- the EPD encoder: everything but the image features ------------------------------------------
    (
        _EPD,
        r".*(_process_audio_items|_resolve_audio_sr|_get_feat_extract_output_lengths|_process_video_items"
        r"|_flatten_and_load_videos|_dp_sharded_decode_single_video).*",
        None,
        "EPD: audio and video only; Kimi EPD traffic is images",
    ),
    (_EPD, r".*_load_mm_processor", r"(?!Failed to load image processor).*", "EPD: the audio and video processors"),
    (_EPD, r".*_compute_direct_embedding|MMEncoder\._encode", r"Videos carry audio.*", "EPD: video with audio"),
    (
        _EPD,
        r"EncoderBootstrapServer\..*|_register_encoder_url.*|_unregister_encoder_url.*|.*health.*|launch_.*"
        r"|_launch_.*|serve_grpc_encoder|EncoderProfiler\..*|_grpc_target|_validate_transport_mode"
        r"|create_mm_receiver|MMReceiverGrpc\.__init__|.*_watchdog|run_dp_worker.*|DPDispatcher\..*"
        r"|_dp_worker_.*|_retire_abandoned_encode|EncoderScheduler\..*|.*_background_task_done",
        None,
        "EPD control plane: bootstrap, encoder registration, health, launch, the gRPC target's scheme, the DP "
        "dispatcher and batching, and the background-task catch-all (the cache insert it runs logs its own failure)",
    ),
    (
        _EPD,
        r"execute_encode_pipeline|validate_encode_request",
        None,
        "EPD: the encode API's request-format checks and error publishing (a malformed request, not an image)",
    ),
    (
        _EPD,
        r"await_task_completion_on_cancel",
        r"\{\} failed while draining cancellation",
        "EPD: a cancelled request's late failure, logged after its abort; the line opens with the operation's "
        "own text, which explain's fields cannot tell from a number",
    ),
    (
        _EPD,
        r"WaitingImageRequest\.__init__",
        r"zmq_context is required for a per-request socket",
        "EPD: a per-request socket's construction check; SGLang's own receiver always passes the ZMQ context",
    ),
    (
        _EPD,
        r"WaitingZmqRequest\._try_stage_into_pool",
        r"\{\} rid=\{\}",
        "EPD: the embedding pool's overflow error is formatted into a variable first, so its log line has no "
        "literal text to recognise but 'rid='; the request fails with that text ('EmbeddingPool cannot fit ...')",
    ),
)
KIND_OFF = {"info": "progress log, reports no failure", "debug": "debug trace, off by default"}


def classify(found: Found) -> str | None:
    """Return why ``found`` is NOT on the Kimi vision path, or None when it is."""
    if found.reached is False:
        return "no call path from the Kimi entry points reaches it"
    if found.template is None:
        return "no literal text (a re-raise or a forwarded error string)"
    if found.kind in KIND_OFF:
        return KIND_OFF[found.kind]
    for file, function, text, reason in OFF_PATH:
        if (
            re.fullmatch(file, found.file)
            and (function is None or re.fullmatch(function, found.function))
            and (text is None or re.fullmatch(text, found.template, re.S))
        ):
            return reason
    return None


# --------------------------------------------------------------------------------------------------
# The check
# --------------------------------------------------------------------------------------------------
@dataclass
class CheckReport:
    """What :func:`check` found for one release."""

    release: str
    files: int = 0
    sites: int = 0  # message sites in the walked files (all kinds)
    on_path: int = 0  # distinct (file, function, kind, text) on the path
    catalogued: int = 0  # of those, matched by a catalogue entry with the right release range
    missing: list[str] = field(default_factory=list)  # on the path, no catalogue entry of that text and site
    wrong_range: list[str] = field(default_factory=list)  # catalogued at that site, but not for this release
    not_in_sources: list[str] = field(default_factory=list)  # a catalogue site claims this release; no such site

    @property
    def ok(self) -> bool:
        return not (self.missing or self.wrong_range or self.not_in_sources)

    def counts(self) -> dict[str, int]:
        return {
            "files": self.files,
            "found": self.sites,
            "on_path": self.on_path,
            "catalogued": self.catalogued,
            "missing": len(self.missing),
            "wrong_ranges": len(self.wrong_range) + len(self.not_in_sources),
        }

    def describe(self) -> str:
        lines = [f"SGLang {self.release}: {self.counts()}"]
        lines += [f"  missing from the catalogue: {m}" for m in self.missing]
        lines += [f"  release range wrong: {m}" for m in self.wrong_range]
        lines += [f"  catalogued for {self.release} but not in its sources: {m}" for m in self.not_in_sources]
        return "\n".join(lines)


def check(
    catalogue: Iterable,
    files: list[str],
    found: list[Found],
    release: str,
    defined: set[tuple[str, str]] | None = None,
) -> CheckReport:
    """Compare the catalogue (``kimi_viz.message_catalogue.CATALOGUE`` or a copy) with one release's message sites.

    ``defined`` (the release's functions, :func:`defined_functions`) also checks the sites of the messages
    torch or Python raise on SGLang's behalf: each function they name for this release must exist.
    """
    report = CheckReport(release, files=len(files), sites=len(found))
    claimed: dict[tuple[str, str, str, str], bool] = {}  # (file, function, kind, text) -> claims this release
    for message in catalogue:
        if message.origin != "sglang":
            for site in message.sites:
                if defined is not None and release in site.releases and (site.file, site.function) not in defined:
                    report.not_in_sources.append(f"{site.file} {site.function}: no such function ({message.key})")
            continue
        for site in message.sites:
            key = (site.file, site.function, site.kind, message.template)
            claimed[key] = claimed.get(key, False) or release in site.releases
    on_path = {(f.file, f.function, f.kind, f.template) for f in found if classify(f) is None}
    present = {(f.file, f.function, f.kind, f.template) for f in found if f.template is not None}
    report.on_path = len(on_path)
    for key in sorted(on_path, key=lambda k: tuple(str(p) for p in k)):
        file, function, kind, text = key
        shown = f"{file} {function} {kind}: {text!r}"
        if key not in claimed:
            report.missing.append(shown)
        elif not claimed[key]:
            report.wrong_range.append(shown)
        else:
            report.catalogued += 1
    for key, claims in sorted(claimed.items()):
        if claims and key not in present:
            file, function, kind, text = key
            report.not_in_sources.append(f"{file} {function} {kind}: {text!r}")
    return report
