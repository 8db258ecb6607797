"""A static call graph over one SGLang release's ``sglang/srt`` files, and what a Kimi request reaches in it.

No SGLang import: every module is read with ``ast`` when the walk first needs it (so only the modules
the graph reaches are parsed), located under the release's ``sglang/srt`` folder.

The graph's nodes are functions and methods, named as the message sites name them: the file relative to
``sglang/srt`` and the qualified name (``Class.method``, ``outer.inner``, ``function``). From the entry
points (:data:`ENTRIES`, each release takes those it defines) the walk follows:

- ``f(...)`` and a bare ``f`` (a callback handed on): a function nested in the enclosing functions, the
  module's own function or class, or a name the module imports (``from x import f``, ``import x as y``,
  relative imports; a package's re-exports followed);
- ``module.f(...)`` and dotted chains through modules, ``Class.m``;
- ``self.m`` / ``cls.m``: the method of the class the walk reached the function for, or of its bases
  (within sglang) — a base method reached for a subclass calls the subclass's overrides; ``super().m``:
  the next class after the defining one in that order;
- ``ClassName(...)``: its ``__init__`` (and ``__post_init__``), for that class; calling an instance: its
  ``__call__``, else ``forward`` (a torch module);
- attributes and local names bound to an instance: ``self.x = ClassName(...)`` in any method of the class
  (or its bases), ``x = ClassName(...)`` in the function or at module level, so ``self.x.m()`` and
  ``self.x(...)`` resolve.

Skipped, as a static reading cannot know them: calls on parameters and on values returned by calls
(``self.model.get_image_feature`` reached through a processor or model chosen at run time, hence the Kimi
models' own entry points), ``getattr``, registries and dispatch tables, and anything outside ``sglang``
(torch, transformers, the standard library). An entry can be a region of a function: only the bodies of
the ``if`` statements whose test names one of ``branch`` (the tokenizer manager's multimodal branch).
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

PACKAGE = "sglang.srt"


@dataclass(frozen=True)
class Entry:
    """One place a Kimi request enters SGLang's code: a function (file under ``sglang/srt``, qualified name)."""

    file: str
    function: str
    why: str
    branch: tuple[str, ...] = ()  # only the bodies of the ifs whose test names one of these
    on: str = ""  # "file:Class": the class the method runs for (a base method reached for a Kimi subclass)


_K3P = "multimodal/processors/kimi_k3.py"
_K25P = "multimodal/processors/kimi_k25.py"
_SERVER_OLD = "disaggregation/encode_server.py"  # the EPD encoder up to 0.5.18
_SERVER = "disaggregation/encoder/server.py"  # since 0.5.19
_RECEIVER_OLD = "disaggregation/encode_receiver.py"
_RECEIVER = "disaggregation/encoder/receiver.py"
_ENCODE = (
    "encode",
    "batch_encode",
    "encode_request",
    "encode_with_mooncake",
    "encode_with_global_cache",
    "encode_with_global_cache_mooncake",
    "send",
    "send_with_url",
)
_RECEIVE = (
    "MMReceiverBase.recv_mm_data",
    "MMReceiverBase.send_encode_request",
    "MMReceiverBase.process_waiting_requests",
    "MMReceiverHTTP.process_waiting_requests",
    "MMReceiverHTTP.encode",
    "MMReceiverGrpc.process_waiting_requests",
    "MMReceiverGrpc.encode",
)

