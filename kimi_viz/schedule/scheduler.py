"""Which requests share a prefill pass, and where chunked prefill cuts a long prompt.

SGLang's scheduler (``managers/scheduler.py`` ``_get_new_batch_prefill_raw``, ``schedule_policy.py``
``PrefillAdder``) builds each prefill batch from the request whose prompt is being chunked (first),
then the waiting requests in arrival order (FCFS) while the token budget lasts. The budget is
``--chunked-prefill-size`` (default 8192 on an H200; -1 turns chunking off, and then it is
``--max-prefill-tokens``, 16384, with the first request always admitted). A request that does not fit
is cut at the budget and becomes *the* chunked request: its next chunks (``min(remaining, size)``
tokens) go first in the following passes, alone until its last chunk, which shares its pass with
new requests. Nothing keeps a cut out of an image's ``<|media_pad|>`` run: an image can straddle
two passes.

Simplified here (``docs/whatif.md`` says so): a page size of 1, no radix-cache prefix hits (every
request starts at 0), KV memory and request slots never run short, no mixed decode, and every
arrival waits until the previous one has been prefilled.
"""

from __future__ import annotations

from .._records import frozen
from ..errors import WhatIfError

DEFAULT_CHUNKED_PREFILL = 8192  # --chunked-prefill-size on an H200 (resolved from GPU memory)
DEFAULT_MAX_PREFILL = 16384  # --max-prefill-tokens
MAX_PASSES = 100_000


@frozen
class Window:
    """One request's part of a pass: tokens ``[prefix, prefix + extend)`` of its prompt."""

    request: int  # the request's index in the workload
    prefix: int
    extend: int


@frozen
class PassPlan:
    """One prefill pass: each request's window, in the batch's order."""

    windows: tuple[Window, ...]
    arrival: int

    def to_json(self) -> dict[str, object]:
        """Return ``{"arrival", "windows": [{"request", "prefix_length", "extend_length"}]}``."""
        return {
            "arrival": self.arrival,
            "windows": [
                {"request": w.request, "prefix_length": w.prefix, "extend_length": w.extend} for w in self.windows
            ],
        }


def check_chunk_size(value: int | None, name: str = "--chunked-prefill-size") -> int | None:
    """Return the chunk size (None: chunking off, for None or any value <= 0, as SGLang reads it)."""
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int):
        raise WhatIfError(f"{name}: expected a token count (or -1 for no chunking), got {value!r}")
    return value if value > 0 else None


def plan_passes(
    lengths: list[int],
    arrivals: list[int],
    *,
    chunked_prefill_size: int | None = DEFAULT_CHUNKED_PREFILL,
    max_prefill_tokens: int = DEFAULT_MAX_PREFILL,
) -> list[PassPlan]:
    """Return the prefill passes of requests of prompt ``lengths`` arriving at ``arrivals`` (indices in order)."""
    chunk = check_chunk_size(chunked_prefill_size)
    passes: list[PassPlan] = []
    for arrival in sorted(set(arrivals)):
        queue = [k for k, a in enumerate(arrivals) if a == arrival]
        chunked: tuple[int, int] | None = None  # (request, tokens done)
        while queue or chunked is not None:
            if len(passes) >= MAX_PASSES:
                raise WhatIfError(f"the workload needs more than {MAX_PASSES} prefill passes; shorten its prompts")
            budget = chunk if chunk is not None else max_prefill_tokens
            windows: list[Window] = []
            if chunked is not None:
                request, done = chunked
                assert chunk is not None
                size = min(lengths[request] - done, chunk)
                windows.append(Window(request, done, size))
                budget -= size
                chunked = (request, done + size) if done + size < lengths[request] else None
            while queue and (chunked is None):
                request = queue[0]
                need = lengths[request]
                if chunk is not None:
                    if budget <= 0:
                        break
                    if need <= budget:
                        windows.append(Window(request, 0, need))
                        budget -= need
                        queue.pop(0)
                    else:
                        windows.append(Window(request, 0, budget))
                        chunked = (request, budget)
                        queue.pop(0)
                        break
                else:
                    if windows and need >= budget:
                        break
                    windows.append(Window(request, 0, need))
                    budget -= need
                    queue.pop(0)
            passes.append(PassPlan(tuple(windows), arrival))
    return passes


__all__ = [
    "DEFAULT_CHUNKED_PREFILL",
    "DEFAULT_MAX_PREFILL",
    "Window",
    "PassPlan",
    "check_chunk_size",
    "plan_passes",
]
