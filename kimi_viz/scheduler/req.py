"""A request as SGLang's scheduler holds it (``managers/schedule_batch.py`` ``Req``), and the passes it forms.

A :class:`Req`'s prompt is a list of *parts*: a plain token id (``int``), or an :class:`Image` run
``(image_hash, length)`` standing for an image's ``length`` ``<|media_pad|>`` tokens. SGLang's
``pad_input_ids`` replaces each run by the release's pad values derived from the hash
(:func:`~.prefix.padded_ids`; the real-SGLang lane hands the runs to SGLang's own code), so two images
share a radix prefix exactly when SGLang would let them. A prompt that already carries pad values is
given as plain ints.

Time is counted in scheduler *steps* (one event-loop iteration: one forward pass, prefill, mixed or
decode). A request joins the waiting queue at step ``arrival``, or — with ``after`` — at the first
step not before ``arrival`` that follows the finish of request ``after`` (a chat's next turn). It
generates ``max_new_tokens`` tokens (``generated_ids`` when given, else distinct stand-ins below the
pad range; a ``range`` costs no memory however long the answer), the first one by its last prefill pass,
one more per decode step. While the scheduler holds it, a :class:`Req` also carries SGLang's own state:
its padded prompt, how many ids it generated so far (``output_len``; ``output_ids`` reads them), its prefix
and extend end, and its committed KV. :class:`FillIds` reads a request's fill ids where they are (its prompt,
then its generated ids) for what keeps them after it finished: the trees' nodes.

The real-SGLang lane hands the same records to SGLang's own scheduler (``tests/parity/scheduler/``).
"""

from __future__ import annotations

import zlib
from collections.abc import Sequence
from dataclasses import dataclass, field, fields
from typing import overload

from .._records import frozen
from .node import Node

# Stand-in ids: text below OUTPUT_BASE, generated ids from it up to 2 * OUTPUT_BASE — all below every pad value.
OUTPUT_BASE = 500_000


@frozen
class Image:
    """An image's pad run in a prompt: ``length`` pad tokens under the item hash ``image_hash``."""

    image_hash: int
    length: int

    def __post_init__(self) -> None:
        if self.length <= 0:
            raise ValueError(f"an image run needs at least one token, got {self.length}")
        if not 0 <= self.image_hash < 1 << 64:
            raise ValueError(f"image_hash must fit in 64 unsigned bits, got {self.image_hash}")


Part = int | Image


def prompt_length(parts: tuple[Part, ...] | list[Part]) -> int:
    """Return the tokens ``parts`` stand for (an image run counts its pad tokens)."""
    return sum(p.length if isinstance(p, Image) else 1 for p in parts)


class FillIds(Sequence[int]):
    """A request's first ``length`` fill ids (prompt, then generated ids), read on demand: a view that holds no copy,
    for what keeps a request's ids long after it finished (the plain tree beside the hybrid one)."""

    __slots__ = ("prompt", "generated", "length")

    def __init__(self, prompt: tuple[int, ...], generated: Sequence[int], length: int) -> None:
        self.prompt = prompt
        self.generated = generated
        self.length = length

    def __len__(self) -> int:
        return self.length

    @overload
    def __getitem__(self, index: int) -> int: ...

    @overload
    def __getitem__(self, index: slice) -> tuple[int, ...]: ...

    def __getitem__(self, index: int | slice) -> int | tuple[int, ...]:
        prompt = self.prompt
        if isinstance(index, slice):
            start, stop, _ = index.indices(self.length)
            if stop <= len(prompt):
                return prompt[start:stop]
            head = prompt[start:] if start < len(prompt) else ()
            return head + tuple(self.generated[max(start - len(prompt), 0) : stop - len(prompt)])
        if not -self.length <= index < self.length:
            raise IndexError(index)
        index %= self.length
        return prompt[index] if index < len(prompt) else self.generated[index - len(prompt)]


def same_ids(a: Sequence[int], b: Sequence[int]) -> bool:
    """Return True when ``a`` and ``b`` read the very same ids (one object, or views of one request's ids), so that
    they are equal at equal offsets without comparing them."""
    if a is b:
        return True
    if not (isinstance(a, FillIds) and isinstance(b, FillIds)):
        return False
    return a.prompt is b.prompt and a.generated is b.generated


