"""Every fix is named by its own change: the changes each release shipped cover the table's differences, and the
fix search names, for every failure class a release ends, the change that ends that class and no other's."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from kimi_viz import whatif
from kimi_viz.release_changes import Change
from kimi_viz.release_changes.fix_search import first_fixing_release
from kimi_viz.release_changes.rules import rule_differences, rule_names, rule_value, shipped_in, with_rules
from kimi_viz.releases import RELEASES
from kimi_viz.scenarios.catalogue import SCENARIOS
from kimi_viz.scenarios.under_load import LOAD_SCENARIOS

PACKAGE = Path(__file__).resolve().parent.parent / "kimi_viz"
TABLE = PACKAGE / "release_changes" / "shipped.py"  # where each change names its pull requests
PAIRS = list(zip(list(RELEASES.values()), list(RELEASES.values())[1:]))
GRID_INDEX_FIX = 35305  # 0.5.19's global_indices
CACHE_LENGTH_FIX = 36595  # 0.5.19's cached embedding of another length discarded
BACKPORT = 36265  # the grid-index fix on release/v0.5.18: in no release the kit knows


def _change(version: str, pr: int) -> Change:
    (change,) = [c for c in RELEASES[version].shipped if pr in c.prs]
    return change


# --- the table: each difference covered by exactly one change ------------------------------------------------


@pytest.mark.parametrize(("old", "new"), PAIRS, ids=[new.version for _, new in PAIRS])
def test_every_rule_that_differs_is_covered_by_exactly_one_change_of_the_later_release(old, new):
    differing = rule_differences(old, new)
    covered = [rule for change in new.shipped for rule in change.rules]
    assert sorted(covered) == sorted(differing)  # each difference once, and nothing that does not differ
    for change in new.shipped:
        assert change.rules and all(rule_value(old, r) != rule_value(new, r) for r in change.rules)
        assert change.title and change.where and shipped_in(change) == new.version


def test_the_first_release_ships_nothing_and_the_rule_names_are_the_records_fields():
    first = next(iter(RELEASES.values()))
    assert first.shipped == ()
    names = rule_names()
    assert names[0] == "code_path" and len(names) == len(set(names))
    assert {"forward.discards_stale_cache", "request_side.transports", "scheduler.split_keeps_recency"} <= set(names)
    assert not {n for n in names if n.endswith((".version", ".changes"))}  # a record's release and sentence


def test_the_releases_differ_where_the_research_found_them():
    """What 0.5.19 shipped: the grid-index fix (the code path) and the cache-length fix are different changes."""
    assert rule_differences(RELEASES["0.5.20"], RELEASES["0.5.21"]) == ()
    assert _change("0.5.19", GRID_INDEX_FIX).rules == ("code_path",)
    assert _change("0.5.19", CACHE_LENGTH_FIX).rules == ("forward.dedupe_by_tokens", "forward.discards_stale_cache")
    assert not any(BACKPORT in c.prs for r in RELEASES.values() for c in r.shipped)


def test_a_change_applied_alone_replaces_only_its_rules():
    old, new = RELEASES["0.5.18"], RELEASES["0.5.19"]
    alone = with_rules(old, _change("0.5.19", CACHE_LENGTH_FIX).rules, new)
    assert rule_differences(old, alone) == ("forward.dedupe_by_tokens", "forward.discards_stale_cache")
    assert (alone.version, alone.code_path, alone.request_side, alone.scheduler) == (
        "0.5.18",
        "pre-fix",
        old.request_side,
        old.scheduler,
    )
    assert with_rules(old, ("code_path",), new).code_path == "post-fix" and RELEASES["0.5.18"] == old


# --- the fix search: alone, each alone, together --------------------------------------------------------------


def test_several_changes_that_each_alone_run_it_clean_are_all_named():
    found = first_fixing_release(
        RELEASES["0.5.18"],
        lambda r: r.code_path == "post-fix" or r.forward.discards_stale_cache,
        lambda r: (r.code_path, r.forward),
    )
    assert (found.release, found.together) == ("0.5.19", False)
    assert [c.prs for c in found.changes] == [(GRID_INDEX_FIX,), (CACHE_LENGTH_FIX,)]
    grid, cache = (c.text for c in found.changes)
    assert found.text == f"fixed in 0.5.19: {grid} or {cache}, each alone"


def test_when_no_change_alone_runs_it_clean_every_change_the_question_sees_is_named_together():
    """Clean only with both the 0.5.18 placeholder count and 0.5.20's split recency: the first clean release is
    0.5.20, and the 0.5.18 change is said to have shipped there."""
    found = first_fixing_release(
        RELEASES["0.5.17"],
        lambda r: r.forward.count_from_offsets and r.scheduler.split_keeps_recency,
        lambda r: (r.forward.count_from_offsets, r.scheduler.split_keeps_recency),
    )
    assert (found.release, found.together) == ("0.5.20", True)
    assert [c.prs for c in found.changes] == [(34995,), (38482,)]
    assert found.text == (
        "fixed in 0.5.20: SGLang PR #34995 (Avoid synchronizing multimodal placeholder counts; "
        "managers/mm_schedule.py _count_mm_tokens_in_extend, get_embedding_and_mask (maybe_assert_sum)), "
        "shipped in 0.5.18 and SGLang PR #38482 (Preserve aux LRU recency when splitting nodes; "
        "mem_cache/unified_cache/unified_tree_core.py UnifiedTreeCore._split_node), together"
    )
    assert [c["release"] for c in found.to_json()["changes"]] == ["0.5.18", "0.5.20"]


def test_a_change_without_a_pull_request_names_its_file_and_function():
    (change,) = [c for c in RELEASES["0.5.22"].shipped if c.rules == ("forward.precomputed_per_item",)]
    assert change.text == (
        "managers/mm_schedule.py _get_precomputed_embedding (precomputed rows cut per item; no SGLang PR identified)"
    )


# --- every class a release ends, named by its own change ------------------------------------------------------


def _fixes() -> dict[str, set[tuple[str, tuple[int, ...], tuple[str, ...], bool]]]:
    """Return, per class, what the fix search names on every release that fails: (release, PRs, rules, together)."""
    named: dict[str, set[tuple[str, tuple[int, ...], tuple[str, ...], bool]]] = {}

    def note(scenario_class: str, answer) -> None:
        found = answer.fixed_in
        if found is not None:
            prs = tuple(pr for c in found.changes for pr in c.prs)
            rules = tuple(rule for c in found.changes for rule in c.rules)
            named.setdefault(scenario_class, set()).add((found.release, prs, rules, found.together))

    for version in RELEASES:
        for scenario in SCENARIOS.values():
            answer = whatif(scenario.build(), sglang_version=version, tp_size=scenario.tp_size)
            if answer.verdict is not None and answer.verdict.divergence is not None:
                note(answer.verdict.divergence.scenario_class.value, answer)
        for load in LOAD_SCENARIOS.values():
            answer = whatif(
                load.build(),
                sglang_version=version,
                tp_size=load.tp_size,
                settings=load.settings,
                load=load.load,
                try_flags=False,
            )
            note(load.scenario_class.value, answer)
    return named


@pytest.fixture(scope="module")
def fixes():
    return _fixes()


def test_each_class_a_release_ends_is_named_by_its_own_change(fixes):
    path_fix = ("0.5.19", (GRID_INDEX_FIX,), ("code_path",), False)
    assert fixes == {
        "S1": {path_fix},
        "S14": {path_fix},
        "S16": {("0.5.19", (CACHE_LENGTH_FIX,), ("forward.dedupe_by_tokens", "forward.discards_stale_cache"), False)},
        "S18": {path_fix},
        "S19": {path_fix},
        "S20": {path_fix},
        # a producer newer than its consumer (0.5.17): the consumer's deferred split at TP 1, the fix beyond it at 2+
        "skew": {path_fix, ("0.5.18", (33921, 34206), ("code_path",), False)},
    }


def test_no_class_borrows_another_classs_change(fixes):
    prs = {name: {pr for _, numbers, _, _ in found for pr in numbers} for name, found in fixes.items()}
    rules = {name: {rule for _, _, names, _ in found for rule in names} for name, found in fixes.items()}
    assert CACHE_LENGTH_FIX in prs["S16"] and GRID_INDEX_FIX not in prs["S16"]
    for name in ("S1", "S14", "S18", "S19", "S20"):
        assert prs[name] == {GRID_INDEX_FIX}
    for first in fixes:
        for second in fixes:
            if rules[first] != rules[second]:
                assert not prs[first] & prs[second], (first, second)
    assert not any(BACKPORT in numbers for found in fixes.values() for _, numbers, _, _ in found)


def test_the_s16_answer_says_the_cache_length_fix():
    answer = whatif(
        LOAD_SCENARIOS["s16-stale-cache-entry"].build(), sglang_version="0.5.18", tp_size=1, try_flags=False
    )
    assert answer.fixed_in.text == (
        "fixed in 0.5.19: SGLang PR #36595 (Re-encode multimodal embeddings after cache mismatch; "
        "managers/mm_schedule.py _discard_mismatched_cached_embedding, _batch_encode_per_image_misses)"
    )


def test_only_the_change_table_writes_pull_request_numbers():
    """A change's PR is a fact of the table: no other module of the kit writes one of them out."""
    numbers = {pr for release in RELEASES.values() for change in release.shipped for pr in change.prs} | {BACKPORT}
    pattern = re.compile(r"#(\d{5})\b")
    found = {
        f"{path.relative_to(PACKAGE)}: #{match[1]}"
        for path in PACKAGE.rglob("*")
        if path.is_file() and path.suffix in (".py", ".toml", ".json", ".tmpl", ".md") and path != TABLE
        for match in pattern.finditer(path.read_text(encoding="utf-8"))
        if int(match[1]) in numbers
    }
    assert found == set()
