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
# # 04 · Triage a captured batch
#
# **A serving process raised "Kimi-K3 deferred feature length does not match image grids" and
# someone attached a manifest: which image broke the count, why, and what fixes it?**
#
# A manifest is what `kimi-viz capture` writes from a live SGLang when `get_image_feature` fails:
# the items' grids, deferred configs and raw images (or only their shapes, with `--redact`), the
# attention-TP size and rank, the SGLang release, and the error the server raised. This notebook
# replays it through that release's code path (0.5.17 has no deferred split, 0.5.18 has the S1 bug,
# 0.5.19 and later have the fix), shows the verdict first, draws where the counts part, and then
# writes a self-contained `report.html` and the issue body `issue.md`, and ends with the command that
# writes a standalone SGLang repro of the batch. It is built to be run with papermill:
#
#     papermill notebooks/04_triage.ipynb triage-out.ipynb -p manifest /path/to/manifest -p out_dir triage-out
#
# With `manifest = None` it triages a built-in example: scenario S2 (a stale `image_grid_thw`,
# cpu backend). Runs in about 10 s on a 2-core CPU.

# %% tags=["parameters"]
manifest = None
sglang_version = None
code_path = None
tp = None
device = "auto"
out_dir = "build/triage"

# %%
# %matplotlib inline
from kimi_viz import get_scenario, plots, read_manifest, triage, write_manifest, write_triage_outputs
from kimi_viz.report import MarkdownView, Stepper, Table, VerdictView, batch_table, images_table

# %% [markdown]
# ## 1. The manifest
#
# By default the notebook replays the release the capture recorded (else the code path it detected
# from SGLang's source, else the newest release, said in the verdict). `sglang_version` replays
# another release (e.g. `"0.5.23"` to check that an upgrade fixes it: a capture that recorded an
# error then shows as NOT REPRODUCED); `code_path` is the lower-level switch: `"post-fix"`,
# `"pre-fix"`, `"no-split"` or `"both"`. `tp` overrides the recorded attention-TP size (None keeps
# it). Without a manifest, the S2 example is written into `out_dir`.

# %%
manifest_path = (
    manifest if manifest is not None else write_manifest(get_scenario("s2-cpu").build(), f"{out_dir}/manifest-s2-cpu")
)
batch = read_manifest(manifest_path)
batch_table(batch)

# %% [markdown]
# ## 2. The verdict
#
# The status first (clean, error reproduced, silent mismatch, not reproduced, or recorded ok but
# the replay fails), how many ranks fail, the release replayed and the release that fixes it, the
# first diverging image with both counts, the scenario class, and the fix.

# %%
result = triage(manifest_path, sglang_version=sglang_version, code_path=code_path, tp=tp, device=device)
VerdictView(result.verdict, heading=f"Triage of {manifest_path}", fixes=result.fixes)

# %% [markdown]
# Every image, numbered as in the verdict: the grid row SGLang read for it, the rows it expected
# and the rows preprocessing produced.

# %%
images_table(result.verdict)

# %% [markdown]
# ## 3. Where the counts part
#
# The step where the replay ended on the failing rank (or on rank 0 when nothing fails), with the
# variables SGLang had at that moment: the rows it expected from the grids it read, above the rows
# its preprocessing produced, image by image.

# %%
plots.draw_step(result.trace, -1).figure

# %% [markdown]
# Every step of that rank, from collecting the grids to the check (the same stepper is embedded in
# the report):

# %%
Stepper(result.trace)

# %% [markdown]
# ## 4. The report
#
# `report.html` is one self-contained file (figures embedded, the step-by-step stepper, the trace as
# JSON, no network references): attach it to the issue together with the manifest. `trace.json`
# holds the same trace for tools; `summary.png` the verdict and the failing ranks' rows; `issue.md`
# the issue body.

# %%
outputs = write_triage_outputs(result, out_dir)
Table(["output", "written to"], [[name, str(path)] for name, path in outputs.items()])

# %% [markdown]
# ## 5. The issue to file
#
# `issue.md` is GitHub-flavoured Markdown to paste as the issue body: the verdict, the release that
# fixes it, "N of M ranks fail", every image with the grid SGLang read and the rows on each side, the
# cause and the fix, the server settings the capture recorded, and a collapsed block with the step
# trace and the environment (kit version, manifest SHA-256, SGLang). It ends by naming the PNG to
# drag in. This is what it looks like once GitHub renders it:

# %%
MarkdownView(outputs["issue"].read_text(encoding="utf-8"))

# %% [markdown]
# The repro: a standalone pytest file that runs SGLang's own `get_image_feature` on this batch (the
# release and attention-TP size replayed, no weights, no GPU, no pixels). It fails with SGLang's own
# message on a release with the bug and passes on the fix; copied into SGLang's
# `test/registered/unit/models/`, it is a regression test. The same from a shell:

# %%
repro_dir = f"{out_dir}/repro"
repro = result.emit_repro(repro_dir)
print(result.repro_command(repro_dir))
print(f"wrote {repro}; run it where SGLang is installed: python -m pytest {repro.parent}")
