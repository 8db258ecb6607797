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
# # 01 · From an image to `pixel_values` rows
#
# **Which rows of `pixel_values` does SGLang build from my image, and which patch of the picture is each row?**
#
# Before the Kimi-K3 vision tower sees an image, the processor resizes it to a patch budget, pads it
# to a multiple of 28 px, cuts it into 14×14 patches and packs every patch of every image, one after
# the other, into one tensor `pixel_values` of shape `[Σ t·h·w, 3, 14, 14]`. The grid `(t, h, w)` of
# each image says how many of those rows it owns. Everything that can go wrong later (notebook 03)
# is a disagreement about these counts, so this notebook shows exactly how they arise.
#
# Runs in about 25 s on a 2-core CPU. Set `device = "cuda"` (or leave `"auto"`) to run SGLang's torch path on a GPU.

# %% tags=["parameters"]
device = "auto"

# %%
# %matplotlib inline
from kimi_viz import SAMPLE_PHOTOS, BatchLayout, Processor, compare, load_image, plots, resize_config, sample_path
from kimi_viz.report import Table

# %% [markdown]
# ## 1. How big does each image become?
#
# `resize_config` is the NaViT resize SGLang and the checkpoint share: scale down (never up) until
# the image fits `in_patch_limit` patches (65 536 for Kimi-K3) and 512 patches per side, then pad
# right and bottom to a multiple of `merge × patch = 28` px. `grid_thw` counts **patches**, not
# merged tokens; `num_tokens = h/2 · w/2` is how many `<|media_pad|>` tokens the prompt gets.

# %%
sizes = {name: load_image(sample_path(name)).size for name in SAMPLE_PHOTOS[:4]}
resized = {name: resize_config(*size, "kimi-k3") for name, size in sizes.items()}
Table(
    ["image", "source w×h", "resized w×h", "pad right, bottom", "grid t×h×w", "num_tokens"],
    [
        (
            name,
            "{}×{}".format(*sizes[name]),
            f"{r.new_width}×{r.new_height}",
            f"+{r.pad_width}, +{r.pad_height}",
            "×".join(map(str, r.grid)),
            r.tokens,
        )
        for name, r in resized.items()
    ],
)

# %% [markdown]
# ## 2. One image on its patch grid
#
# The checkpoint processor (the exact reference) turns three photos into one packed batch. Below,
# the cat (image 1 of the batch) as the tower sees it: the resized picture, the 14-px patch
# lattice, the 2×2 merge groups that become one token each, the zero padding on the right and
# bottom (dark: fully padding, striped: partly), and the global row number of a few patches —
# its rows start after the astronaut's 1444.

# %%
checkpoint = Processor("kimi-k3", backend="checkpoint")
batch = checkpoint.preprocess([sample_path(name) for name in ("astronaut.png", "chelsea.png", "coffee.png")])
plots.draw_patch_grid(batch, 1).figure

# %% [markdown]
# ## 3. The packed rows
#
# `pixel_values` is just the images' patches one after the other. Each image owns the half-open span
# `[start, end)` of `t·h·w` rows; below it, the merged-token track shows the `h·w/4` tokens each image
# contributes to the prompt.

# %%
layout = BatchLayout.from_output(batch)
plots.draw_row_spans(layout).figure

# %% [markdown]
# ## 4. From a patch to its row
#
# Inside an image rows run in raster order: `row = start + y·w + x`. Pick a few patches of the
# cat (image 1: `start` = 1444, `w` = 34 patches) and follow them to their rows: the first patch,
# its right neighbour, the first patch of the second patch row, the middle row and the last patch.