ENTRIES: tuple[Entry, ...] = (
    # --- the request side: the tokenizer worker's processor call for a Kimi model --------------------------
    Entry(_K3P, "KimiK3ImageProcessor.process_mm_data_async", "the Kimi-K3 processor, once per request"),
    Entry(_K25P, "KimiK2_5VLImageProcessor.process_mm_data_async", "the Kimi-K2.5 processor, once per request"),
    *(
        Entry(
            "multimodal/processors/base_processor.py",
            "BaseMultimodalProcessor.get_validated_mm_data",
            "the EPD receiver's prompt building from received embeddings, with the Kimi processor's get_mm_data",
            on=on,
        )
        for on in (f"{_K3P}:KimiK3ImageProcessor", f"{_K25P}:KimiK2_5VLImageProcessor")
    ),
    # the processor callables the base class calls on what `_resolve_processor` returns (a tuple the walk
    # does not follow): the Kimi wrappers of the checkpoint processor
    *(
        Entry(_K3P, f"KimiK3GPUProcessorWrapper.{name}", "the K3 processor wrapper the base class calls")
        for name in ("__call__", "prepare_deferred", "prepare_image_features")
    ),
    Entry(_K25P, "KimiGPUProcessorWrapper.__call__", "the K2.5 processor wrapper the base class calls"),
    # --- the tokenizer manager's multimodal branch --------------------------------------------------------
    Entry(
        "managers/tokenizer_manager.py",
        "TokenizerManager._tokenize_one_request",
        "the tokenizer manager's multimodal branch: the processor or the EPD receiver",
        branch=("contains_mm_input", "should_run_mm_processor"),
    ),
    Entry(
        "managers/tokenizer_manager.py",
        "TokenizerManager._handle_epd_disaggregation_encode_request",
        "the tokenizer manager's dispatch of a multimodal request to the EPD encoder",
    ),
    # --- the scheduler's forward pass -------------------------------------------------------------------
    Entry("managers/mm_utils.py", "general_mm_embed_routine", "the forward pass's multimodal embedding"),
    Entry("managers/mm_utils.py", "embed_mm_inputs", "the forward pass's multimodal embedding"),
    Entry("managers/mm_schedule.py", "get_embedding_and_mask", "the splice, 0.5.18 on"),
    Entry("managers/mm_utils.py", "get_embedding_and_mask", "the splice, 0.5.17"),
    # --- the models: called through the model object the forward pass is handed ------------------------
    Entry("models/kimi_k3.py", "KimiK3ForConditionalGeneration.get_image_feature", "the K3 vision features"),
    Entry("models/kimi_k25.py", "KimiK25ForConditionalGeneration.get_image_feature", "the K2.5 vision features"),
    Entry(
        "models/kimi_k3.py",
        "KimiK3ForConditionalGeneration.preprocess_mm_for_encoder",
        "the K3 hook the EPD encoder looks up with getattr",
    ),
    # the deferred preprocessing output get_image_feature reads off each item's feature (an item's value)
    *(
        Entry("multimodal/encoder_preprocessing.py", f"EncoderPreprocessOutput.{name}", "the deferred split's output")
        for name in ("local_item_indices", "materialize_for_rank")
    ),
    # --- the EPD encoder: what its HTTP / gRPC / DP handlers call to encode and deliver images -----------
    *(
        Entry(file, f"MMEncoder.{name}", "the EPD encoder's image encode")
        for file in (_SERVER_OLD, _SERVER)
        for name in _ENCODE
    ),
    # --- the EPD receiver: the language server's side, tokenizer and scheduler ---------------------------
    *(Entry(file, name, "the EPD receiver") for file in (_RECEIVER_OLD, _RECEIVER) for name in _RECEIVE),
)


# --------------------------------------------------------------------------------------------------
# Modules
# --------------------------------------------------------------------------------------------------
@dataclass
class _Class:
    module: _Module
    qual: str
    node: ast.ClassDef
    methods: dict[str, str] = field(default_factory=dict)  # name -> qualified name

    @property
    def key(self) -> tuple[str, str]:
        return (self.module.rel, self.qual)


@dataclass
class _Module:
    name: str  # dotted
    rel: str  # relative to sglang/srt
    tree: ast.Module
    package: str  # the package relative imports start from
    functions: dict[str, ast.FunctionDef | ast.AsyncFunctionDef] = field(default_factory=dict)  # qual -> node
    classes: dict[str, _Class] = field(default_factory=dict)  # qual -> class
    imports: dict[str, tuple[str, str | None]] = field(default_factory=dict)  # local -> (module, attr or None)
    globals: dict[str, list[ast.AST]] = field(default_factory=dict)  # module-level name -> values bound


