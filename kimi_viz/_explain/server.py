"""The server a log describes, beside every message explain finds in it: what ran, and the pass that raised.

A log holding a server's start-up lines says which server raised: release, attention-TP, page, chunk, tree,
pools (``startup_facts`` in :mod:`kimi_viz.server_args.startup`). Its last ``Prefill batch`` line before an
error says what that pass held: ``#new-seq 2``, two requests shared the failing pass, so their images met in
one ``get_image_feature`` call (S14); ``#cached-token`` > 0, a radix prefix was used, and a window starting
inside an image's run re-opens it (S18, S19); a pass of exactly the chunk size, a request was cut and an image
may straddle two passes (S15); a retraction before it, memory moved requests (S20). :class:`ServerContext` is
that part of an answer, with the ``kimi-viz whatif … --server-log LOG`` command that replays the same server.
"""

from __future__ import annotations

import shlex
from typing import Any

from .._records import frozen
from ..server_args.log import PrefillLine, ServerStart
from ..server_args.startup import StartupFacts, startup_facts


@frozen
class ServerContext:
    """The server in force at a message's line, and the last prefill pass it logged before that line."""

    start: ServerStart
    prefill: PrefillLine | None  # the last ``Prefill batch`` line of this start-up before the message
    retractions: int  # "Retract requests" lines of this start-up before the message
    replay_with: str | None  # the whatif option naming this server: "--server-log server.log" (None: unsaved input)

    @property
    def facts(self) -> StartupFacts:
        """Return what the start-up says about the server."""
        return startup_facts(self.start)

    def load_classes(self) -> tuple[tuple[str, str], ...]:
        """Return the load scenario classes the failing pass fits, each with why: ``(("S14", "…"), …)``."""
        pass_ = self.prefill
        if pass_ is None:
            return ()
        fits: list[tuple[str, str]] = []
        if pass_.new_seq >= 2:
            fits.append(
                (
                    "S14",
                    f"#new-seq {pass_.new_seq}: {pass_.new_seq} requests shared the failing pass, so "
                    "their images met in one get_image_feature call",
                )
            )
        if pass_.cached_token > 0:
            fits.append(
                (
                    "S18/S19",
                    f"#cached-token {pass_.cached_token}: a radix prefix was used; a window that starts "
                    "inside an image's run re-opens it in the call",
                )
            )
        chunk = self.facts.chunked_prefill_size
        if isinstance(chunk, int) and chunk > 0 and pass_.new_token == chunk:
            fits.append(
                (
                    "S15",
                    f"#new-token {pass_.new_token} is the chunk size: a request was cut, an image may "
                    "straddle two passes",
                )
            )
        if self.retractions:
            fits.append(("S20", f"{self.retractions} retraction(s) before it: memory moved requests into other passes"))
        if not fits:
            fits.append(("alone", f"#new-seq {pass_.new_seq}, #cached-token 0: the request's own images, no load case"))
        return tuple(fits)

    def command(self) -> str:
        """Return the command that replays this server (the images still to name)."""
        given = "--server-log SERVER.log" if self.replay_with is None else self.replay_with
        if given.startswith("--server "):  # a launch command does not say its release
            given += " --sglang-version V"
        return f"kimi-viz whatif IMAGE... --together {given}"

    def lines(self) -> list[str]:
        """Return the answer's lines about the server: which it was, the pass that raised, how to replay it."""
        arguments = self.start.arguments
        if arguments is not None and arguments.arguments.form == "command":
            lines = [f"  server:    {self.facts.describe()} (its launch command)"]
        else:
            lines = [f"  server:    {self.facts.describe()} (start-up from line {self.start.first_line})"]
        if self.prefill is not None:
            pass_ = self.prefill
            lines.append(
                f"  pass:      line {pass_.line}: Prefill batch, #new-seq {pass_.new_seq}, #new-token "
                f"{pass_.new_token}, #cached-token {pass_.cached_token}"
            )
            lines += [f"             {name}: {why}" for name, why in self.load_classes()]
        saved = "" if self.replay_with is not None else " (save the log to a file first)"
        lines.append(f"  replay:    {self.command()}{saved}")
        return lines

    def to_json(self) -> dict[str, Any]:
        """Return ``{"server", "start_line", "releases", "attention_tp", "pass", "load_classes", "replay"}``."""
        facts = self.facts
        pass_ = self.prefill
        return {
            "server": facts.describe(),
            "start_line": self.start.first_line,
            "releases": list(facts.releases),
            "attention_tp": None if facts.tp is None else facts.tp.size,
            "page_size": facts.page_size,
            "chunked_prefill_size": facts.chunked_prefill_size,
            "pass": None
            if pass_ is None
            else {
                "line": pass_.line,
                "new_seq": pass_.new_seq,
                "new_token": pass_.new_token,
                "cached_token": pass_.cached_token,
            },
            "load_classes": [{"class": name, "why": why} for name, why in self.load_classes()],
            "retractions": self.retractions,
            "replay": self.command(),
        }


def replay_option(option: str, value: str) -> str:
    """Return ``--server-log PATH`` (or ``--server 'CMD'``) quoted for a shell."""
    return f"{option} {shlex.quote(value)}"


__all__ = ["ServerContext", "replay_option"]
