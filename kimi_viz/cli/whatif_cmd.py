"""``kimi-viz whatif``: would a request carrying these images fail on a given SGLang deployment?"""

from __future__ import annotations

import argparse
import json
from typing import Any

from ..errors import WhatIfError
from ..request.settings import DEFERS, EPD_BACKENDS, OPTION_OF, SERVINGS, TRANSPORTS, ServerSettings
from . import emit

MODES = ("shapes", "pixels")


def _flag_help(field: str, extra: str = "") -> str:
    option = OPTION_OF[field]
    return f"{option.meaning}. SGLang: {option.sglang}{extra}"


def register(subparsers: argparse._SubParsersAction) -> None:
    """Add the ``whatif`` sub-command."""
    parser = subparsers.add_parser(
        "whatif",
        help="would a request with these images fail on SGLang V at attention-TP N? (--sweep: every release × TP)",
        description="Build the items SGLang's request side (multimodal/processors/kimi_k3.py) of a release would "
        "build for one request carrying these images, under the given server settings, then replay "
        "get_image_feature on every attention-TP rank and print the verdict and why. --sweep prints every release "
        "× attention-TP 1, 2, 4, 8; --minimize shrinks a failing request to the fewest images (in order) that "
        "still fail with the same message and names the image to look at. --chat FILE starts from a client's "
        "request body: the request side's own checks (placeholders against images), then the same replay. "
        "Exit status: 0 nothing fails, 1 a rank or the request side "
        "raises (in some cell for --sweep; the minimal set reproduces it for --minimize), 2 bad input, 3 a silent "
        "mismatch.",
        epilog="--json prints one object (the what-if, or the minimal set); with --sweep one JSON object per cell, "
        "one per line. Image positions for the cache-hit options count from 0 in the order given.",
    )
    parser.add_argument("images", nargs="*", metavar="IMAGE", help="the request's images, in order")
    load = parser.add_argument_group(
        "under load",
        "several requests prefilled together: their images reach get_image_feature in one call "
        "(docs/whatif.md, 'Workloads')",
    )
    load.add_argument(
        "--together",
        action="store_true",
        help="each IMAGE is a single-image request of its own, all arriving together",
    )
    load.add_argument(
        "--requests",
        metavar="FILE",
        help='a workload as JSON: {"requests": [{"images": [...], "text": {...}, "arrival": 0}, ...]}',
    )
    load.add_argument(
        "--chat",
        metavar="FILE",
        help="a client's request as JSON: an OpenAI chat completions body (messages with text and image_url parts), "
        "or a /generate body (text or input_ids, image_data); its own checks first, then the same replay",
    )
    load.add_argument(
        "--image-prompts",
        default="honoured",
        metavar="{honoured,ignored}",
        help="--chat: whether the checkpoint's apply_chat_template puts SGLang's image_prompts (<|media_pad|>) at "
        "the image parts (honoured) or renders its own marker (ignored)",
    )
    load.add_argument(
        "--typed-tokens",
        default="ids",
        metavar="{ids,text}",
        help="--chat: whether media tokens written in text (<|media_pad|>) encode to their ids (ids) or as text",
    )
    load.add_argument(
        "--chunked-prefill-size",
        metavar="N",
        default=None,
        help="SGLang's --chunked-prefill-size (default 8192; -1 or 0 turns chunked prefill off)",
    )
    load.add_argument(
        "--mm-embedding-cache-size",
        metavar="MB",
        default=None,
        help="the embedding cache's size in MB, SGLANG_VLM_CACHE_SIZE_MB (default 100; 0 disables it)",
    )
    load.add_argument(
        "--platform",
        default="cuda",
        metavar="{cuda,cpu,hip,npu,xpu}",
        help="the server's platform: cuda and cpu encode every request's misses in one call, hip/npu/xpu per request",
    )
    parser.add_argument("--sglang-version", metavar="V", help="the release, 0.5.17 ... 0.5.23 (not with --sweep)")
    parser.add_argument(
        "--tp",
        metavar="N",
        help="attention-TP size: SGLang's --tp-size (over --dp-size with --enable-dp-attention); not with --sweep",
    )
    parser.add_argument("--sweep", action="store_true", help="every release × attention-TP 1, 2, 4, 8")
    parser.add_argument("--minimize", action="store_true", help="shrink a failing request to its minimal images")
    parser.add_argument("--json", action="store_true", help="print JSON (one object per cell with --sweep)")
    parser.add_argument(
        "--emit-repro",
        metavar="DIR",
        help="also write a standalone pytest file that runs SGLang's own get_image_feature on this request (the "
        "minimal failing set with --minimize): it fails on a release with the bug and passes on the fix",
    )
    parser.add_argument("--serving", default="normal", metavar="{normal,epd-encoder}", help=_flag_help("serving"))
    parser.add_argument("--epd-backend", default=None, metavar="{cpu,gpu}", help=_flag_help("epd_backend"))
    parser.add_argument(
        "--mm-feature-transport",
        default="auto",
        metavar="{auto,cpu,cuda_ipc,cuda_vmm}",
        help=_flag_help("transport"),
    )
    parser.add_argument("--defer", default="auto", metavar="{auto,off}", help=_flag_help("defer"))
    parser.add_argument(
        "--mm-preprocess-cache-size-mb", default=None, metavar="N", help=_flag_help("preprocess_cache_mb")
    )
    parser.add_argument(
        "--preprocess-cache-hit",
        action="append",
        default=[],
        metavar="I[,J...]",
        help=_flag_help("preprocess_cache_hits"),
    )
    parser.add_argument(
        "--embedding-cache-hit",
        action="append",
        default=[],
        metavar="I[,J...]",
        help=_flag_help("embedding_cache_hits"),
    )
    parser.add_argument(
        "--producer-config", default="kimi-k3", metavar="PRESET|PATH", help=_flag_help("producer_config")
    )
    parser.add_argument("--consumer-config", default=None, metavar="PRESET|PATH", help=_flag_help("consumer_config"))
    parser.add_argument(
        "--mode",
        default="shapes",
        metavar="{shapes,pixels}",
        help="shapes (default: image headers only, the same outcomes) or pixels (decode and materialize)",
    )
    parser.add_argument(
        "--device",
        default="auto",
        metavar="{auto,cpu,cuda}",
        help="where gpu-backend items are materialized in pixels mode",
    )
    parser.set_defaults(func=run)