def _index(module: _Module) -> None:
    def visit(node: ast.AST, prefix: str, owner: _Class | None) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef)):
                qual = prefix + child.name
                module.functions[qual] = child
                if owner is not None:
                    owner.methods.setdefault(child.name, qual)
                visit(child, qual + ".", None)
            elif isinstance(child, ast.ClassDef):
                qual = prefix + child.name
                cls = _Class(module, qual, child)
                module.classes[qual] = cls
                visit(child, qual + ".", cls)
            elif isinstance(child, (ast.Import, ast.ImportFrom)):
                _imports(module, child)
            else:
                visit(child, prefix, owner)

    visit(module.tree, "", None)
    for node in module.tree.body:
        if isinstance(node, ast.Assign):
            for target in node.targets:
                if isinstance(target, ast.Name):
                    module.globals.setdefault(target.id, []).append(node.value)
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name) and node.value is not None:
            module.globals.setdefault(node.target.id, []).append(node.value)


def _imports(module: _Module, node: ast.Import | ast.ImportFrom) -> None:
    if isinstance(node, ast.Import):
        for alias in node.names:
            if alias.asname:
                module.imports[alias.asname] = (alias.name, None)
            else:
                head = alias.name.split(".")[0]
                module.imports.setdefault(head, (head, None))
        return
    base = node.module or ""
    if node.level:
        parts = module.package.split(".")
        parts = parts[: len(parts) - (node.level - 1)] if node.level > 1 else parts
        base = ".".join([*parts, *([base] if base else [])])
    for alias in node.names:
        if alias.name != "*":
            module.imports.setdefault(alias.asname or alias.name, (base, alias.name))


# --------------------------------------------------------------------------------------------------
# What an expression can stand for
# --------------------------------------------------------------------------------------------------
# ("module", dotted) | ("func", rel, qual, self class key or None) | ("class", class key) | ("instance", class key)
Symbol = tuple


def _own(node: ast.AST, roots: list[ast.AST] | None = None) -> Iterator[ast.AST]:
    """Every node of a function body (or of ``roots``), lambdas included, nested functions and classes not."""
    stack = list(roots if roots is not None else ast.iter_child_nodes(node))
    while stack:
        child = stack.pop()
        yield child
        if not isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            stack.extend(ast.iter_child_nodes(child))


