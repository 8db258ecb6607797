"""``kimi-viz whatif``: would this request (or workload, or client's request) fail on a given SGLang deployment?

Every option's choices come from the table that defines them (``request/settings.py``, ``devices.py``,
``scheduler/flags.py``, ``request/chat.py``); the question, its answer and its presenters come from
:mod:`kimi_viz._whatif`, whatever was asked.
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from ..devices import DEVICES
from ..errors import WhatIfError
from ..files import check_output, prepare_folder
from ..releases import RELEASE_RANGE, RELEASES, release_for, release_span
from ..request.settings import (
    DEFAULT_MODE,
    DEFERS,
    EPD_BACKENDS,
    IMAGE_PROMPTS,
    MODES,
    OPTION_OF,
    SERVINGS,
    TRANSPORTS,
    TYPED_TOKENS,
    ServerSettings,
)
from ..scheduler.flags import FLAG_OF, FLAGS, LoadSettings
from . import again, emit
from .server_input import add_server_input, model_from_args

if TYPE_CHECKING:  # pragma: no cover - the sub-command's verb modules load when it runs, not for --help
    from .._whatif.deployment import Deployment
    from ..answer import Answer

STRATEGY_ALIAS = "--mamba-scheduler-strategy"  # the strategy's second spelling (SchedulerRules.strategy_alias)


DESCRIPTION = (
    "Build the items SGLang's request side (multimodal/processors/kimi_k3.py) of a release would build for one "
    "request carrying these images, under the given server settings, then replay get_image_feature on every "
    "attention-TP rank and print the verdict and why. --sweep prints every release × attention-TP 1, 2, 4, 8; "
    "--minimize shrinks a failing request to the fewest images (in order) that still fail with the same message "
    "and names the image to look at. --chat FILE starts from a client's request body: the request side's own "
    "checks (placeholders against images), then the same replay. Exit status: 0 nothing fails, 1 a rank or the "
    "request side raises (in some cell for --sweep; the minimal set reproduces it for --minimize), 2 bad input, "
    "3 a silent mismatch."
)


def _choices(values: tuple[str, ...]) -> str:
    """Return an option's metavar from its table: ``{a,b,c}``."""
    return "{" + ",".join(values) + "}"


def _flag_help(field: str) -> str:
    option = OPTION_OF[field]
    return f"{option.meaning}. SGLang: {option.sglang}"


def _add_load_options(parser: argparse.ArgumentParser) -> None:
    """Add the options of a workload: --together, --requests, --chat and the scheduler's settings."""
    load = parser.add_argument_group(
        "under load",
        "several requests prefilled together: their images reach get_image_feature in one call "
        "(docs/whatif.md, 'Workloads')",
    )
    load.add_argument("--together", action="store_true", help="each IMAGE is a single-image request of its own")
    load.add_argument(
        "--requests",
        metavar="FILE",
        help='a workload as JSON: {"requests": [{"images": [...], "text": {...}, "arrival": 0}, ...]}',
    )
    load.add_argument(
        "--chat",
        metavar="FILE",
        help="a client's request as JSON: an OpenAI chat completions body (messages with text and image_url parts), "
        "or a /generate body (text or input_ids, image_data); its own checks first, then the same replay. Earlier "
        "turns in the messages (a user message answered by an assistant one) replay as a conversation: each turn "
        "prefilled in order, the last after its radix prefix; with --requests FILE those requests arrive beside "
        "the last turn",
    )
    load.add_argument(
        "--image-prompts",
        default=IMAGE_PROMPTS[0],
        metavar=_choices(IMAGE_PROMPTS),
        help="--chat: whether the checkpoint's apply_chat_template puts SGLang's image_prompts (<|media_pad|>) at "
        "the image parts (honoured) or renders its own marker (ignored)",
    )
    load.add_argument(
        "--typed-tokens",
        default=TYPED_TOKENS[0],
        metavar=_choices(TYPED_TOKENS),
        help="--chat: whether media tokens written in text (<|media_pad|>) encode to their ids (ids) or as text",
    )
    for flag in FLAGS:  # the scheduler's flags, each from its row of the table
        if flag.kind == "switch":
            load.add_argument(flag.option, dest=flag.field, action="store_true", help=flag.help)
        else:
            load.add_argument(flag.option, dest=flag.field, metavar=flag.metavar, help=flag.help)
    strategy = FLAG_OF["mamba_radix_cache_strategy"]
    load.add_argument(
        STRATEGY_ALIAS,
        dest="strategy_alias",
        metavar=strategy.metavar,
        help=f"{strategy.option} as SGLang {_alias_releases()} also spells it",
    )


