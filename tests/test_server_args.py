"""What a Kimi-K3 server resolves its scheduler flags to, release by release, and what it refuses.

The values are those each release's own ``ServerArgs`` gives for Kimi-K3 (the lane's
``test_the_flags_resolve_as_the_release_resolves_them_on_every_gpu`` holds the kit to the real code on
every GPU family); here they are pinned so a change shows without SGLang installed.
"""

from __future__ import annotations

import pytest

from kimi_viz.cli import main
from kimi_viz.errors import SettingNotInReleaseError
from kimi_viz.releases import RELEASES
from kimi_viz.scheduler.flags import LoadSettings
from kimi_viz.scheduler.server_config import resolve_server


def _server(release: str, **flags):
    return resolve_server(LoadSettings(**flags), RELEASES[release])


@pytest.mark.parametrize("release", ["0.5.18", "0.5.23"])
def test_the_default_server_is_the_hybrid_tree_with_the_extra_buffer_and_the_overlap_loop(release):
    server = _server(release)
    assert (server.tree, server.strategy, server.overlap) == ("UnifiedRadixCache (FULL + MAMBA)", "extra_buffer", True)
    assert (server.attention_backend, server.page_size, server.track_interval) == ("fa3", 1, 256)
    assert server.resolved == ("--mamba-radix-cache-strategy auto resolved to extra_buffer",)


def test_auto_without_the_overlap_schedule_is_no_buffer_at_page_1_and_extra_buffer_above():
    assert (_server("0.5.23", disable_overlap_schedule=True).strategy, _server("0.5.23").overlap) == (
        "no_buffer",
        True,
    )
    paged = _server("0.5.23", disable_overlap_schedule=True, page_size=64)
    assert (paged.strategy, paged.overlap, paged.page_size) == ("extra_buffer", False, 64)


@pytest.mark.parametrize(
    ("release", "gpu", "backend", "page"),
    [
        ("0.5.23", "hopper", None, 1),  # fa3
        ("0.5.23", "blackwell", None, 64),  # trtllm_mla, Kimi-K3's own override
        ("0.5.23", "rocm", None, 1),  # triton
        ("0.5.23", "hopper", "flashmla", 64),
        ("0.5.23", "hopper", "cutedsl_mla", 64),
        ("0.5.18", "hopper", "cutlass_mla", 128),
        ("0.5.19", "hopper", "cutlass_mla", 128),
    ],
)
def test_the_page_size_follows_the_attention_backend_as_the_release_snaps_it(release, gpu, backend, page):
    server = _server(release, gpu=gpu, attention_backend=backend)
    assert server.page_size == page
    assert server.cache_chunk == max(64, page)


def test_the_decode_save_grid_is_the_interval_up_to_0_5_18_and_lcm_with_64_from_0_5_19():
    assert [_server(r, mamba_track_interval=100).decode_grid for r in ("0.5.17", "0.5.18", "0.5.19", "0.5.23")] == [
        100,
        100,
        1600,
        1600,
    ]
    assert _server("0.5.23").decode_grid == 256


@pytest.mark.parametrize(
    ("release", "flags", "words"),
    [
        ("0.5.23", {"mamba_radix_cache_strategy": "no_buffer"}, "no_buffer do not support overlap schedule"),
        (
            "0.5.23",
            {"mamba_radix_cache_strategy": "no_buffer", "disable_overlap_schedule": True, "page_size": 16},
            "no_buffer only supports page_size=1.",
        ),
        ("0.5.20", {"attention_backend": "cutlass_mla"}, "invalid choice: 'cutlass_mla'"),
        (
            "0.5.23",
            {"mamba_radix_cache_strategy": "extra_buffer", "page_size": 64, "mamba_track_interval": 100},
            "--mamba-track-interval 100 is not a multiple of --page-size 64",
        ),
        # auto resolves to extra_buffer first, and the release validates what it resolved
        ("0.5.18", {"page_size": 64, "mamba_track_interval": 100}, "--mamba-track-interval 100 is not a multiple"),
        (
            "0.5.23",
            {"page_size": 48, "mamba_track_interval": 96, "chunked_prefill_size": None},
            "either chunk_size or page_size must be divisible by the other, got chunk_size=64, page_size=48",
        ),
    ],
)
def test_a_combination_the_release_refuses_is_refused_with_its_reason(release, flags, words):
    with pytest.raises(SettingNotInReleaseError) as raised:
        _server(release, **flags)
    message = str(raised.value)
    assert message.startswith(f"SGLang {release} refuses these flags for Kimi-K3: ") and words in message


def test_radix_cache_off_builds_a_chunk_cache_up_to_0_5_21_and_a_disabled_hybrid_tree_after():
    assert _server("0.5.18", disable_radix_cache=True).tree == "ChunkCache"
    assert _server("0.5.23", disable_radix_cache=True).tree == "UnifiedRadixCache (disabled)"


def test_the_strategys_old_spelling_is_taken_where_the_release_has_it(capsys):
    argv = ["whatif", "chelsea.png", "coffee.png", "--together", "--tp", "1", "--disable-overlap-schedule"]
    assert main([*argv, "--sglang-version", "0.5.18", "--mamba-scheduler-strategy", "no_buffer"]) == 0
    out = capsys.readouterr().out
    assert "note: the server runs UnifiedRadixCache (FULL + MAMBA), no_buffer, no overlap (event_loop_normal)" in out
    # the same words as the new spelling give the same answer
    assert main([*argv, "--sglang-version", "0.5.18", "--mamba-radix-cache-strategy", "no_buffer"]) == 0
    assert capsys.readouterr().out == out


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        (
            ["--sglang-version", "0.5.23"],
            "--mamba-scheduler-strategy: SGLang 0.5.23 has no such flag (only 0.5.17–0.5.19 spell "
            "--mamba-radix-cache-strategy so); give --mamba-radix-cache-strategy",
        ),
        (
            ["--sweep"],
            "--mamba-scheduler-strategy is SGLang 0.5.17–0.5.19's spelling of --mamba-radix-cache-strategy, which "
            "every release takes: give --mamba-radix-cache-strategy with --sweep",
        ),
        (
            ["--sglang-version", "0.5.18", "--mamba-radix-cache-strategy", "no_buffer"],
            "--mamba-scheduler-strategy with --mamba-radix-cache-strategy: they are one flag",
        ),
    ],
)
def test_the_old_spelling_is_refused_in_one_line_where_it_does_not_fit(extra, message, capsys):
    tp = [] if "--sweep" in extra else ["--tp", "1"]
    argv = ["whatif", "chelsea.png", "--together", "--mamba-scheduler-strategy", "no_buffer", *tp, *extra]
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert message in err and len(err.strip().splitlines()) == 1 and "Traceback" not in err
