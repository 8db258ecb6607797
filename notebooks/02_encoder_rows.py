# ---
# jupyter:
#   jupytext:
#     cell_metadata_filter: tags,-all
#     formats: ipynb,py:percent
#     notebook_metadata_filter: kernelspec,jupytext
#     text_representation:
#       extension: .py
#       format_name: percent
#       format_version: '1.3'
#       jupytext_version: 1.19.6
#   kernelspec:
#     display_name: Python 3 (ipykernel)
#     language: python
#     name: python3
# ---

# %% [markdown]
# # 02 · Rows in, tokens out: the vision tower
#
# **Do the rows I feed the Kimi-K3 vision tower come out as exactly one feature per `<|media_pad|>` token?**
#
# The tower (MoonViT3d, 27 blocks, each image attending only to itself) turns `t·h·w` rows of
# `pixel_values` per image into `h·w` hidden rows, merges every 2×2 group into one, and projects it
# to the language model's width (7168). So each image must produce `h·w/4` features, exactly the
# number of `<|media_pad|>` tokens its prompt block holds. This notebook runs the tower and checks
# that bookkeeping image by image.
#
# Without a checkpoint the weights are random (seeded): the *counts* and *shapes* are the real ones,
# the feature *values* are not meaningful. On a GPU it runs the full `kimi-k3` tower in bf16; on
# CPU the `tiny` preset (the same code with small widths). Runs in about 13 s on a 2-core CPU.

# %% tags=["parameters"]
device = "auto"
preset = None  # None: "kimi-k3" on a GPU, "tiny" on CPU
checkpoint_dir = None  # a local Kimi-K3 checkpoint folder; None: random weights

# %%
# %matplotlib inline
from kimi_viz import SAMPLE_PHOTOS, BatchLayout, Processor, RowCountError, plots, resolve_device, sample_path
from kimi_viz.encoder import VisionEncoder, processor_preset_for
from kimi_viz.report import Table

# %% [markdown]
# ## 1. The encoder
#
# `device = "auto"` means CUDA when available. The preset follows the device unless you set it.
# The `tiny` preset is a 2-layer, 96-wide stand-in so the notebook runs in seconds on a CPU:
# its hidden rows are 64 wide and its features 96 wide, where kimi-k3 is 1024 wide with
# 7168-wide output features. Every count below (rows, tokens) is the same for both.

# %%
run_on = resolve_device(device)
chosen_preset = preset or ("kimi-k3" if run_on.type == "cuda" else "tiny")
encoder = (
    VisionEncoder.from_checkpoint(checkpoint_dir, device=run_on)
    if checkpoint_dir
    else VisionEncoder.random(chosen_preset, seed=0, device=run_on)
)
Table(
    ["", ""],
    [
        ["preset", encoder.config.name],
        ["device", str(encoder.device)],
        ["dtype", str(encoder.dtype).replace("torch.", "")],
        ["blocks", encoder.config.num_layers],
        ["hidden width", encoder.config.hidden_size],
        ["feature width", encoder.config.out_dim],
        ["parameters", f"{encoder.num_parameters():,}"],
        ["processor preset", processor_preset_for(encoder.config)],
    ],
)

# %% [markdown]
# ## 2. The rows going in
#
# Four sample photos through SGLang's torch path (the "gpu" backend) of the processor preset this
# encoder expects (`kimi-k3` for both kimi-k3 and tiny), packed into one batch. Each image owns
# `t·h·w` rows and will own `h·w/4` tokens.

# %%
photos = SAMPLE_PHOTOS[:4]
processor = Processor(processor_preset_for(encoder.config), backend="torch", device=run_on)
batch = processor.preprocess([sample_path(name) for name in photos])
layout = BatchLayout.from_output(batch)
plots.draw_row_spans(layout).figure

# %% [markdown]
# ## 3. The features coming out
#
# `encode` checks first that the rows fit the grids, then runs every image through the tower.
# `return_intermediates=True` keeps the hidden rows before the merge and the time of each stage.

