"""The lane tests itself: with a known bug planted in the kit, the comparisons report disagreements.

A green lane means something only if the same comparison goes red on a wrong kit. Each plant below
is undone after its test (monkeypatch); the lane's own checks then run on the untouched kit.
"""

from __future__ import annotations

from kimi_viz.scenarios import SCENARIOS
from kimi_viz.split.state import RankState

from .batches import random_batch
from .lane import compare, kit_outcomes, real_outcomes, record


def _disagreements(release: str, seeds: range) -> list[str]:
    found = []
    for name in ("s1-cpu", "s1-gpu"):
        batch = SCENARIOS[name].build()
        found += compare(name, kit_outcomes(batch, 2, release), real_outcomes(batch, 2))
    for seed in seeds:
        case = random_batch(seed)
        found += compare(
            case.description, kit_outcomes(case.batch, case.tp_size, release), real_outcomes(case.batch, case.tp_size)
        )
    return found


def test_a_planted_index_mapping_bug_is_caught(release, monkeypatch):
    """On a post-fix release plant the S1 bug (local indices); on 0.5.18 plant the fix (global indices)."""

    def local(self, indices):
        return list(indices)

    def global_(self, indices):
        return [self.image_indices[k] for k in indices]

    monkeypatch.setattr(RankState, "grid_rows_read", global_ if release == "0.5.18" else local)
    found = _disagreements(release, range(20))
    record("planted-bug", plant="index mapping", disagreements=len(found))
    assert len(found) >= 2, "the lane did not notice a wrong index mapping"


def test_a_planted_message_typo_is_caught(release, monkeypatch):
    import kimi_viz.split.length_check as length_check

    monkeypatch.setattr(length_check, "MSG_LENGTH", "Kimi-K3 deferred feature length does not match image grid")
    found = []
    for name in ("s2-cpu", "s6-stacked"):
        batch = SCENARIOS[name].build()
        found += compare(name, kit_outcomes(batch, 1, release), real_outcomes(batch, 1))
    record("planted-bug", plant="message text", disagreements=len(found))
    assert len(found) == 2