def _choice(value: str, allowed: tuple[str, ...], option: str) -> str:
    if value not in allowed:
        raise WhatIfError(f"{option} {value!r}: expected one of {', '.join(allowed)}")
    return value


def _int(text: str, option: str, *, low: int) -> int:
    try:
        value = int(text)
    except (TypeError, ValueError):
        raise WhatIfError(f"{option} {text!r}: expected a whole number >= {low}") from None
    if value < low:
        what = "an attention-TP size of at least 1" if option == "--tp" else f"a number >= {low}"
        raise WhatIfError(f"{option} {value}: expected {what}")
    return value


def _positions(values: list[str], option: str) -> tuple[int, ...]:
    out = []
    for value in values:
        for part in str(value).split(","):
            if part.strip():
                out.append(_int(part.strip(), option, low=0))
    return tuple(out)


def settings_from_args(args: argparse.Namespace) -> ServerSettings:
    """Return the :class:`ServerSettings` the command-line options ask for (raise WhatIfError on bad ones)."""
    cache_mb = args.mm_preprocess_cache_size_mb
    return ServerSettings(
        serving=_choice(args.serving, SERVINGS, "--serving"),  # type: ignore[arg-type]
        epd_backend=None if args.epd_backend is None else _choice(args.epd_backend, EPD_BACKENDS, "--epd-backend"),  # type: ignore[arg-type]
        transport=_choice(args.mm_feature_transport, TRANSPORTS, "--mm-feature-transport"),  # type: ignore[arg-type]
        defer=_choice(args.defer, DEFERS, "--defer"),  # type: ignore[arg-type]
        preprocess_cache_mb=None if cache_mb is None else _int(cache_mb, "--mm-preprocess-cache-size-mb", low=0),
        preprocess_cache_hits=_positions(args.preprocess_cache_hit, "--preprocess-cache-hit"),
        embedding_cache_hits=_positions(args.embedding_cache_hit, "--embedding-cache-hit"),
        producer_config=args.producer_config,
        consumer_config=args.consumer_config,
    )


def _is_workload(args: argparse.Namespace) -> bool:
    return bool(args.together or args.requests is not None or args.chat is not None)