def _add_server_input(parser: argparse.ArgumentParser) -> None:
    group = parser.add_argument_group(
        "your server", "paste your server's launch command or log; typed options override what they say"
    )
    add_server_input(group)


def _add_server_options(parser: argparse.ArgumentParser) -> None:
    """Add the server settings of the request side, each worded from its row in ``request/settings.py``."""
    parser.add_argument("--serving", metavar=_choices(SERVINGS), help=_flag_help("serving"))
    parser.add_argument("--epd-backend", metavar=_choices(EPD_BACKENDS), help=_flag_help("epd_backend"))
    parser.add_argument("--mm-feature-transport", metavar=_choices(TRANSPORTS), help=_flag_help("transport"))
    parser.add_argument("--defer", metavar=_choices(DEFERS), help=_flag_help("defer"))
    parser.add_argument("--mm-preprocess-cache-size-mb", metavar="N", help=_flag_help("preprocess_cache_mb"))
    for flag, field in (
        ("--preprocess-cache-hit", "preprocess_cache_hits"),
        ("--embedding-cache-hit", "embedding_cache_hits"),
    ):
        parser.add_argument(flag, action="append", default=[], metavar="I[,J...]", help=_flag_help(field))
    parser.add_argument("--producer-config", metavar="PRESET|PATH", help=_flag_help("producer_config"))
    parser.add_argument("--consumer-config", metavar="PRESET|PATH", help=_flag_help("consumer_config"))
    parser.add_argument(
        "--mode",
        default=DEFAULT_MODE,
        metavar=_choices(MODES),
        help="shapes (default: image headers only, the same outcomes) or pixels (decode and materialize)",
    )
    parser.add_argument(
        "--device",
        default=DEVICES[0],
        metavar=_choices(DEVICES),
        help="where gpu-backend items are materialized in pixels mode",
    )


def register(subparsers: argparse._SubParsersAction) -> None:
    """Add the ``whatif`` sub-command."""
    parser = subparsers.add_parser(
        "whatif",
        help="would a request with these images fail on SGLang V at attention-TP N? (--sweep: every release × TP)",
        description=DESCRIPTION,
        epilog="--json prints one object (the answer, or the minimal set); with --sweep one JSON object per cell, "
        "one per line. Image positions for the cache-hit options count from 0 in the order given.",
    )
    parser.add_argument("images", nargs="*", metavar="IMAGE", help="the request's images, in order")
    _add_server_input(parser)
    _add_load_options(parser)
    parser.add_argument("--sglang-version", metavar="V", help=f"the release, {RELEASE_RANGE} (not with --sweep)")
    parser.add_argument(
        "--tp",
        metavar="N",
        help="attention-TP size: SGLang's --tp-size (over --dp-size with --enable-dp-attention); not with --sweep",
    )
    parser.add_argument("--sweep", action="store_true", help="every release × attention-TP 1, 2, 4, 8")
    parser.add_argument("--minimize", action="store_true", help="shrink a failing question to its minimal images")
    parser.add_argument("--json", action="store_true", help="print JSON (one object per cell with --sweep)")
    parser.add_argument(
        "--out",
        metavar="DIR",
        help="also write the answer for a tracker: report.html, summary.png, trace.json and issue.md of the call "
        "that decides it (a workload's with its forward-pass figure), and answer.json",
    )
    parser.add_argument(
        "--emit-repro",
        metavar="DIR",
        help="also write a standalone pytest file that runs SGLang's own get_image_feature on this request (the "
        "minimal failing set with --minimize): it fails on a release with the bug and passes on the fix",
    )
    _add_server_options(parser)
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
    parts = [part.strip() for value in values for part in str(value).split(",")]
    return tuple(_int(part, option, low=0) for part in parts if part)


