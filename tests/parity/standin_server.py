"""A stand-in SGLang server for the capture lane: one process per attention-TP rank, real get_image_feature.

    python standin_server.py SOURCE_MANIFEST --tp N --outcomes DIR

starts N rank processes (``--rank R``). Each reads the batch from a kit manifest, builds real
``MultimodalDataItem`` s with the real deferred config, sets what a running server would have set
(its attention-TP size and rank in ``sglang.srt.runtime_context.get_parallel()``; 0.5.18's
configured TP size), replaces SGLang's DP runner with one that materializes this rank's share as the real one
does (SGLang's own ``get_dp_encoder_lb_assignment``), and calls the real
``KimiK3ForConditionalGeneration.get_image_feature``. Run under ``kimi-viz capture``, the capture
shim wraps that method in every rank process. Each rank writes ``DIR/rank<R>.json`` with its
outcome (type and message), and the server exits 0 either way.
"""

from __future__ import annotations

import argparse
import json
import math
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace
from unittest import mock


def run_rank(source: str, tp: int, rank: int, outcomes: Path) -> None:
    """Call the real get_image_feature on this rank's share; write what happened."""
    import torch

    sys.path.insert(0, str(Path(__file__).resolve().parent))
    import lane

    from kimi_viz.manifest import read_manifest

    batch = read_manifest(source)
    model = lane.real_model(batch)
    items = lane.real_items(batch)
    runtime_context = lane.module("sglang.srt.runtime_context")
    parallel = SimpleNamespace(attn_tp_size=tp, attn_tp_rank=rank, tp_size=tp)
    mm_utils = lane.module("sglang.srt.multimodal.mm_utils")

    def dp_runner(vision_model, pixel_values, grid_thw_list, *, load_local_pixel_values, **_):
        # What run_dp_sharded_mrope_vision_model does before its all-gather: this rank's share only.
        if tp == 1:
            mine = list(range(len(grid_thw_list)))
        else:
            order, counts, _ = mm_utils.get_dp_encoder_lb_assignment([math.prod(g) for g in grid_thw_list], tp)
            start = sum(counts[:rank])
            mine = list(order[start : start + counts[rank]])
        if mine:
            load_local_pixel_values(mine)
        return torch.zeros(1, 2)

    result = {"rank": rank, "outcome": "ok", "type": None, "message": None}
    with (
        mock.patch.object(runtime_context, "get_parallel", return_value=parallel),
        mock.patch.object(mm_utils, "run_dp_sharded_mrope_vision_model", dp_runner),
    ):
        stack = __import__("contextlib").ExitStack()
        with stack:
            lane.release_patches(stack, tp)
            try:
                model.get_image_feature(items)
            except Exception as exc:  # noqa: BLE001 - the server's own exception, reported verbatim
                result.update(outcome="error", type=type(exc).__name__, message=str(exc))
    (outcomes / f"rank{rank}.json").write_text(json.dumps(result), encoding="utf-8")


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("source")
    parser.add_argument("--tp", type=int, required=True)
    parser.add_argument("--rank", type=int)
    parser.add_argument("--outcomes", required=True)
    args = parser.parse_args()
    outcomes = Path(args.outcomes)
    if args.rank is not None:
        run_rank(args.source, args.tp, args.rank, outcomes)
        return 0
    outcomes.mkdir(parents=True, exist_ok=True)
    ranks = [
        subprocess.Popen(
            [sys.executable, __file__, args.source, "--tp", str(args.tp), "--rank", str(r), "--outcomes", str(outcomes)]
        )
        for r in range(args.tp)
    ]
    codes = [p.wait() for p in ranks]
    return 0 if all(c == 0 for c in codes) else 1


if __name__ == "__main__":
    sys.exit(main())