def load_settings_from_args(args: argparse.Namespace) -> Any:
    """Return the :class:`~kimi_viz.schedule.workload_replay.LoadSettings` the load options ask for."""
    from ..schedule.cache import DEFAULT_CACHE_MB
    from ..schedule.workload_replay import LoadSettings
    from ..schedule.scheduler import DEFAULT_CHUNKED_PREFILL
    from ..schedule.trace import PLATFORMS

    chunk = DEFAULT_CHUNKED_PREFILL
    if args.chunked_prefill_size is not None:
        chunk = _int(args.chunked_prefill_size, "--chunked-prefill-size", low=-1)
    cache = float(DEFAULT_CACHE_MB)
    if args.mm_embedding_cache_size is not None:
        cache = float(_int(args.mm_embedding_cache_size, "--mm-embedding-cache-size", low=0))
    platform = _choice(args.platform, PLATFORMS, "--platform")
    return LoadSettings(chunked_prefill_size=chunk, cache_mb=cache, platform=platform)  # type: ignore[arg-type]


def _check_load(args: argparse.Namespace) -> None:
    if args.chat is not None:
        given = [
            option
            for option, value in (("IMAGE", args.images), ("--together", args.together), ("--requests", args.requests))
            if value
        ]
        if given:
            raise WhatIfError(f"--chat FILE with {given[0]}: the request file names its images; drop {given[0]}")
        if args.minimize:
            raise WhatIfError("--chat with --minimize: a client's request is replayed as it is; drop --minimize")
    elif args.image_prompts != "honoured" or args.typed_tokens != "ids":
        raise WhatIfError("--image-prompts / --typed-tokens describe how a --chat request is rendered: add --chat FILE")
    if args.together and args.requests is not None:
        raise WhatIfError("--together with --requests: pick one (IMAGEs as single-image requests, or a workload file)")
    if args.requests is not None and args.images:
        raise WhatIfError("--requests FILE with IMAGEs: the file names the images; drop the IMAGE arguments")
    if args.together and len(args.images) < 1:
        raise WhatIfError("--together: no images; give the IMAGEs, one single-image request each")
    if not _is_workload(args):
        given = [
            option
            for option, value in (
                ("--chunked-prefill-size", args.chunked_prefill_size),
                ("--mm-embedding-cache-size", args.mm_embedding_cache_size),
                ("--platform", None if args.platform == "cuda" else args.platform),
            )
            if value is not None
        ]
        if given:
            raise WhatIfError(
                f"{given[0]} describes a workload: add --together (each IMAGE its own request) or --requests FILE"
            )


def _check_request(args: argparse.Namespace) -> None:
    _check_load(args)
    if args.emit_repro is not None:
        if _is_workload(args) or args.sweep:
            raise WhatIfError(
                "--emit-repro writes one request's get_image_feature call: use it with IMAGEs (and --minimize), "
                "not with --sweep, --together, --requests or --chat"
            )
        from ..files import check_output

        check_output(args.emit_repro, what="--emit-repro")
    if not args.images and args.requests is None and args.chat is None:
        raise WhatIfError("no images: the request needs at least one IMAGE (e.g. kimi-viz whatif a.png b.jpg ...)")
    if args.sweep and args.minimize:
        raise WhatIfError("--sweep with --minimize: pick one (minimize one release and TP size, or sweep them all)")
    if args.sweep and (args.sglang_version is not None or args.tp is not None):
        raise WhatIfError(
            "--sweep covers every release and attention-TP 1, 2, 4, 8; drop --sglang-version and --tp (or drop --sweep)"
        )
    if not args.sweep and (args.sglang_version is None or args.tp is None):
        missing = " and ".join(
            n for n, v in (("--sglang-version", args.sglang_version), ("--tp", args.tp)) if v is None
        )
        raise WhatIfError(
            f"{missing} missing: name the deployment (e.g. --sglang-version 0.5.18 --tp 2), or pass --sweep"
        )
    _choice(args.mode, MODES, "--mode")
    _choice(args.device, ("auto", "cpu", "cuda"), "--device")


def _print_json(data: Any) -> None:
    emit(json.dumps(data, indent=2, default=str))