def typed_settings_from_args(args: argparse.Namespace) -> dict[str, Any]:
    """Return the request side's settings the command line typed, by :class:`ServerSettings` field (raise
    WhatIfError on bad ones); the others come from --server / --server-log, else SGLang's defaults."""
    typed: dict[str, Any] = {}
    for field, option, allowed in (
        ("serving", "--serving", SERVINGS),
        ("epd_backend", "--epd-backend", EPD_BACKENDS),
        ("transport", "--mm-feature-transport", TRANSPORTS),
        ("defer", "--defer", DEFERS),
    ):
        value = getattr(args, option[2:].replace("-", "_"))
        if value is not None:
            typed[field] = _choice(value, allowed, option)
    if args.mm_preprocess_cache_size_mb is not None:
        typed["preprocess_cache_mb"] = _int(args.mm_preprocess_cache_size_mb, "--mm-preprocess-cache-size-mb", low=0)
    for field, option in (
        ("preprocess_cache_hits", "--preprocess-cache-hit"),
        ("embedding_cache_hits", "--embedding-cache-hit"),
    ):
        positions = _positions(getattr(args, option[2:].replace("-", "_")), option)
        if positions:
            typed[field] = positions
    if args.producer_config is not None:
        typed["producer_config"] = args.producer_config
    if args.consumer_config is not None:
        typed["consumer_config"] = args.consumer_config
    return typed


def settings_from_args(args: argparse.Namespace) -> ServerSettings:
    """Return the :class:`ServerSettings` the command-line options ask for (raise WhatIfError on bad ones)."""
    return ServerSettings(**typed_settings_from_args(args))


def _alias_releases() -> str:
    """Return the releases that take ``--mamba-scheduler-strategy``, from their entries (e.g. ``0.5.17–0.5.19``)."""
    return release_span([v for v, r in RELEASES.items() if r.scheduler.strategy_alias == STRATEGY_ALIAS])


def _take_strategy_alias(args: argparse.Namespace) -> None:
    """Read ``--mamba-scheduler-strategy`` as the strategy where the asked release takes that spelling; else refuse."""
    value = getattr(args, "strategy_alias", None)
    if value is None:
        return
    option = FLAG_OF["mamba_radix_cache_strategy"].option
    if args.mamba_radix_cache_strategy is not None:
        raise WhatIfError(f"{STRATEGY_ALIAS} with {option}: they are one flag; give {option} alone")
    if args.sweep or args.sglang_version is None:
        raise WhatIfError(
            f"{STRATEGY_ALIAS} is SGLang {_alias_releases()}'s spelling of {option}, which every release takes: "
            f"give {option} with --sweep"
        )
    release, _ = release_for(args.sglang_version)
    if release.scheduler.strategy_alias != STRATEGY_ALIAS:
        raise WhatIfError(
            f"{STRATEGY_ALIAS}: SGLang {release.version} has no such flag (only {_alias_releases()} spell "
            f"{option} so); give {option}"
        )
    args.mamba_radix_cache_strategy = value


def typed_load_from_args(args: argparse.Namespace) -> dict[str, Any]:
    """Return the scheduler's flags the command line typed, by :class:`~kimi_viz.scheduler.flags.LoadSettings` field
    (a switch only when given); the others come from --server / --server-log, else SGLang's defaults."""
    _take_strategy_alias(args)
    given: dict[str, Any] = {}
    for flag in FLAGS:
        value = getattr(args, flag.field)
        if flag.kind == "switch":
            if value:
                given[flag.field] = True
        elif value is not None:
            given[flag.field] = flag.parse(value)
    return given


def load_settings_from_args(args: argparse.Namespace) -> LoadSettings:
    """Return the :class:`~kimi_viz.scheduler.flags.LoadSettings` the load options ask for (defaults: SGLang's)."""
    return LoadSettings(**typed_load_from_args(args))


def _is_workload(args: argparse.Namespace) -> bool:
    return bool(args.together or args.requests is not None or args.chat is not None)


def _first_given(pairs: tuple[tuple[str, Any], ...]) -> str | None:
    return next((option for option, value in pairs if value), None)