class CallGraph:
    """The call graph of the release whose ``sglang/srt`` folder is ``srt``, built as far as the walk reaches."""

    def __init__(self, srt: Path):
        self.srt = srt
        self._modules: dict[str, _Module | None] = {}
        self._attributes: dict[tuple[str, str], dict[str, list[Symbol]]] = {}
        self._locals: dict[tuple[str, str], dict[str, list[ast.AST]]] = {}
        # (file, function) -> parameter -> what the calls reached so far pass for it
        self.bindings: dict[tuple[str, str], dict[str, list[Symbol]]] = {}
        self.changed = False

    # --- modules ----------------------------------------------------------------------------------
    def module(self, name: str) -> _Module | None:
        """Return the module ``name`` (dotted, under sglang.srt), parsed on first use; None when there is none."""
        if name in self._modules:
            return self._modules[name]
        found = None
        if name == PACKAGE or name.startswith(PACKAGE + "."):
            rel = name[len(PACKAGE) + 1 :].replace(".", "/")
            for path, is_package in ((f"{rel}.py", False), (f"{rel}/__init__.py" if rel else "__init__.py", True)):
                file = self.srt / path
                if file.is_file():
                    try:
                        tree = ast.parse(file.read_text(encoding="utf-8"))
                    except SyntaxError:
                        break
                    package = name if is_package else name.rpartition(".")[0]
                    found = _Module(name, path, tree, package)
                    _index(found)
                    break
        self._modules[name] = found
        return found

    def by_file(self, rel: str) -> _Module | None:
        dotted = rel.removesuffix(".py").removesuffix("/__init__").replace("/", ".")
        return self.module(f"{PACKAGE}.{dotted}" if dotted != "__init__" else PACKAGE)

    @property
    def parsed(self) -> list[str]:
        """The files parsed so far, relative to sglang/srt."""
        return sorted(m.rel for m in self._modules.values() if m is not None)

    def _class(self, key: tuple[str, str]) -> _Class | None:
        module = self.by_file(key[0])
        return module.classes.get(key[1]) if module else None

    # --- symbols ----------------------------------------------------------------------------------
    def _member(self, module: _Module, name: str, depth: int = 0) -> list[Symbol]:
        """What ``module.name`` is: its own function or class, a submodule, or what it imports as ``name``."""
        if name in module.classes:
            return [("class", module.classes[name].key)]
        if name in module.functions:
            return [("func", module.rel, name, None)]
        if name in module.globals:
            return self._values(module, None, module.globals[name], depth + 1)
        sub = f"{module.name}.{name}"
        if self.module(sub) is not None:
            return [("module", sub)]
        if name in module.imports and depth < 6:
            return self._imported(*module.imports[name], depth + 1)
        return []

    def _imported(self, base: str, attr: str | None, depth: int) -> list[Symbol]:
        if attr is None:
            return [("module", base)] if self.module(base) is not None or base == "sglang" else []
        module = self.module(base)
        if module is None:
            return [("module", f"{base}.{attr}")] if self.module(f"{base}.{attr}") is not None else []
        return self._member(module, attr, depth)

    def mro(self, key: tuple[str, str]) -> list[_Class]:
        """The class and its bases within sglang, depth first, left to right, each once."""
        out: list[_Class] = []
        stack = [key]
        while stack:
            current = self._class(stack.pop(0))
            if current is None or current in out:
                continue
            out.append(current)
            bases: list[tuple[str, str]] = []
            for base in current.node.bases:
                for symbol in self._resolve(current.module, None, base, None, 0):
                    if symbol[0] == "class":
                        bases.append(symbol[1])
            stack = bases + stack
        return out

    def _method(self, key: tuple[str, str], name: str, after: tuple[str, str] | None = None) -> list[Symbol]:
        classes = self.mro(key)
        if after is not None:
            keys = [c.key for c in classes]
            classes = classes[keys.index(after) + 1 :] if after in keys else []
        for cls in classes:
            if name in cls.methods:
                return [("func", cls.module.rel, cls.methods[name], key)]
        return []

    def _attribute_types(self, key: tuple[str, str]) -> dict[str, list[Symbol]]:
        """``self.x = ClassName(...)`` anywhere in the class or its bases: x -> instances."""
        if key in self._attributes:
            return self._attributes[key]
        self._attributes[key] = found = {}
        for cls in self.mro(key):
            for qual in cls.methods.values():
                function = cls.module.functions[qual]
                for node in _own(function):
                    if isinstance(node, (ast.Assign, ast.AnnAssign)) and node.value is not None:
                        targets = node.targets if isinstance(node, ast.Assign) else [node.target]
                        for target in targets:
                            if (
                                isinstance(target, ast.Attribute)
                                and isinstance(target.value, ast.Name)
                                and target.value.id == "self"
                            ):
                                for symbol in self._values(cls.module, (qual, key), [node.value], 1):
                                    if symbol not in found.setdefault(target.attr, []):
                                        found[target.attr].append(symbol)
                                    if symbol[0] == "instance" and isinstance(node.value, ast.Call):
                                        for init in self._method(symbol[1], "__init__"):
                                            self._bind(cls.module, (qual, key), node.value, init[1:])
        return found

    def _local_values(self, module: _Module, qual: str) -> dict[str, list[ast.AST]]:
        key = (module.rel, qual)
        if key not in self._locals:
            values: dict[str, list[ast.AST]] = {}
            for node in _own(module.functions[qual]):
                if isinstance(node, ast.Assign):
                    for target in node.targets:
                        if isinstance(target, ast.Name):
                            values.setdefault(target.id, []).append(node.value)
                elif (
                    isinstance(node, (ast.AnnAssign, ast.NamedExpr))
                    and node.value is not None
                    and isinstance(node.target, ast.Name)
                ):
                    values.setdefault(node.target.id, []).append(node.value)
            self._locals[key] = values
        return self._locals[key]

    def _values(self, module: _Module, where, values: list[ast.AST], depth: int) -> list[Symbol]:
        """The instances (and functions, classes, modules) a bound value can be: ``Class(...)``, a name, a choice."""
        out: list[Symbol] = []
        for value in values:
            for part in _alternatives(value):
                if isinstance(part, ast.Call):
                    for symbol in self._resolve(module, where, part.func, None, depth + 1):
                        if symbol[0] == "class":
                            out.append(("instance", symbol[1]))
                elif isinstance(part, (ast.Name, ast.Attribute)):
                    out.extend(self._resolve(module, where, part, None, depth + 1))
        return list(dict.fromkeys(out))

    def _resolve(self, module: _Module, where, node: ast.AST, context, depth: int) -> list[Symbol]:
        """What ``node`` can stand for, in ``module`` inside ``where`` = (qual, self class key) or None."""
        if depth > 8:
            return []
        qual, self_key = where if where else (None, None)
        if isinstance(node, ast.Name):
            name = node.id
            if qual is not None:
                if name in ("self", "cls") and self_key is not None:
                    return [("instance" if name == "self" else "class", self_key)]
                scope = qual
                while scope:  # a function nested in this one or in an enclosing one
                    if f"{scope}.{name}" in module.functions:
                        return [("func", module.rel, f"{scope}.{name}", self_key)]
                    scope = scope.rpartition(".")[0]
                local = self._local_values(module, qual) if qual in module.functions else {}
                passed = self.bindings.get((module.rel, qual), {}).get(name, [])
                if name in local or passed:
                    values = self._values(module, where, local.get(name, []), depth + 1)
                    return list(dict.fromkeys([*values, *passed]))
            return self._member_here(module, name, depth)
        if isinstance(node, ast.Attribute):
            out: list[Symbol] = []
            if node.attr == "__class__" and isinstance(node.value, ast.Name) and node.value.id == "self" and self_key:
                return [("class", self_key)]
            for base in self._resolve(module, where, node.value, context, depth + 1):
                if base[0] == "module":
                    target = self.module(base[1])
                    if target is not None:
                        out.extend(self._member(target, node.attr, depth + 1))
                    elif self.module(f"{base[1]}.{node.attr}") is not None:
                        out.append(("module", f"{base[1]}.{node.attr}"))
                elif base[0] == "class":
                    out.extend(self._method(base[1], node.attr))
                    cls = self._class(base[1])
                    if cls is not None and f"{cls.qual}.{node.attr}" in cls.module.classes:
                        out.append(("class", cls.module.classes[f"{cls.qual}.{node.attr}"].key))
                elif base[0] == "instance":
                    methods = self._method(base[1], node.attr)
                    out.extend(methods or self._attribute_types(base[1]).get(node.attr, []))
            return out
        if isinstance(node, ast.Call):  # super().m, type(self).m
            if isinstance(node.func, ast.Name) and node.func.id == "super" and self_key is not None and qual:
                return [("super", self_key, _defining_class(module, qual))]
            if (
                isinstance(node.func, ast.Name)
                and node.func.id == "type"
                and node.args
                and self_key is not None
                and isinstance(node.args[0], ast.Name)
                and node.args[0].id == "self"
            ):
                return [("class", self_key)]
            return []
        return []

    def _member_here(self, module: _Module, name: str, depth: int) -> list[Symbol]:
        if name in module.classes:
            return [("class", module.classes[name].key)]
        if name in module.functions:
            return [("func", module.rel, name, None)]
        if name in module.imports:
            return self._imported(*module.imports[name], depth + 1)
        if name in module.globals:
            return self._values(module, None, module.globals[name], depth + 1)
        return []

    # --- the walk ---------------------------------------------------------------------------------
    def callees(self, rel: str, qual: str, self_key, roots: list[ast.AST] | None = None) -> list[tuple]:
        """The (file, qualified name, self class) each call or function reference in the function reaches."""
        module = self.by_file(rel)
        if module is None or qual not in module.functions:
            return []
        where = (qual, self_key)
        out: list[tuple] = []
        for node in _own(module.functions[qual], roots):
            if isinstance(node, ast.Call):
                targets: list[tuple] = []
                func = node.func
                if isinstance(func, ast.Attribute) and isinstance(func.value, ast.Call):
                    for symbol in self._resolve(module, where, func.value, None, 0):
                        if symbol[0] == "super":
                            targets.extend(found[1:] for found in self._method(symbol[1], func.attr, after=symbol[2]))
                for symbol in self._resolve(module, where, func, None, 0):
                    if symbol[0] == "func":
                        targets.append(symbol[1:])
                    elif symbol[0] == "class":
                        for name in ("__init__", "__post_init__"):
                            targets.extend(found[1:] for found in self._method(symbol[1], name))
                    elif symbol[0] == "instance":
                        found = self._method(symbol[1], "__call__") or self._method(symbol[1], "forward")
                        targets.extend(f[1:] for f in found)
                out.extend(targets)
                for target in targets:
                    self._bind(module, where, node, target)
            elif isinstance(node, (ast.Name, ast.Attribute)) and isinstance(node.ctx, ast.Load):
                out.extend(s[1:] for s in self._resolve(module, where, node, None, 0) if s[0] == "func")
        return list(dict.fromkeys(out))

    def _bind(self, module: _Module, where, call: ast.Call, target: tuple) -> None:
        """Note what ``call`` passes to the parameters of ``target`` (classes, instances, functions in sglang)."""
        callee = self.by_file(target[0])
        function = callee.functions.get(target[1]) if callee else None
        if function is None:
            return
        params = [a.arg for a in (*function.args.posonlyargs, *function.args.args)]
        if params and params[0] in ("self", "cls"):
            params = params[1:]
        passed: list[tuple[str, ast.AST]] = []
        for index, arg in enumerate(call.args):
            if isinstance(arg, ast.Starred) or index >= len(params):
                break
            passed.append((params[index], arg))
        names = set(params) | {a.arg for a in function.args.kwonlyargs}
        passed += [(k.arg, k.value) for k in call.keywords if k.arg in names]
        for param, value in passed:
            if not isinstance(value, (ast.Name, ast.Attribute, ast.Call)):
                continue
            symbols = [s for s in self._values(module, where, [value], 1) if s[0] != "module"]
            bound = self.bindings.setdefault((target[0], target[1]), {}).setdefault(param, [])
            for symbol in symbols:
                if symbol not in bound:
                    bound.append(symbol)
                    self.changed = True


