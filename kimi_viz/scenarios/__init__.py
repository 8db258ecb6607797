"""Named, reproducible batches for every way the deferred split breaks (pipeline spec §7), and healthy ones.

:mod:`.catalogue` builds each scenario from the sample images with SGLang's producer
(:mod:`kimi_viz.request.producer`), bends one thing and states what SGLang does with it. Names are
imported lazily (the catalogue needs torch).
"""

from __future__ import annotations

from .._lazy import lazy_exports

_EXPORTS = {
    "Scenario": "catalogue",
    "ExpectedOutcome": "catalogue",
    "SCENARIOS": "catalogue",
    "HEALTHY_IMAGES": "catalogue",
    "get_scenario": "catalogue",
    "run_scenario": "catalogue",
    "eager_rows": "catalogue",
    "LoadScenario": "under_load",
    "LoadExpectation": "under_load",
    "LOAD_SCENARIOS": "under_load",
    "get_load_scenario": "under_load",
}

# The scenarios the demo tours (``kimi-viz demo``): here, beside nothing heavy, so the CLI's parser can show them.
DEMO_SCENARIOS = (
    "healthy-tp2",
    "s1-cpu",
    "s1-gpu",
    "s2-cpu",
    "s2-gpu",
    "s3-mixed-local",
    "s4-cpu",
    "s4-gpu",
    "s6-stacked",
    "s8-t2",
    "s9-two-grids",
    "s10-stale-eager",
    "s11-two-channels",
    "s12-hwc",
    "s13-zero-size",
)
# The workloads the demo tours after them: one load scenario per class S14-S17, a chat's second turn (S18, S19),
# then meetings only memory pressure brings about (S20: a retraction; a chat turn whose cached prefix was evicted).
DEMO_LOAD_SCENARIOS = (
    "s14-two-requests-one-call",
    "s15-straddling-image",
    "s16-stale-cache-entry",
    "s17-stale-eager-split",
    "s18-prefix-reopens-image",
    "s19-saved-state-reopens-image",
    "s20-retraction-meets-requests",
    "s20-evicted-turn-meets-request",
)
# Then two answers read from what a user has rather than from a scenario (kimi_viz._demo): the kit's sample server
# log (--server-log) and a chat tokenized by a checkpoint folder (--model-path, the synthetic demo checkpoint).
DEMO_INPUTS = (
    "from-server-log",
    "chat-model-path",
)

__all__ = sorted(_EXPORTS)
__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS)