def _check_load(args: argparse.Namespace) -> None:
    """Refuse option combinations a workload, a chat request or a lone request does not take."""
    if args.chat is not None:
        given = _first_given((("IMAGE", args.images), ("--together", args.together)))
        if given:
            raise WhatIfError(
                f"--chat FILE with {given}: the request file names its images; drop {given} (other requests beside "
                "the chat go in --requests FILE)"
            )
        if args.minimize:
            raise WhatIfError("--chat with --minimize: a client's request is replayed as it is; drop --minimize")
    elif args.image_prompts != IMAGE_PROMPTS[0] or args.typed_tokens != TYPED_TOKENS[0]:
        raise WhatIfError("--image-prompts / --typed-tokens describe how a --chat request is rendered: add --chat FILE")
    if args.together and args.requests is not None:
        raise WhatIfError("--together with --requests: pick one (IMAGEs as single-image requests, or a workload file)")
    if args.requests is not None and args.images:
        raise WhatIfError("--requests FILE with IMAGEs: the file names the images; drop the IMAGE arguments")
    if args.together and len(args.images) < 1:
        raise WhatIfError("--together: no images; give the IMAGEs, one single-image request each")
    if not _is_workload(args):
        given = _first_given(
            (
                *((flag.option, getattr(args, flag.field) not in (None, False, flag.default)) for flag in FLAGS),
                (STRATEGY_ALIAS, args.strategy_alias is not None),
            )
        )
        if given:
            raise WhatIfError(
                f"{given} describes a workload: add --together (each IMAGE its own request) or --requests FILE"
            )


def _check(args: argparse.Namespace) -> None:
    """Refuse what the question and the deployment options cannot mean together."""
    _check_load(args)
    if args.emit_repro is not None:
        if _is_workload(args) or args.sweep:
            raise WhatIfError(
                "--emit-repro writes one request's get_image_feature call: use it with IMAGEs (and --minimize), "
                "not with --sweep, --together, --requests or --chat"
            )
        check_output(args.emit_repro, what="--emit-repro")
    if args.out is not None:
        if args.sweep:
            raise WhatIfError("--out with --sweep: a sweep has no one call to report; drop --sweep or --out")
        check_output(args.out, what="--out")
    if not args.images and args.requests is None and args.chat is None:
        raise WhatIfError("no images: the request needs at least one IMAGE (e.g. kimi-viz whatif a.png b.jpg ...)")
    if args.sweep and args.minimize:
        raise WhatIfError("--sweep with --minimize: pick one (minimize one release and TP size, or sweep them all)")
    if args.sweep and (args.sglang_version is not None or args.tp is not None):
        raise WhatIfError(
            "--sweep covers every release and attention-TP 1, 2, 4, 8; drop --sglang-version and --tp (or drop --sweep)"
        )
    from_server = args.server is not None or args.server_log is not None
    if not args.sweep and not from_server and (args.sglang_version is None or args.tp is None):
        names = (("--sglang-version", args.sglang_version), ("--tp", args.tp))
        missing = " and ".join(n for n, v in names if v is None)
        raise WhatIfError(
            f"{missing} missing: name the deployment (e.g. --sglang-version 0.5.18 --tp 2), paste the server's launch "
            'command (--server "python -m sglang.launch_server …") or log (--server-log FILE), or pass --sweep'
        )
    _choice(args.mode, MODES, "--mode")
    _choice(args.device, DEVICES, "--device")
    if args.out is not None and not args.out.lower().endswith(".zip"):
        prepare_folder(args.out, what="--out")  # made now: a folder that cannot be made is refused before any work


def _subject(args: argparse.Namespace, load: LoadSettings, context_len: int | None) -> tuple[Any, dict[str, Any]]:
    """Return what is asked (images, a workload or a client's request) and the options that go with it; a workload's
    outputs may reach ``context_len`` (the server's, from its log or launch command; Kimi-K3's when None)."""
    from ..request.workload import read_workload, together

    limit = {} if context_len is None else {"context_len": context_len}

    if args.chat is not None:
        from ..request.chat import Renderer, read_request  # the chat template: for a client's request only

        renderer = Renderer(
            image_prompts=_choice(args.image_prompts, IMAGE_PROMPTS, "--image-prompts") == IMAGE_PROMPTS[0],
            typed_tokens=_choice(args.typed_tokens, TYPED_TOKENS, "--typed-tokens") == TYPED_TOKENS[0],
        )
        beside = None if args.requests is None else read_workload(args.requests, **limit)
        return read_request(args.chat), {"load": load, "renderer": renderer, "beside": beside}
    if args.requests is not None:
        return read_workload(args.requests, **limit), {"load": load}
    if args.together:
        return together(args.images), {"load": load}
    return list(args.images), {}


