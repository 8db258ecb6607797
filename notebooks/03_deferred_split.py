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
# they differ it raises — with no numbers. The kit replays that code path faithfully (SGLang
# 0.5.23, plus the earlier "pre-fix" variant), records every variable at every step, and names the
# image, both counts and the cause.
#
# Runs on CPU in about 15 s. The `Stepper` cells are live widgets: move the slider or press
# *Next* to walk through the steps (in an exported notebook they fall back to a static stepper).

# %% tags=["parameters"]
device = "auto"

# %%
# %matplotlib inline
from kimi_viz import plots
from kimi_viz.deferred import assign_ranks, replay
from kimi_viz.scenarios import get_scenario, run_scenario
from kimi_viz.stepper import Stepper

# %% [markdown]
# ## 1. A healthy batch
#
# Five sample images, gpu and cpu backends mixed, at attention-TP 2. Step 2 of the replay is
# SGLang's load balancing: images sorted by patch count (largest first), each given to the rank
# with the smallest load so far.

# %%
healthy = get_scenario("healthy-tp2").build()
healthy_trace = replay(healthy, tp_size=2, variant="post-fix", device=device)
patch_counts = [t * h * w for t, h, w in healthy_trace.grid_thws_host]
{"images": [item.label for item in healthy.items], "patch counts": patch_counts,
 "assign_ranks(patch_counts, 2)": assign_ranks(patch_counts, 2), "outcome": healthy_trace.outcome}

# %% [markdown]
# Every rank's produced rows match the grids it read. Here is the last step of rank 0: the expected
# rows (from `grid_thws_host`) above the rows each backend produced.

# %%
plots.draw_step(healthy_trace, -1, rank=0).figure

# %% [markdown]
# ## 2. S1 — a shard-local index into the global grid list
#
# Before SGLang PRs #35305 / #36265 (August 2026), the backend groups read `grid_thws_host[indices]`
# with the rank's *local* positions instead of `global_indices`. At attention-TP ≥ 2, a rank whose
# images are not a prefix of the batch reads another image's grid. Three images on two ranks, cpu
# backend, the pre-fix code:

# %%
s1 = get_scenario("s1-cpu")
s1_trace = replay(s1.build(), tp_size=s1.tp_size, variant="pre-fix", device=device)
s1_trace.verdict()["ranks"]

# %% [markdown]
# Step through the failing rank: watch `indices` and `global_indices` diverge at the grouping step,
# and the check fail at the length step.

# %%
Stepper(s1_trace)

# %% [markdown]
# What went wrong, in the kit's words:

# %%
print(s1_trace.divergence["explanation"])
print()
print("fix:", s1_trace.divergence["fix"])

# %% [markdown]
# **The fix**: the same batch, replayed with the fixed code (`global_indices`), passes on every rank.

# %%
s1_fixed = replay(s1.build(), tp_size=s1.tp_size, variant="post-fix", device=device)
plots.draw_step(s1_fixed, -1, rank=1).figure

# %% [markdown]
# ## 3. S2 — a stale `image_grid_thw`
#
# An item can carry both `image_grid_thw` and `grid_thws`; SGLang reads `image_grid_thw` first. If
# the image was re-resized and only `grid_thws` (and the deferred `resize_config`) were updated, the
# expectation comes from a stale grid. Fixed code, attention-TP 1, cpu backend:

# %%
s2 = get_scenario("s2-cpu")
s2_batch = s2.build()
s2_trace = replay(s2_batch, tp_size=s2.tp_size, variant="post-fix", device=device)
[(index, item.label, item.grid_source(), item.grids) for index, item in enumerate(s2_batch.items)]

# %%
Stepper(s2_trace)

# %% [markdown]
# The first diverging image, the grid SGLang read and the grid the pixels produced:

# %%
{key: s2_trace.divergence[key] for key in
 ("first_image", "label", "grid_source", "expected_grid", "produced_grid", "expected_total", "produced_total",
  "wrong_expectation", "fix")}

# %% [markdown]
# **The fix**: one source of truth per item. Dropping the stale `image_grid_thw` makes SGLang read
# `grid_thws`, and the batch replays cleanly.

# %%
s2_batch.items[s2_trace.divergence["first_image"]].grids.pop("image_grid_thw")
s2_fixed = replay(s2_batch, tp_size=s2.tp_size, variant="post-fix", device=device)
plots.draw_step(s2_fixed, -1).figure

# %% [markdown]
# ## 4. The same causes on the gpu backend
#
# On the gpu backend SGLang compares the produced grids with the expected ones first, so the same
# two causes surface as a different message. The catalogue (`kimi_viz.scenarios.SCENARIOS`, or
# `kimi-viz scenario list`) holds every known cause, S1–S13, each with the outcome SGLang 0.5.23 gives.

# %%
{name: str(run_scenario(name, device=device).error) for name in ("s1-cpu", "s1-gpu", "s2-cpu", "s2-gpu")}

# %% [markdown]
# **What to take away:** the length check compares two counts that come from different places —
# the grids the producer promised (and which key, at which index, SGLang reads them from) and the
# rows the consumer's preprocessing produced. `kimi-viz triage` (notebook 04) runs this replay on a
# batch captured from a live server.