def _alternatives(node: ast.AST) -> list[ast.AST]:
    if isinstance(node, ast.IfExp):
        return _alternatives(node.body) + _alternatives(node.orelse)
    if isinstance(node, ast.BoolOp):
        return [part for value in node.values for part in _alternatives(value)]
    if isinstance(node, ast.Await):
        return _alternatives(node.value)
    return [node]


def _defining_class(module: _Module, qual: str) -> tuple[str, str] | None:
    scope = qual.rpartition(".")[0]
    while scope:
        if scope in module.classes:
            return module.classes[scope].key
        scope = scope.rpartition(".")[0]
    return None


def _branch_roots(function: ast.AST, names: tuple[str, ...]) -> list[ast.AST]:
    """The bodies of the ifs in ``function`` whose test names one of ``names``."""
    roots: list[ast.AST] = []
    for node in _own(function):
        if isinstance(node, ast.If) and any(isinstance(n, ast.Name) and n.id in names for n in ast.walk(node.test)):
            roots.extend(node.body)
    return roots


# --------------------------------------------------------------------------------------------------
# What a Kimi request reaches
# --------------------------------------------------------------------------------------------------
@dataclass
class Reach:
    """The functions reachable from the entry points of one release."""

    entries: list[Entry]  # the entry points this release defines
    functions: set[tuple[str, str]]  # (file, qualified name): reached as a whole
    regions: dict[tuple[str, str], list[tuple[int, int]]]  # (file, qualified name): only these line ranges
    parsed: list[str]  # the files the walk read
    via: dict[tuple[str, str], tuple[str, str]] = field(default_factory=dict)  # a function -> one caller

    def path(self, file: str, function: str) -> list[str]:
        """One chain of calls from an entry point to the function: ``file:function`` each."""
        chain, current = [], (file, function)
        while current is not None and len(chain) < 50:
            chain.append(f"{current[0]}:{current[1]}")
            current = self.via.get(current)
        return chain[::-1]

    def reached(self, file: str, function: str, line: int) -> bool:
        """Whether the message at ``line`` of ``function`` in ``file`` is on a reached path."""
        if (file, function) in self.functions:
            return True
        return any(start <= line <= end for start, end in self.regions.get((file, function), ()))

    @property
    def files(self) -> list[str]:
        """The files holding a reached function, relative to sglang/srt."""
        return sorted({file for file, _ in self.functions} | {file for file, _ in self.regions})


