"""Where each image's feature rows came from in a workload: the radix prefix, the embedding cache or a call.

A request whose prompt starts with a cached prefix (a chat's later turn, a shared system prompt) never
prefills ``[0, matched)``: an image whose ``<|media_pad|>`` run lies wholly inside it never reaches the
forward pass, its keys and values are already in the KV cache (**radix prefix**). Every other image is
looked up in the embedding cache by each pass whose window touches its run (Kimi-K3's hybrid tree cuts a
hit back to the deepest saved linear-attention state, which can re-open an image a plain radix tree would
have held whole: :attr:`ImageSupply.reopened_by_cut`): a hit supplies its rows
(**embedding cache**), a miss sends it to that pass's ``get_image_feature`` call (**call**); on an EPD
language server its rows arrive as ``precomputed_embeddings`` (**encode server**). A pass that never
ran (an earlier one raised) supplies nothing (**not reached**).
:meth:`~.workload_replay.LoadResult.image_supplies` answers it for every image of every request, from
the replay itself (:func:`pass_supplier` per pass).
"""

from __future__ import annotations

from typing import Literal

from .._records import frozen
from .trace import ForwardTrace, prefix_cut

Supplier = Literal["radix prefix", "embedding cache", "call", "encode server", "not reached"]
_BY_LOOKUP: dict[str, Supplier] = {
    "miss": "call",
    "discarded": "call",
    "duplicate": "call",
    "hit": "embedding cache",
    "stale-hit": "embedding cache",
    "found": "embedding cache",
}


@frozen
class ImageSupply:
    """One image of one request: what supplied its rows in each pass that computed part of its run."""

    request: int
    rid: str
    image: int
    label: str
    offsets: tuple[int, int]  # its inclusive <|media_pad|> run in the request's prompt
    matched: int  # the request's radix prefix
    by_pass: tuple[tuple[int, Supplier], ...]  # (pass index, supplier) for every pass whose window touched the run
    plain: int | None = None  # what a plain radix tree would have matched (None: not known, or not a hybrid tree)

    @property
    def supplier(self) -> Supplier:
        """Return what supplied its first rows: the radix prefix, or the first pass's cache or call."""
        if prefix_cut(self.offsets, self.matched) == "cached":
            return "radix prefix"
        return self.by_pass[0][1] if self.by_pass else "not reached"

    @property
    def cut_by_prefix(self) -> bool:
        """Return True when the radix prefix ends inside the image's pad run."""
        return prefix_cut(self.offsets, self.matched) == "cut"

    @property
    def reopened_by_cut(self) -> bool:
        """Return True when a plain radix tree's match would have held the whole run, and the hybrid tree's cut
        back to a saved state re-opened it."""
        return (
            self.plain is not None
            and self.plain > self.matched
            and prefix_cut(self.offsets, self.plain) == "cached"
            and prefix_cut(self.offsets, self.matched) != "cached"
        )

    def describe(self) -> str:
        """Return one line: the image, what supplied it, in which pass, and any cut by the prefix."""
        where = f"{self.rid} image {self.image} ({self.label}, pad tokens {self.offsets[0]}..{self.offsets[1]})"
        if self.supplier == "radix prefix":
            return f"{where}: the radix prefix (tokens 0..{self.matched - 1} cached): never reaches the call"
        passes = ", ".join(f"pass {k + 1}: {who}" for k, who in self.by_pass) or "no pass ran"
        cut = (
            f"; the radix prefix ends inside its run at token {self.matched}, so only tokens {self.matched}.."
            f"{self.offsets[1]} are filled and its rows are sliced from row {self.matched - self.offsets[0]}"
            if self.cut_by_prefix
            else ""
        )
        if self.reopened_by_cut:
            cut += (
                f"; re-opened by the hybrid tree's cut back: the request shares {self.plain} tokens with earlier ones "
                f"(a plain radix tree would hold the whole image), but the deepest saved state is at {self.matched}"
            )
        return f"{where}: {self.supplier} ({passes}){cut}"

    def to_json(self) -> dict[str, object]:
        """Return ``{"request", "image", "label", "offsets", "matched_prefix", "plain_match", "supplier", "passes",
        "cut_by_prefix", "reopened_by_cut"}``."""
        return {
            "request": self.rid,
            "image": self.image,
            "label": self.label,
            "offsets": list(self.offsets),
            "matched_prefix": self.matched,
            "plain_match": self.plain,
            "supplier": self.supplier,
            "passes": [{"pass": k, "supplier": who} for k, who in self.by_pass],
            "cut_by_prefix": self.cut_by_prefix,
            "reopened_by_cut": self.reopened_by_cut,
        }


def pass_supplier(trace: ForwardTrace, request: int, image: int) -> Supplier:
    """Return what supplied image ``image`` of request ``request`` in one pass: its lookup's outcome, or the
    encode server's rows on the precomputed path, or "not reached" when the pass stopped before looking."""
    if trace.path == "precomputed":
        return "encode server"
    lookup = next((u for u in trace.lookups if (u.source.request, u.source.image) == (request, image)), None)
    return "not reached" if lookup is None else _BY_LOOKUP[lookup.outcome]


__all__ = ["Supplier", "ImageSupply", "pass_supplier"]
