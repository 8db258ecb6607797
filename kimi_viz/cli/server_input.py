"""The user's own server as input, on every verb that replays one: ``--server "CMD"`` and ``--server-log FILE``."""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # pragma: no cover - the folder reader loads the tokenizer's modules: only with --model-path
    from ..request.model_folder import ModelFolder

SERVER_HELP = (
    "your server's launch command, as typed (quote it): python -m sglang.launch_server … or sglang serve …, with "
    "environment assignments in front; split like a shell would, never run. Its flags are read with the release's "
    "own argument table; the kit's options override them"
)
SERVER_LOG_HELP = (
    "your server's log, of any size: its start-up lines (server_args=…, the pool line max_total_num_tokens=…, the "
    "mamba pool line) say what the server ran, and win over the launch command and SGLang's defaults; the pools "
    "bound the replay's memory. The release comes from the log when it names it or when its arguments fit one"
)


MODEL_PATH_HELP = (
    "your checkpoint folder (or a model id in the local Hugging Face cache; never downloaded): config.json (which "
    "SGLang model serves it, the placeholder id), preprocessor_config.json (the limits, instead of the preset) and "
    "the tokenizer, with which a --chat body is tokenized as the server tokenizes it; the folder's code is never run"
)


def add_server_input(parser: argparse.ArgumentParser | argparse._ArgumentGroup) -> None:
    """Add ``--server CMD``, ``--server-log FILE`` and ``--model-path DIR``: the user's own deployment as input
    (whatif, triage, explain)."""
    parser.add_argument("--server", metavar="CMD", help=SERVER_HELP)
    parser.add_argument("--server-log", metavar="FILE", help=SERVER_LOG_HELP)
    parser.add_argument("--model-path", metavar="DIR", help=MODEL_PATH_HELP)


def model_from_args(args: argparse.Namespace) -> ModelFolder | None:
    """Return the checkpoint folder ``--model-path`` names, read as data (None when not given)."""
    if args.model_path is None:
        return None
    from ..request.model_folder import read_model_folder

    return read_model_folder(args.model_path)


__all__ = ["MODEL_PATH_HELP", "SERVER_HELP", "SERVER_LOG_HELP", "add_server_input", "model_from_args"]
