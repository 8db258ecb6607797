"""The ids the scheduler's model reads for a workload: shared system prompts, captions and image runs."""

from __future__ import annotations

from kimi_viz.data import sample_path
from kimi_viz.forward.workload_replay import replay_workload
from kimi_viz.request.images import probe_image
from kimi_viz.request.prompt import caption_tokens
from kimi_viz.request.workload import Request, Workload
from kimi_viz.scheduler.flags import LoadSettings

CHELSEA = probe_image(sample_path("chelsea.png"))
CHELSEA_EXIF = probe_image(sample_path("chelsea_exif_orientation6.jpg"))  # the same upload size, other pixels


def _load(workload: Workload):
    return replay_workload(workload, sglang_version="0.5.23", tp_size=1, load=LoadSettings(chunked_prefill_size=None))


def _starts(result) -> list[tuple[int, int, int]]:
    """Each admitted request's (index, what a plain radix tree would match, the FULL match, the prefix it starts
    from after the cut back to a saved state)."""
    out = []
    for plan in result.plans:
        for w in plan.windows:
            match = plan.formed.match_of(w.rid)
            out.append((result.index(w.rid), match.plain if match else 0, match.full if match else 0, w.prefix_len))
    return out


def test_two_images_of_one_size_differ_only_in_their_pad_values():
    assert CHELSEA.size == CHELSEA_EXIF.size and CHELSEA.digest != CHELSEA_EXIF.digest
    workload = Workload(
        (
            Request("a", (CHELSEA,), before=0, after=5, system=40),
            Request("b", (CHELSEA_EXIF,), before=0, after=5, system=40, arrival=3),
        )
    )
    result = _load(workload)
    start = result.prompts[1].pad_runs[0][0]
    assert start == 40 + 1 + caption_tokens(*CHELSEA.size) + 1  # system, <|media_begin|>, caption, <|media_content|>
    # the caption "image 451x300" is the same text for both, so b's radix match runs up to its pads and stops;
    # a saved its first state 64·k tokens into its prompt, past that, so b starts from the root
    assert _starts(result) == [(0, 0, 0, 0), (1, start, start, 0)]


def test_the_same_image_again_is_matched_through_its_pads():
    workload = Workload(
        (
            Request("a", (CHELSEA,), before=0, after=5, system=40),
            Request("b", (CHELSEA,), before=0, after=7, system=40, arrival=3),
        )
    )
    result = _load(workload)
    end = result.prompts[1].pad_runs[0][1]
    # a plain tree would match through the pads and the two tokens after them; the hybrid tree took a's KV only
    # up to the state its prefill saved (its prompt floored to 64), so b matches and starts there
    saved = result.prompts[0].length // 64 * 64
    assert _starts(result) == [(0, 0, 0, 0), (1, end + 2, saved, saved)] and saved < end + 2
