"""Named workloads for the forward pass under load (pipeline spec §10): S14 onward.

Each :class:`LoadScenario` is a workload of sample images on one deployment (release, attention-TP
size, server and load settings) and what SGLang does with it: the status, the exception and its exact
message, the ranks that raise, the warnings SGLang logs, and the release that fixes it.
:func:`kimi_viz.run_load_scenario` replays one on its own deployment; the CLI is
``kimi-viz scenario run NAME`` (the same command as the single-call scenarios).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import field
from typing import Any

from .._records import frozen
from ..errors import ScenarioError
from ..forward.workload_replay import LoadSettings
from ..message_catalogue.messages import MSG_GPU_WRONG_GRIDS, MSG_INSUFFICIENT, MSG_SPLIT_SIZES, MSG_TOKEN_MISMATCH
from ..release_changes.rules import releases_where
from ..releases import PATH_INTRODUCED
from ..request.images import as_request_image
from ..request.settings import ServerSettings
from ..request.workload import CacheSeed, Request, Workload
from ..split.cause import ErrorInfo
from ..split.classes import ScenarioClass
from ..split.verdict import Status


@frozen
class LoadExpectation:
    """What SGLang does with a workload: the status, the exception, the failing ranks, the warnings, the fix."""

    status: Status
    error: ErrorInfo | None = None
    failing_ranks: tuple[int, ...] = ()
    warnings: tuple[str, ...] = ()
    fixed_in: str | None = None
    calls: int | None = None  # get_image_feature calls over all passes
    passes: int | None = None

    def to_json(self) -> dict[str, Any]:
        """Return the expectation as plain JSON data."""
        return {
            "status": self.status.value,
            "error": None if self.error is None else self.error.to_json(),
            "failing_ranks": list(self.failing_ranks),
            "warnings": list(self.warnings),
            "fixed_in": self.fixed_in,
            "calls": self.calls,
            "passes": self.passes,
        }


@frozen
class LoadScenario:
    """A named workload on one deployment, and what SGLang does with it."""

    name: str
    title: str
    description: str
    scenario_class: ScenarioClass
    builder: Callable[[], Workload] = field(repr=False)
    sglang_version: str
    tp_size: int
    expected: LoadExpectation
    settings: ServerSettings = field(default_factory=ServerSettings)
    load: LoadSettings = field(default_factory=LoadSettings)

    def build(self) -> Workload:
        """Return the scenario's workload."""
        return self.builder()

    def to_json(self) -> dict[str, Any]:
        """Return the scenario's description, deployment, workload and expectation as plain JSON data."""
        return {
            "name": self.name,
            "title": self.title,
            "description": self.description,
            "scenario_class": self.scenario_class.value,
            "sglang_version": self.sglang_version,
            "tp_size": self.tp_size,
            "settings": self.settings.to_json(),
            "load": self.load.to_json(),
            "workload": self.build().to_json(),
            "expected": self.expected.to_json(),
        }


def _image(name: str) -> Any:
    return as_request_image(name)


def _s14() -> Workload:
    return Workload((Request("r1", (_image("rocket.jpg"),)), Request("r2", (_image("astronaut.png"),))))


def _s15() -> Workload:
    return Workload((Request("r1", (_image("chelsea.png"),), before=100),))


def _s16() -> Workload:
    chelsea = _image("chelsea.png")
    return Workload((Request("r1", (chelsea,)),), cache=(CacheSeed(chelsea, 120),))


def _s17(stale: str) -> Callable[[], Workload]:
    def build() -> Workload:
        images = (_image("text.png"), _image("microaneurysms.png"))
        return Workload((Request("r1", images, stale=((1, _image(stale)),)),))

    return build


def _s18() -> Workload:
    first = Request("t1", (_image("camera.png"),), output=20, system=50)
    return Workload((first, Request("t2", (_image("coffee.png"),), continues="t1", arrival=1)))


def _s19() -> Workload:
    first = Request("t1", (_image("coffee.png"),), output=12, system=20, after=4)
    return Workload((first, Request("t2", (_image("chelsea.png"),), continues="t1", arrival=1)))