def _run_chat(args: argparse.Namespace, settings: ServerSettings) -> int:
    """Answer for a client's request (``--chat FILE``): its own checks, then the load replay."""
    from ..request.chat import Renderer, read_request

    renderer = Renderer(
        image_prompts=_choice(args.image_prompts, ("honoured", "ignored"), "--image-prompts") == "honoured",
        typed_tokens=_choice(args.typed_tokens, ("ids", "text"), "--typed-tokens") == "ids",
    )
    load = load_settings_from_args(args)
    request = read_request(args.chat)
    if args.sweep:
        from .._whatif.chat import sweep_chat

        swept = sweep_chat(request, renderer=renderer, settings=settings, load=load)
        if args.json:
            for cell in swept.to_json():
                emit(json.dumps(cell, default=str))
        else:
            emit(swept.text())
        return 1 if swept.failed else 0
    from .._whatif.chat import whatif_chat

    answer = whatif_chat(
        request,
        sglang_version=args.sglang_version,
        tp_size=_int(args.tp, "--tp", low=1),
        renderer=renderer,
        settings=settings,
        load=load,
        mode=args.mode,
        device=args.device,
    )
    if args.json:
        _print_json(answer.to_json())
    else:
        emit(answer.text())
    return answer.exit_code


def _run_workload(args: argparse.Namespace, settings: ServerSettings) -> int:
    """Answer for a workload (``--together`` or ``--requests``): one deployment, ``--sweep`` or ``--minimize``."""
    from ..schedule.workload import read_workload, together

    if args.chat is not None:
        return _run_chat(args, settings)
    load = load_settings_from_args(args)
    workload = read_workload(args.requests) if args.requests is not None else together(args.images)
    if args.sweep:
        from .._whatif._load_sweep import sweep_load

        swept = sweep_load(workload, settings=settings, load=load)
        if args.json:
            for cell in swept.to_json():
                emit(json.dumps(cell, default=str))
        else:
            emit(swept.text())
        return 1 if any(c.error is not None for c in swept.cells) else 0
    tp = _int(args.tp, "--tp", low=1)
    if args.minimize:
        from .._whatif._load_minimize import minimize_load

        found = minimize_load(workload, sglang_version=args.sglang_version, tp_size=tp, settings=settings, load=load)
        if args.json:
            _print_json(found.to_json())
        else:
            emit(found.text())
        return 0 if found.target is None else 1
    from .._whatif.load import whatif_load

    answer = whatif_load(
        workload,
        sglang_version=args.sglang_version,
        tp_size=tp,
        settings=settings,
        load=load,
        mode=args.mode,
        device=args.device,
    )
    if args.json:
        _print_json(answer.to_json())
    else:
        emit(answer.text())
    return answer.exit_code


def run(args: argparse.Namespace) -> int:
    """Answer the what-if; return 0 (nothing fails), 1 (a rank raises) or 3 (silent mismatch)."""
    _check_request(args)
    settings = settings_from_args(args)
    if _is_workload(args):
        return _run_workload(args, settings)
    if args.sweep:
        from .._whatif._sweep import sweep

        result = sweep(args.images, settings=settings, mode=args.mode, device=args.device)
        if args.json:
            for cell in result.to_json():
                emit(json.dumps(cell, default=str))
        else:
            emit(result.text())
        return 1 if any(c.error is not None for c in result.cells) else 0
    tp = _int(args.tp, "--tp", low=1)
    if args.minimize:
        from .._whatif._minimize import minimize

        found = minimize(args.images, sglang_version=args.sglang_version, tp_size=tp, settings=settings, mode=args.mode)
        if args.json:
            _print_json(found.to_json())
        else:
            emit(found.text())
        if args.emit_repro and found.target is not None:
            _emit_repro(found, args.emit_repro)
        return 0 if found.target is None else 1
    from .._whatif.run import whatif

    answer = whatif(
        args.images,
        sglang_version=args.sglang_version,
        tp_size=tp,
        settings=settings,
        mode=args.mode,
        device=args.device,
    )
    if args.json:
        _print_json(answer.to_json())
    else:
        emit(answer.text())
    if args.emit_repro:
        _emit_repro(answer, args.emit_repro)
    return answer.exit_code


def _emit_repro(source: Any, out_dir: str) -> None:
    """Write the standalone SGLang repro of ``source`` and say where (on stderr, so --json stays one object)."""
    from ..repro import emit_repro

    path = emit_repro(source, out_dir)
    emit(f"kimi-viz whatif: wrote the repro {path} (run it with: python -m pytest {path.parent})", err=True)
