"""The start-up line each SGLang release prints for given launch commands, made by its own ``ServerArgs``.

Run with a release's interpreter (a guest release's sources first on ``PYTHONPATH``) and a JSON list of argument
lists on stdin; prints a JSON list of lines, each exactly as the release's ``entrypoints/engine.py`` logs it
(``server_args=ServerArgs(...)`` up to 0.5.18, ``server_args={...}`` from 0.5.19, redacted from 0.5.22). Each
command is parsed and resolved by the release's own ``prepare_server_args`` with ``--device cpu`` and a folder
holding a Kimi-K3 ``config.json`` as ``--model-path`` (the resolution runs as on a server, on the CPU; a value it
resolves otherwise there shows in the line). A command the release refuses gives ``null``.
"""

from __future__ import annotations

import json
import logging
import sys
import tempfile
import warnings
from pathlib import Path

KIMI_K3_CONFIG = {
    "architectures": ["KimiK3ForConditionalGeneration"],
    "model_type": "kimi_k3",
    "media_placeholder_token_id": 163605,
    "text_config": {
        "model_type": "kimi_linear",
        "vocab_size": 163840,
        "hidden_size": 7168,
        "num_hidden_layers": 4,
        "num_attention_heads": 64,
        "max_position_embeddings": 262144,
        "qk_nope_head_dim": 128,
        "qk_rope_head_dim": 64,
        "v_head_dim": 128,
        "kv_lora_rank": 512,
        "q_lora_rank": 1536,
        "num_key_value_heads": 64,
        "intermediate_size": 18432,
        "moe_intermediate_size": 2048,
        "num_experts": 8,
        "num_experts_per_token": 2,
        "head_dim": 72,
        "linear_attn_config": {
            "kda_layers": [1, 2, 3],
            "full_attn_layers": [4],
            "head_dim": 128,
            "num_heads": 32,
            "short_conv_kernel_size": 4,
        },
    },
    "vision_config": {"model_type": "kimi_k3_vision"},
}


def line(server_args) -> str:
    """Return the start-up line as the release logs it."""
    if not hasattr(server_args, "resolved_dict"):
        return f"{server_args=}"
    try:
        from sglang.srt.entrypoints.engine import _server_args_for_logging
    except ImportError:
        return f"server_args={server_args.resolved_dict()}"
    return f"server_args={_server_args_for_logging(server_args)}"


def main() -> int:
    warnings.filterwarnings("ignore")
    logging.disable(logging.CRITICAL)
    from sglang.srt.server_args import prepare_server_args

    commands = json.load(sys.stdin)
    lines = []
    with tempfile.TemporaryDirectory() as folder:
        (Path(folder) / "config.json").write_text(json.dumps(KIMI_K3_CONFIG))
        for argv in commands:
            try:
                server_args = prepare_server_args(["--model-path", folder, "--device", "cpu", *argv])
            except (Exception, SystemExit):  # noqa: BLE001 - a command this release refuses, on the CPU
                lines.append(None)
                continue
            lines.append(line(server_args).replace(folder, "/models/Kimi-K3"))
    json.dump(lines, sys.stdout)
    return 0


if __name__ == "__main__":
    sys.exit(main())