def _s20() -> Workload:
    return Workload(
        (
            Request("r1", (_image("camera.png"),), output=604),
            Request("r2", (_image("horse.png"),), after=21, output=445, arrival=38),
            Request("r3", (_image("rocket.jpg"),), output=178, arrival=383),
        )
    )


def _s20_evicted() -> Workload:
    first = Request("t1", (_image("horse.png"),), output=8)
    return Workload(
        (
            first,
            Request("r1", (_image("camera.png"),), output=300, arrival=20),
            Request("t2", (), continues="t1", arrival=200),
            Request("r2", (_image("rocket.jpg"),), output=8, arrival=200),
        )
    )


def _s1_across(calls: int, passes: int, rank: int = 1) -> LoadExpectation:
    """0.5.18's S1 across requests or turns at attention-TP 2: ``rank`` raises, the post-fix path fixes it."""
    return LoadExpectation(
        Status.ERROR_REPRODUCED,
        ErrorInfo("ValueError", MSG_GPU_WRONG_GRIDS),
        (rank,),
        fixed_in="0.5.19",
        calls=calls,
        passes=passes,
    )


EPD_GPU = ServerSettings(serving="epd-encoder", epd_backend="gpu")
_POST_FIX = PATH_INTRODUCED["post-fix"][0]  # the first release that reads the grids at global positions
_DISCARDS = releases_where("forward.discards_stale_cache")[0]  # the first that drops a cached entry of another length