def deployment_from_args(args: argparse.Namespace) -> Deployment:
    """Return the deployment the command line describes: typed options over the server's log, over its launch
    command, over SGLang's defaults (each value with its source)."""
    from .._whatif.deployment import DeploymentInput, read_deployment

    return read_deployment(
        DeploymentInput(
            server=args.server,
            server_log=args.server_log,
            model=model_from_args(args),
            sglang_version=args.sglang_version,
            tp_size=None if args.tp is None else _int(args.tp, "--tp", low=1),
            typed_load=typed_load_from_args(args),
            typed_settings=typed_settings_from_args(args),
            needs_release=not args.sweep,
        )
    )


def _print(args: argparse.Namespace, document: Callable[[], Any], text: Callable[[], str]) -> None:
    """Print ``document()`` as JSON with --json, else ``text()``."""
    emit(json.dumps(document(), indent=2, default=str) if args.json else text())


def run(args: argparse.Namespace) -> int:
    """Answer the what-if; return 0 (nothing fails), 1 (SGLang raises) or 3 (a silent mismatch)."""
    from .._whatif.ask import minimize, sweep, whatif
    from ..report.answer_views import answer_text, minimized_text, sweep_text

    if args.json:
        from ..report.answer_documents import answer_json, cell_json, minimized_json  # JSON only when asked
    _check(args)
    deployment = deployment_from_args(args)
    settings = deployment.settings
    context = deployment.report.value("context_length")
    subject, options = _subject(args, deployment.load, None if context is None else int(context.value))
    if deployment.model is not None and args.chat is not None:
        options["model"] = deployment.model
    if args.sweep:
        swept = sweep(subject, settings=settings, refused=deployment.refusals, **options)
        if args.json:
            for cell in swept.cells:
                emit(json.dumps(cell_json(cell), default=str))
        else:
            emit(sweep_text(swept))
        return swept.exit_code
    version, tp_size = deployment.sglang_version, deployment.tp_size
    if tp_size is None:
        raise WhatIfError(
            "--tp missing: neither the launch command nor the log gives the attention-TP size; name it (e.g. --tp 2)"
        )
    assert version is not None  # read_deployment names a release whenever the question is not a sweep
    if args.minimize:
        found = minimize(subject, sglang_version=version, tp_size=tp_size, settings=settings, mode=args.mode, **options)
        _print(args, lambda: minimized_json(found), lambda: minimized_text(found))
        if args.emit_repro and found.target is not None:
            _emit_repro(found, args.emit_repro)
        _write_out(args, found.answer)
        return found.exit_code
    answer = whatif(
        subject,
        sglang_version=version,
        tp_size=tp_size,
        settings=settings,
        mode=args.mode,
        device=args.device,
        server=deployment.report,
        **options,
    )
    _print(args, lambda: answer_json(answer), lambda: answer_text(answer))
    if args.emit_repro:
        _emit_repro(answer, args.emit_repro)
    _write_out(args, answer)
    return answer.exit_code


def _write_out(args: argparse.Namespace, answer: Answer) -> None:
    """Write ``--out DIR``'s files and say where (on stderr, so --json stays one object)."""
    if args.out is None:
        return
    from .._whatif.outputs import write_answer  # the report's figures load matplotlib

    written = write_answer(answer, args.out, reproduce=again(args.command_line))
    emit(f"kimi-viz whatif: wrote {', '.join(str(p) for p in written.values())}", err=True)


def _emit_repro(source: Any, out_dir: str) -> None:
    """Write the standalone SGLang repro of ``source`` and say where (on stderr, so --json stays one object)."""
    from ..repro import emit_repro

    path = emit_repro(source, out_dir)
    emit(f"kimi-viz whatif: wrote the repro {path} (run it with: python -m pytest {path.parent})", err=True)