# %%
features = encoder.encode(batch.pixel_values, batch.grid_thws, return_intermediates=True)
Table(
    ["image", "grid t×h×w", "rows in", "tokens out", "<|media_pad|> tokens"],
    [
        (name, "×".join(map(str, grid)), end - start, token_end - token_start, record.num_tokens)
        for name, grid, (start, end), (token_start, token_end), record in zip(
            photos, features.grid_thws.tolist(), features.row_spans, features.token_spans, batch.records
        )
    ],
)

# %% [markdown]
# Every image: rows in = `t·h·w`, tokens out = `h·w/4` = its `<|media_pad|>` count. In total
# (the widths are the preset's: with `tiny` the hidden rows are 64 wide and the features 96 wide,
# a stand-in for kimi-k3's 1024-wide hidden rows and 7168-wide features):

# %%
Table(
    ["tensor", "rows", "width"],
    [
        ("pixel_values (3·14·14 per row)", batch.pixel_values.shape[0], 3 * 14 * 14),
        ("hidden rows before the merge", features.pre_merge.shape[0], features.pre_merge.shape[1]),
        ("features (one per token)", features.features.shape[0], features.features.shape[1]),
        ("<|media_pad|> tokens in the prompt", layout.total_tokens, None),
    ],
)

# %% [markdown]
# ## 4. What the features look like
#
# The first three principal components of one image's token features (96 values per token with
# `tiny`, 7168 with kimi-k3), as R, G, B on its token grid (`h/2 × w/2`), over the picture. With
# random weights this shows the position table and the picture's colours leaking through; with
# real weights it shows objects.

# %%
plots.draw_feature_map(features, batch, index=1).figure

# %% [markdown]
# The L2 norm of every feature row along the packed sequence, each image's span shaded and labelled.
# The projector ends in an RMSNorm, so every row sits near √width (√96 ≈ 9.8 with `tiny`, √7168 ≈ 85
# with kimi-k3); a row that belongs to no image, or a span shifted by a slipped count, would stand
# out here.

# %%
plots.draw_token_norms(features).figure

# %% [markdown]
# ## 5. Where the time goes
#
# Milliseconds per stage for this batch on this device (the blocks dominate; on a GPU the first call
# includes warm-up).

# %%
Table(["stage", "time ms"], [(stage.removesuffix("_ms"), ms) for stage, ms in features.timings.items()])

# %% [markdown]
# ## 6. When the rows don't fit
#
# SGLang only says the lengths differ. `encode` checks `pixel_values.shape[0] == Σ t·h·w` before
# running and names the first image that does not fit, with both counts. Here the last four rows
# are missing:

# %%
try:
    encoder.encode(batch.pixel_values[:-4], batch.grid_thws)
except RowCountError as error:
    print(error)

# %% [markdown]
# ## 7. Using a real checkpoint and a GPU
#
# With a local Kimi-K3 checkpoint (a folder with `config.json`, `model.safetensors.index.json` and
# the shards), run this notebook with `checkpoint_dir = "/path/to/Kimi-K3"` and `device = "cuda"`, or
# in your own code:
#
# ```python
# from kimi_viz.encoder import VisionEncoder
# encoder = VisionEncoder.from_checkpoint("/path/to/Kimi-K3", device="cuda")  # bf16 on CUDA
# print(encoder.load_report.summary())
# ```
#
# Only the `vision_tower.*` and `mm_projector.*` tensors are read, from just the shards that hold
# them; the ~1 T-parameter language model is never opened. `load_report` lists what was loaded,
# missing or unexpected. From the command line:
# `kimi-viz encode IMAGE... --checkpoint /path/to/Kimi-K3 --device cuda`.
# With papermill: `papermill 02_encoder_rows.ipynb out.ipynb -p checkpoint_dir /path/to/Kimi-K3 -p device cuda`.