# The load scenarios, one row each, in the order they are listed.
_LOAD_SCENARIO_ROWS: tuple[LoadScenario, ...] = (
    LoadScenario(
        "s14-two-requests-one-call",
        "S14: two single-image requests prefilled together on 0.5.18 at TP 2",
        "rocket.jpg and astronaut.png arrive as two requests of one image each. The scheduler prefills them "
        "together, so their images reach get_image_feature in one two-image call; at attention-TP 2 rank 1 "
        "reads rocket.jpg's grid for astronaut.png (S1 across requests) and raises, killing the scheduler.",
        ScenarioClass.S14,
        _s14,
        "0.5.18",
        2,
        _s1_across(calls=1, passes=1),
    ),
    LoadScenario(
        "s15-straddling-image",
        "S15: an image straddling two prefill chunks",
        "chelsea.png's 187 pad tokens sit at positions 108..294 and --chunked-prefill-size is 150: the first "
        "chunk [0, 150) encodes the whole image and takes its first 42 rows; the second chunk [150, 300) "
        "takes the other 145 from the embedding cache. Nothing fails; with the cache off "
        "(--mm-embedding-cache-size 0) the image is encoded twice.",
        ScenarioClass.S15,
        _s15,
        "0.5.23",
        2,
        LoadExpectation(Status.CLEAN, calls=1, passes=3),
        load=LoadSettings(chunked_prefill_size=150),
    ),
    LoadScenario(
        "s16-stale-cache-entry",
        "S16: an embedding-cache entry of another length",
        "The embedding cache holds 120 rows under chelsea.png's hash (left by a request that sized it "
        "differently); chelsea.png needs 187. 0.5.18 keys the cache by item.hash alone and uses the entry as it "
        f"is: too few rows for the pad tokens. {_DISCARDS} discards it with a warning and encodes the image.",
        ScenarioClass.S16,
        _s16,
        "0.5.18",
        1,
        LoadExpectation(
            Status.ERROR_REPRODUCED,
            ErrorInfo("RuntimeError", MSG_INSUFFICIENT.format(187, 120)),
            warnings=(MSG_TOKEN_MISMATCH.format(187, 120),),
            fixed_in="0.5.19",
            calls=0,
            passes=1,
        ),
    ),
    LoadScenario(
        "s17-stale-eager-split",
        "S17: S10 followed to the splice (per-image path)",
        "microaneurysms.png's item carries astronaut_tiny_20x5.png's 4 eager rows under its own 64-patch grid "
        "(a stale preprocessing-cache artifact, S10). get_image_feature copies them unchecked (1 token for 16 "
        "pad tokens); splitting the call's 113 rows by the pad counts [112, 16] makes torch raise.",
        ScenarioClass.S17,
        _s17("astronaut_tiny_20x5.png"),
        "0.5.23",
        1,
        LoadExpectation(
            Status.ERROR_REPRODUCED,
            ErrorInfo("RuntimeError", MSG_SPLIT_SIZES.format(113, [112, 16])),
            calls=1,
            passes=1,
        ),
    ),
    LoadScenario(
        "s17-stale-eager-epd-fewer",
        "S17: S10 on the EPD precomputed path, fewer rows",
        "The same stale item on an EPD deployment (gpu backend): the encode server sends 1 row for "
        "microaneurysms.png's 16 pad tokens; the language server logs the token-count warning (128 in the "
        "text, 113 from the embeddings) and raises.",
        ScenarioClass.S17,
        _s17("astronaut_tiny_20x5.png"),
        "0.5.23",
        1,
        LoadExpectation(
            Status.ERROR_REPRODUCED,
            ErrorInfo("RuntimeError", MSG_INSUFFICIENT.format(128, 113)),
            warnings=(MSG_TOKEN_MISMATCH.format(128, 113),),
            calls=0,
            passes=1,
        ),
        settings=EPD_GPU,
    ),
    LoadScenario(
        "s17-stale-eager-epd-more",
        "S17: S10 on the EPD precomputed path, more rows (silent)",
        "The stale rows are chelsea.png's 187: the language server cuts microaneurysms.png's part to the first "
        "16 rows without a word, so its pad tokens receive rows 0..15 of chelsea.png.",
        ScenarioClass.S17,
        _s17("chelsea.png"),
        "0.5.23",
        1,
        LoadExpectation(Status.SILENT_MISMATCH, calls=0, passes=1),
        settings=EPD_GPU,
    ),
    LoadScenario(
        "s18-prefix-reopens-image",
        "S18: a chat's second turn whose radix prefix ends inside the first turn's image (cache off)",
        "Turn 1 sends camera.png (pad run 90..450 after a 50-token system prompt, 484 prompt tokens); turn 2 "
        "continues the chat with coffee.png alone. Its radix prefix is 448: the state turn 1's prefill saved (484 "
        "floored to 64), which at --page-size 64 is also where a plain radix tree would stop (503 shared tokens "
        "floored to the page), three pad tokens short of camera.png's end. So camera.png overlaps turn 2's window "
        "again; with the embedding cache off (SGLANG_VLM_CACHE_SIZE_MB=0) it is a miss and goes back into "
        "get_image_feature beside coffee.png: a one-image turn makes a two-image call, and at attention-TP 2 rank 1 "
        "reads camera.png's grid for coffee.png (S1 across turns). With the cache on the call holds coffee.png "
        "alone; a smaller page does not help on Kimi-K3 (the hybrid tree cuts the hit back to 448 anyway), "
        "--disable-overlap-schedule does at page 1 (no_buffer saves a state at every insert).",
        ScenarioClass.S18,
        _s18,
        "0.5.18",
        2,
        _s1_across(calls=2, passes=2),
        load=LoadSettings(page_size=64, cache_mb=0),
    ),
    LoadScenario(
        "s19-saved-state-reopens-image",
        "S19: a chat's second turn re-opening the first turn's last image at the default flags (cache off)",
        "Turn 1 sends coffee.png (pad run 60..389, 395 prompt tokens) and gets 12 tokens back; turn 2 continues the "
        "chat with chelsea.png. At the default flags (page 1, the overlap schedule, so --mamba-radix-cache-strategy "
        "auto resolves to extra_buffer) Kimi-K3's hybrid tree saved turn 1's state only at 384 (395 floored to 64) "
        "and took its KV only that far: turn 2 shares its first 407 tokens (turn 1's prompt and answer) with turn 1, "
        "which a plain radix tree would match past coffee.png's end, but starts at 384, inside its pad run. The "
        "image is re-opened; with the embedding cache off (SGLANG_VLM_CACHE_SIZE_MB=0), or once it evicted "
        "coffee.png, it goes back into "
        "get_image_feature beside chelsea.png and at attention-TP 2 rank 1 reads coffee.png's grid for "
        "chelsea.png (S1 across turns). With the cache holding coffee.png, or --disable-overlap-schedule (no_buffer: "
        "a state at every insert, turn 2 starts at 406), the call holds chelsea.png alone.",
        ScenarioClass.S19,
        _s19,
        "0.5.18",
        2,
        _s1_across(calls=2, passes=2),
        load=LoadSettings(cache_mb=0),
    ),
    LoadScenario(
        "s20-retraction-meets-requests",
        "S20: a retraction puts two requests in one call that never meet with ample memory (KV pool 1555 tokens)",
        "r1 (camera.png) decodes 604 tokens, r2 (horse.png) arrives at step 38 and decodes 445, r3 (rocket.jpg) "
        "arrives at step 383. With ample memory each is prefilled alone (steps 0, 38, 383) and nothing fails. With a "
        "KV pool of 1555 tokens (--max-total-tokens 1555; the embedding cache off) the adder refuses r3 (NO_TOKEN), "
        "and at step 460 the decode step does not fit: retract_decode sends r2, the row with the fewest outputs, "
        "back to the queue, its KV freed. When r1 finishes, r3 and r2 (re-prefilled from its saved state at 192, "
        "inside horse.png's pad run 40..219) are prefilled together: one get_image_feature call holds rocket.jpg "
        "and horse.png, and at attention-TP 2 rank 1 reads rocket.jpg's grid for horse.png (S1 across requests). "
        f"A pool twice as large, the embedding cache holding horse.png, or {_POST_FIX} avoids it.",
        ScenarioClass.S20,
        _s20,
        "0.5.18",
        2,
        _s1_across(calls=3, passes=3),
        load=LoadSettings(cache_mb=0, max_total_tokens=1555),
    ),
    LoadScenario(
        "s20-evicted-turn-meets-request",
        "S20: a chat's second turn whose cached prefix memory evicted sends its image back into a call (KV pool 900)",
        "Turn 1 (t1) sends horse.png (pad run 40..219) and gets 8 tokens back; r1 (camera.png) arrives at step 20 "
        "and decodes 300 tokens; turn 2 (t2, no image of its own) and r2 (rocket.jpg) arrive at step 200. With "
        "ample memory t2 starts from turn 1's saved state at 256, past horse.png, and the pass that prefills t2 and "
        "r2 together calls get_image_feature with rocket.jpg alone. With a KV pool of 900 tokens "
        "(--max-total-tokens 900; the embedding cache off) r1's decode needs the room: the tree evicts turn 1's "
        "cached prefix, least recently used, at steps 231 and 295, so t2 starts at 0 and horse.png goes back into "
        "the call beside r2's rocket.jpg; at attention-TP 2 rank 0 takes rocket.jpg (the larger image) and reads "
        "horse.png's grid for it (S1 across requests) — the second turn fails only when memory is short. A larger "
        f"pool, the embedding cache holding horse.png, or {_POST_FIX} avoids it.",
        ScenarioClass.S20,
        _s20_evicted,
        "0.5.18",
        2,
        _s1_across(calls=3, passes=3, rank=0),
        load=LoadSettings(cache_mb=0, max_total_tokens=900),
    ),
)


LOAD_SCENARIOS: dict[str, LoadScenario] = {sc.name: sc for sc in _LOAD_SCENARIO_ROWS}


def get_load_scenario(name: str) -> LoadScenario:
    """Return the load scenario called ``name``; ScenarioError lists the valid names otherwise."""
    key = str(name).strip().lower()
    if key not in LOAD_SCENARIOS:
        raise ScenarioError(f"unknown load scenario {name!r}; expected one of: {', '.join(LOAD_SCENARIOS)}")
    return LOAD_SCENARIOS[key]


__all__ = ["LoadExpectation", "LoadScenario", "LOAD_SCENARIOS", "get_load_scenario"]
