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
# # 05 · Would this request fail on my deployment?
#
# **Given the images of one request, the SGLang release you run, its attention-TP size and its
# multimodal settings: does `get_image_feature` raise, on which rank, and why — or why not?**
#
# Whether SGLang's deferred split can fail depends first on what the *request side*
# (`multimodal/processors/kimi_k3.py`, or the EPD encoder) builds: eager rows skip the split
# entirely; deferred items carry a grid key and a `resize_config` the model checks. `kimi_viz.whatif`
# builds the items exactly as the release would (the byte rule, the preprocessing cache, the
# transport, the EPD encoder's own preprocessing), works out which items reach each rank (embedding
# cache hits, duplicates), and replays that release's `get_image_feature` on every rank. The same
# is on the command line: `kimi-viz whatif IMAGE... --sglang-version V --tp N` (`--sweep`,
# `--minimize`).
#
# Runs in about 6 s on a 2-core CPU (measured: 5.8 s, most of it importing torch and matplotlib;
# shapes mode reads only the image headers). Made for papermill too:
# `papermill notebooks/05_whatif.ipynb out.ipynb -p sglang_version 0.5.23 -p tp 4`.

# %% tags=["parameters"]
device = "auto"
images = ["chelsea.png", "microaneurysms.png"]  # file paths, or names of the kit's sample images
sglang_version = "0.5.18"
tp = 2
serving = "normal"  # or "epd-encoder" (--encoder-only)
epd_backend = None  # "cpu" or "gpu" with serving = "epd-encoder" (SGLANG_ENCODER_IMAGE_PROCESSOR_USE_GPU)
mm_feature_transport = "auto"  # --mm-feature-transport: auto, cpu, cuda_ipc or cuda_vmm
embedding_cache_hits = []  # positions of images whose embedding is already cached

# %%
# %matplotlib inline
from kimi_viz import (
    ServerSettings,
    image_sources,
    minimize,
    minimized_text,
    plots,
    request_table,
    sweep,
    sweep_summary,
    sweep_table,
    sweep_text,
    whatif,
)
from kimi_viz.report import Table, VerdictView

settings = ServerSettings(
    serving=serving,
    epd_backend=epd_backend,
    transport=mm_feature_transport,
    embedding_cache_hits=tuple(embedding_cache_hits),
)
request = image_sources(images)
settings.sglang_flags()

# %% [markdown]
# ## 1. What this release's request side builds
#
# One row per image: the grid key it carries (`image_grid_thw` from the request side, `grid_thws`
# from the EPD encoder), the deferred backend and `resize_config`, whether the feature stays raw or
# is preprocessed now, and the rule that decided it. With the cpu transport on a CUDA server
# (SGLang's default from 0.5.18 on) an image is deferred when its raw bytes are at most its
# processed float32 bytes — which holds for every photo that is not shrunk hard.

# %%
answer = whatif(request, sglang_version=sglang_version, tp_size=tp, settings=settings, device=device)
request_table(answer.replay.built)

# %% [markdown]
# ## 2. The verdict on every rank

# %%
VerdictView(
    answer.verdict, heading=f"SGLang {sglang_version} at TP {tp}", fixes=answer.fixes
) if answer.verdict else Table(["answer"], [[answer.why]])

# %% [markdown]
# In one paragraph — why it fails, or why nothing fails:

# %%
Table(["answer"], [[answer.why]])

# %% [markdown]
# ## 3. Every release × attention-TP size
#
# The sweep builds the items once per release row (0.5.17; 0.5.18; 0.5.19–0.5.22, one request side
# and one code path; 0.5.23) and replays every TP size. A letter stands for one exact SGLang
# message, listed below the table with the summary and why each row fails or passes.

# %%
board = sweep(request, settings=settings)
sweep_table(board)

# %%
print(sweep_text(board))

# %% [markdown]
# ## 4. The same images under other deployments
#
# The backend decides the message: SGLang's gpu path compares grids first ("wrong grids"), the cpu
# path only counts rows (the seed message "deferred feature length does not match image grids").
# The EPD encoder's cpu backend preprocesses each rank's own images right away, so it fails only
# when embedding-cache hits make the encoder's owner assignment (over all images) differ from the
# model's (over the misses) — below, four photos with two of them cached. Eager features
# (`--mm-feature-transport cuda_ipc`, or 0.5.17) never enter the split.

# %%
deployments = {
    "normal serving (these images)": (request, ServerSettings()),
    "EPD encoder, gpu backend (these images)": (request, ServerSettings(serving="epd-encoder", epd_backend="gpu")),
    "EPD encoder, cpu backend (these images)": (request, ServerSettings(serving="epd-encoder")),
    "EPD cpu, rocket astronaut coffee chelsea, hits 1, 2": (
        image_sources(["rocket.jpg", "astronaut.png", "coffee.png", "chelsea.png"]),
        ServerSettings(serving="epd-encoder", embedding_cache_hits=(1, 2)),
    ),
    "--mm-feature-transport cuda_ipc (these images)": (request, ServerSettings(transport="cuda_ipc")),
}
boards = {name: sweep(imgs, settings=s) for name, (imgs, s) in deployments.items()}
Table(
    ["deployment", "summary", "errors"],
    [
        [
            name,
            sweep_summary(b),
            "; ".join(f"{letter}: {error}" for error, letter in b.legend.items()) or "—",
        ]
        for name, b in boards.items()
    ],
)

# %% [markdown]
# ## 5. The smallest request that still fails
#
# Six photos, four of which were sent before (their embeddings are cached, so only two reach
# `get_image_feature`). Delta debugging drops images while the same message still appears on some
# rank, keeps their order, and names the image to look at.

# %%
six = image_sources(["astronaut.png", "chelsea.png", "coffee.png", "rocket.jpg", "hubble_deep_field.jpg", "retina.jpg"])
smallest = minimize(
    six, sglang_version=sglang_version, tp_size=tp, settings=ServerSettings(embedding_cache_hits=(0, 2, 3, 5))
)
print(minimized_text(smallest))

# %% [markdown]
# The minimal request replayed: the failing rank's last step, the rows its grids expect against
# the rows its preprocessing produced.

# %%
plots.draw_step(smallest.answer.replay.trace, -1).figure

# %% [markdown]
# **What to take away:** before asking whether `get_image_feature` is right, ask what the request
# side built. On 0.5.18 the default single-node settings defer every photo, so two differently sized
# images at attention-TP ≥ 2 fail on the rank that does not hold the prefix; 0.5.19 and later read
# the global grid index and pass. `docs/whatif.md` lists every setting, the SGLang flag it stands for,
# and what the kit models without a GPU.
