"""A workload's limits at peak hours: up to 1,000 requests, outputs up to the model's context length (a server log's
``context_len=`` given to the reader), each image file read once, and each request's generated ids a run that
costs no memory."""

from __future__ import annotations

import pytest

from kimi_viz.errors import WhatIfError
from kimi_viz.forward.workload_replay import replay_workload
from kimi_viz.request.token_ids import scheduled_requests
from kimi_viz.request.workload import CONTEXT_LEN, MAX_REQUESTS, parse_workload
from kimi_viz.scheduler.flags import LoadSettings


def _requests(count: int, output: int = 1) -> dict:
    return {"requests": [{"id": f"r{k}", "images": ["camera.png"], "output": output} for k in range(count)]}


def test_a_thousand_requests_share_one_copy_of_an_image_and_a_thousand_and_one_are_refused():
    assert (MAX_REQUESTS, CONTEXT_LEN) == (1000, 262_144)
    workload = parse_workload(_requests(1000))
    assert len(workload.requests) == 1000
    assert workload.requests[0].images[0] is workload.requests[999].images[0]  # camera.png probed once
    with pytest.raises(WhatIfError, match="1001 requests, over the limit of 1000"):
        parse_workload(_requests(1001))


def test_outputs_run_up_to_the_context_length_a_log_gives():
    assert parse_workload(_requests(1, CONTEXT_LEN)).requests[0].output == CONTEXT_LEN
    with pytest.raises(WhatIfError, match=r"requests\[0\]\.output: expected 1 to 262144 generated tokens"):
        parse_workload(_requests(1, CONTEXT_LEN + 1))
    short = parse_workload(_requests(1, 4000), context_len=4000)  # a server started with context_len=4000
    assert short.context_len == 4000
    with pytest.raises(
        WhatIfError, match=r"output: expected 1 to 4000 generated tokens \(the model's context length\), got 4001"
    ):
        parse_workload(_requests(1, 4001), context_len=4000)


def test_a_long_answer_is_a_run_of_ids_not_a_copy_of_them():
    workload = parse_workload(_requests(2, 200_000))
    result = replay_workload(workload, sglang_version="0.5.23", tp_size=1, load=LoadSettings())
    first, second = scheduled_requests(workload, result.prompts, [list(b.images) for b in result.built])
    assert isinstance(first.generated_ids, range) and len(first.generated_ids) == 200_000
    assert first.generated_ids.stop <= second.generated_ids.start  # fresh ids for each answer
    assert result.schedule.steps == 200_001 and len(result.schedule.memory) == 0  # unbounded: nothing recorded