# %%
start, end = batch.records[1].rows
w = batch.records[1].grid_thw[2]
plots.draw_grid_to_rows(
    batch.records[1], layout, rows=[start, start + 1, start + w, (start + end) // 2, end - 1]
).figure

# %% [markdown]
# ## 5. EXIF orientation: which way up?
#
# `chelsea_exif_orientation6.jpg` stores 451×300 pixels with an EXIF tag (orientation 6) saying
# "display rotated by 90°". The checkpoint processor ignores the tag (`exif_transpose=False`):
# a 451×300 image, grid 22×34.

# %%
as_stored = Processor("kimi-k3", exif_transpose=False).preprocess(sample_path("chelsea_exif_orientation6.jpg"))
plots.draw_patch_grid(as_stored, 0).figure

# %% [markdown]
# SGLang's serving loader applies the tag (`exif_transpose=True`): a 300×451 image, grid 34×22.
# Same file, same patch count, but different grids and a different row order — so the producer and
# the consumer of a batch must agree on the loader policy, or the grids they write disagree.

# %%
transposed = Processor("kimi-k3", exif_transpose=True).preprocess(sample_path("chelsea_exif_orientation6.jpg"))
plots.draw_patch_grid(transposed, 0).figure

# %% [markdown]
# ## 6. Transparent images
#
# Kimi-K3 fills transparency **after** resizing, with a chessboard (8-px squares, white 255 and gray
# 180, white top-left), and keeps the image's own mode until then. `camera_vignette_la.png` is a
# grayscale image whose alpha fades out towards the edges (mode `LA`): where it is transparent you
# see the chessboard, not the photo. (`horse.png` is RGBA too, but opaque except a few corner
# pixels, so its fill hardly shows.)

# %%
transparent_names = ("camera_vignette_la.png", "coffee_palette_transparent.png", "horse.png")
transparent = Processor("kimi-k3").preprocess([sample_path(name) for name in transparent_names])
Table(
    ["image", "mode", "source w×h", "grid t×h×w"],
    [
        (name, record.source_mode, "{}×{}".format(*record.source_size), "×".join(map(str, record.grid_thw)))
        for name, record in zip(transparent_names, transparent.records)
    ],
)

# %%
plots.draw_patch_grid(transparent, 0).figure

# %% [markdown]
# A palette (`P`) image with one transparent palette entry goes through the same fill. PIL resizes
# palette images with NEAREST whatever filter is asked for, which the processor reproduces.

# %%
plots.draw_patch_grid(transparent, 1).figure

# %% [markdown]
# ## 7. Kimi-K2.5 and Kimi-K3 budgets on a 4200×3150 photo
#
# K2.5 allows 16 384 patches, K3 65 536. The budget is applied to the original size *before*
# padding, so K3's grid (1, 222, 296) = 65 712 patches slightly exceeds its own limit, while K2.5
# gets (1, 112, 148). A producer using one config and a consumer using the other disagree by
# 49 136 rows: that is scenario S4 in notebook 03.

# %%
rocket_k3 = checkpoint.preprocess(sample_path("rocket_4200x3150.jpg"))
rocket_k25 = Processor("kimi-k25").preprocess(sample_path("rocket_4200x3150.jpg"))
Table(
    ["preset", "in_patch_limit", "grid t×h×w", "rows (patches)", "num_tokens"],
    [
        (
            preset,
            output.config.in_patch_limit,
            "×".join(map(str, output.records[0].grid_thw)),
            output.records[0].patches,
            output.records[0].num_tokens,
        )
        for preset, output in (("kimi-k3", rocket_k3), ("kimi-k25", rocket_k25))
    ],
)

# %%
plots.draw_row_spans(BatchLayout.from_output(rocket_k3), produced=BatchLayout.from_output(rocket_k25)).figure

# %% [markdown]
# ## 8. Checkpoint pixels against SGLang's torch pixels
#
# SGLang's "gpu" backend resizes with `F.interpolate(antialias=True)` and rounds, instead of PIL's
# bicubic. Grids are always equal; pixels agree within one 8-bit level (0.0078 after normalisation)
# where the image was resized, and to about one float32 ulp where it was not. The map shows the
# largest difference in every patch of the resized rocket.

# %%
rocket_torch = Processor("kimi-k3", backend="torch", device=device).preprocess(sample_path("rocket_4200x3150.jpg"))
plots.draw_pixel_diff(rocket_k3, rocket_torch).figure

# %% [markdown]
# The eight sample photos fit the K3 budget unchanged, so both paths agree to about 1e-7:

# %%
agreement = compare(
    checkpoint, Processor("kimi-k3", backend="torch", device=device), [sample_path(name) for name in SAMPLE_PHOTOS]
)
Table(
    ["image", "grid t×h×w", "grids equal", "max |checkpoint − torch|"],
    [
        (name, "×".join(map(str, entry["grid_a"])), entry["grids_equal"], f"{entry['max_abs_diff']:.1e}")
        for name, entry in zip(SAMPLE_PHOTOS, agreement)
    ],
)

# %% [markdown]
# **What to take away:** the grid decides the row count; the resize budget, the loader policy (EXIF)
# and the processor config decide the grid. When two parts of a deployment disagree on any of these,
# their row counts disagree — notebook 03 shows where SGLang notices.
