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
# # 03 · The deferred split, step by step
#
# **Why does SGLang raise "Kimi-K3 deferred feature length does not match image grids", and which
# image is to blame?**
#
# With deferred preprocessing, SGLang's `KimiK3ForConditionalGeneration.get_image_feature` receives
# raw images plus the grids the producer promised. It assigns images to attention-TP ranks, groups
# each rank's deferred images by backend (`gpu`: SGLang's torch path, `cpu`: the checkpoint
# processor), materializes their pixels, and compares `Σ prod(grid_thw)` with the rows it got. When
# they differ it raises — with no numbers. The kit replays the code of each SGLang release
# (0.5.17 without the split, 0.5.18 with the S1 bug, 0.5.19 and later fixed), records every
# variable at every step, and names the image, both counts and the cause.
#
# Runs in about 20 s on a 2-core CPU. The `Stepper` cells are live widgets: move the slider or
# press *Next* to walk through the steps. In an exported notebook a static stepper with the same
# controls takes their place.

# %% tags=["parameters"]
device = "auto"

# %%
# %matplotlib inline
from kimi_viz import build_verdict, get_scenario, plots, replay, run_scenario, whatif
from kimi_viz.report import Stepper, Table, VerdictView, assignment_table, batch_table, divergence_table

# %% [markdown]
# ## 1. A healthy batch
#
# Five sample images, gpu and cpu backends mixed, at attention-TP 2, on SGLang 0.5.23. Step 2 of
# the replay is SGLang's load balancing: images sorted by patch count (largest first), each given
# to the rank with the smallest load so far.

# %%
healthy = get_scenario("healthy-tp2").build()
healthy_trace = replay(healthy, tp_size=2, sglang_version="0.5.23", device=device)
assignment_table(healthy_trace)

# %% [markdown]
# Every rank's produced rows match the grids it read. Here is the last step of rank 0: the expected
# rows (from `grid_thws_host`) above the rows each backend produced, each image in its own colour.

# %%
plots.draw_step(healthy_trace, -1, rank=0).figure

# %% [markdown]
# ## 2. S1 — a shard-local index into the global grid list (SGLang 0.5.18)
#
# Before SGLang PR #35305 (first released in 0.5.19), the backend groups read
# `grid_thws_host[indices]` with the rank's *local* positions instead of `global_indices`. At
# attention-TP ≥ 2, a rank whose images are not a prefix of the batch reads another image's grid.
# Three images on two ranks, cpu backend, replayed as SGLang 0.5.18:

# %%
s1 = get_scenario("s1-cpu")
s1_answer = whatif(s1.build(), sglang_version="0.5.18", tp_size=s1.tp_size, mode="pixels", device=device)
s1_trace = s1_answer.call_trace
VerdictView(s1_answer.verdict, heading="S1 on SGLang 0.5.18", fixes=s1_answer.fixes)

# %% [markdown]
# Step through the failing rank. It opens at the step that raises; step back to the grouping step
# (step 4) to see `indices` and `global_indices` part, and the grid of image 0 read for image 1.

# %%
Stepper(s1_trace)

# %% [markdown]
# **The fix**: the same batch on SGLang 0.5.19 or later (`global_indices`) passes on every rank.

# %%
s1_fixed = replay(s1.build(), tp_size=s1.tp_size, sglang_version="0.5.23", device=device)
plots.draw_step(s1_fixed, -1, rank=1).figure

# %% [markdown]
# ## 3. S2 — a stale `image_grid_thw`
#
# An item can carry both `image_grid_thw` and `grid_thws`; SGLang reads `image_grid_thw` first. If
# the image was re-resized and only `grid_thws` (and the deferred `resize_config`) were updated, the
# expectation comes from a stale grid. SGLang 0.5.23, attention-TP 1, cpu backend:

# %%
s2 = get_scenario("s2-cpu")
s2_trace = replay(s2.build(), tp_size=s2.tp_size, sglang_version="0.5.23", device=device)
batch_table(s2_trace.batch)

# %%
Stepper(s2_trace)

# %% [markdown]
# The first diverging image, the grid SGLang read and the grid the pixels produced:

# %%
divergence_table(build_verdict(s2_trace))

# %% [markdown]
# **The fix**: one source of truth per item. Without the stale `image_grid_thw` SGLang reads
# `grid_thws`, and the batch replays cleanly (a fresh copy of the batch, so this cell can be re-run).

# %%
s2_batch = s2.build()
s2_batch.items[s2_trace.divergence.first_image].grids.pop("image_grid_thw", None)
s2_fixed = replay(s2_batch, tp_size=s2.tp_size, sglang_version="0.5.23", device=device)
plots.draw_step(s2_fixed, -1).figure

# %% [markdown]
# ## 4. The same causes on the gpu backend
#
# On the gpu backend SGLang compares the produced grids with the expected ones first, so the same
# two causes surface as a different message. The catalogue (`kimi_viz.scenarios.SCENARIOS`, or
# `kimi-viz scenario list`) holds every known cause, S1–S13, each with the outcome SGLang gives.

# %%
Table(
    ["scenario", "replayed as", "SGLang raises"],
    [
        [name, trace.release.label, str(trace.error)]
        for name, trace in ((n, run_scenario(n, device=device)) for n in ("s1-cpu", "s1-gpu", "s2-cpu", "s2-gpu"))
    ],
)

# %% [markdown]
# **What to take away:** the length check compares two counts that come from different places —
# the grids the producer promised (and which key, at which index, SGLang reads them from) and the
# rows the consumer's preprocessing produced. `kimi-viz triage` (notebook 04) runs this replay on a
# batch captured from a live server.