@dataclass(eq=False)
class Req:
    """One request: its prompt parts, when it arrives and what it generates; while scheduled, SGLang's state."""

    rid: str
    parts: tuple[Part, ...]
    arrival: int = 0
    after: str | None = None  # arrive only once this request has finished
    max_new_tokens: int = 1
    generated_ids: Sequence[int] | None = None  # the ids it generates (len == max_new_tokens; None: stand-ins)
    # SGLang's state while the scheduler holds it (not part of the request as given)
    origin_input_ids: tuple[int, ...] = field(default=(), init=False, repr=False)  # the padded prompt
    output_len: int = field(default=0, init=False, repr=False)  # len(output_ids): the tokens generated so far
    prefix_len: int = field(default=0, init=False, repr=False)
    extend_end: int = field(default=0, init=False, repr=False)
    kv_committed_len: int = field(default=0, init=False, repr=False)
    inflight_middle_chunks: int = field(default=0, init=False, repr=False)  # chunks whose result brings no token
    mamba_branching_seqlen: int | None = field(default=None, init=False, repr=False)
    mamba_last_track_seqlen: int | None = field(default=None, init=False, repr=False)  # where its next insert stops
    # memory (docs/memory-notes.md): what it holds while it runs
    last_node: Node | None = field(default=None, init=False, repr=False)  # the tree node its prefix ends at
    lock: tuple[Node, bool] | None = field(default=None, init=False, repr=False)  # the node it keeps locked
    protected: int = field(default=0, init=False, repr=False)  # cache_protected_len: its prefix in the tree
    owned: int = field(default=0, init=False, repr=False)  # KV tokens it holds outside the tree
    has_row: bool = field(default=False, init=False, repr=False)
    working_slot: bool = field(default=False, init=False, repr=False)  # its running linear-attention state
    ping_pong: int = field(default=0, init=False, repr=False)  # its track slots (extra_buffer)
    retracted: bool = field(default=False, init=False, repr=False)  # is_retracted: its in-flight result is dropped
    retractions: int = field(default=0, init=False, repr=False)
    _stand_ins: tuple[int, ...] | None = field(default=None, init=False, repr=False)

    def __post_init__(self) -> None:
        if self.max_new_tokens < 1:
            raise ValueError(f"{self.rid}: max_new_tokens must be >= 1")
        if self.generated_ids is not None and len(self.generated_ids) != self.max_new_tokens:
            raise ValueError(
                f"{self.rid}: {len(self.generated_ids)} generated ids for max_new_tokens={self.max_new_tokens}"
            )

    @property
    def length(self) -> int:
        """Return the prompt length in tokens."""
        return prompt_length(self.parts)

    def _generated(self) -> Sequence[int]:
        """The ids it generates: as given (a tuple, or a range of stand-ins), else stand-ins made once."""
        if self.generated_ids is not None:
            return self.generated_ids
        if self._stand_ins is None:
            self._stand_ins = tuple(
                OUTPUT_BASE + zlib.crc32(f"{self.rid}:{k}".encode()) % 300_000 for k in range(self.max_new_tokens)
            )
        return self._stand_ins

    def outputs(self) -> list[int]:
        """Return the tokens this request generates, in order."""
        return list(self._generated())

    # --- while scheduled ------------------------------------------------------------------------
    @property
    def output_ids(self) -> Sequence[int]:
        """Return the tokens generated so far (``output_ids``)."""
        return self._generated()[: self.output_len]

    @property
    def fill_len(self) -> int:
        """Return ``len(fill_ids())`` without building them."""
        return len(self.origin_input_ids) + self.output_len

    def fill_ids(self, length: int | None = None) -> tuple[int, ...]:
        """Return ``origin_input_ids + output_ids`` (their first ``length``): what the tree matches and inserts."""
        prompt = self.origin_input_ids
        end = self.fill_len if length is None else min(length, self.fill_len)
        if end <= len(prompt):
            return prompt[:end]
        return prompt + tuple(self._generated()[: end - len(prompt)])

    def fill_view(self, length: int) -> FillIds:
        """Return the first ``length`` fill ids as a :class:`FillIds` view (no copy)."""
        return FillIds(self.origin_input_ids, self._generated(), min(length, self.fill_len))

    def emit(self, tokens: int = 1) -> None:
        """Generate the next ``tokens`` tokens."""
        self.output_len += tokens

    @property
    def finished(self) -> bool:
        """Return True once it has generated ``max_new_tokens`` tokens (the finish by length)."""
        return self.output_len >= self.max_new_tokens

    def given(self) -> Req:
        """Return a fresh copy of the request as given, with no scheduler state."""
        return Req(**{f.name: getattr(self, f.name) for f in fields(self) if f.init})


@frozen
class Window:
    """One request's part of a pass: its tokens ``[prefix_len, prefix_len + extend_input_len)``."""

    rid: str
    prefix_len: int
    extend_input_len: int

    @property
    def end(self) -> int:
        """Return ``prefix_len + extend_input_len``."""
        return self.prefix_len + self.extend_input_len


__all__ = [
    "OUTPUT_BASE",
    "FillIds",
    "Image",
    "Part",
    "Req",
    "Window",
    "prompt_length",
    "same_ids",
]
