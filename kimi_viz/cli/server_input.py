"""The user's own server as input, on every verb that replays one: ``--server "CMD"`` and ``--server-log FILE``."""

from __future__ import annotations

import argparse

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


def add_server_input(parser: argparse.ArgumentParser | argparse._ArgumentGroup) -> None:
    """Add ``--server CMD`` and ``--server-log FILE``: the user's own server as input (whatif, triage, explain)."""
    parser.add_argument("--server", metavar="CMD", help=SERVER_HELP)
    parser.add_argument("--server-log", metavar="FILE", help=SERVER_LOG_HELP)


__all__ = ["SERVER_HELP", "SERVER_LOG_HELP", "add_server_input"]