def reach(srt: Path, entries: tuple[Entry, ...] = ENTRIES) -> Reach:
    """Return what the release whose ``sglang/srt`` folder is ``srt`` reaches from ``entries`` (those it defines)."""
    graph = CallGraph(srt)
    present: list[Entry] = []
    starts: list[tuple] = []  # (file, function, self class, roots or None)
    regions: dict[tuple[str, str], list[tuple[int, int]]] = {}
    for entry in entries:
        module = graph.by_file(entry.file)
        if module is None or entry.function not in module.functions:
            continue
        cls = _defining_class(module, entry.function)
        if entry.on:
            file, _, name = entry.on.partition(":")
            owner = graph.by_file(file)
            if owner is None or name not in owner.classes:
                continue
            cls = owner.classes[name].key
        present.append(entry)
        roots = None
        if entry.branch:
            roots = _branch_roots(module.functions[entry.function], entry.branch)
            regions.setdefault((entry.file, entry.function), []).extend(
                (root.lineno, root.end_lineno or root.lineno) for root in roots
            )
        starts.append((entry.file, entry.function, cls, roots))
    seen: set[tuple] = set()
    via: dict[tuple[str, str], tuple[str, str]] = {}
    while True:  # again over everything reached while the calls pass something new to a parameter
        graph.changed = False
        todo = [start for start in starts if start[3] is None] + sorted(seen, key=str)
        for file, function, cls, roots in starts:
            if roots is not None:
                for callee in graph.callees(file, function, cls, roots):
                    via.setdefault(callee[:2], (file, function))
                    todo.append(callee)
        todo = [state[:3] for state in todo]
        seen.update(todo)
        while todo:
            state = todo.pop()
            for callee in graph.callees(*state):
                if callee not in seen:
                    seen.add(callee)
                    todo.append(callee)
                    if callee[:2] != state[:2]:
                        via.setdefault(callee[:2], state[:2])
        if not graph.changed:
            break
        graph._attributes.clear()
    functions = {(file, qual) for file, qual, _ in seen}
    return Reach(present, functions, regions, graph.parsed, via)
