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
# **Paste your server's command or log.** Your server crashed with a Kimi-K3 vision error and you have its log
# (or the command that launched it). Given the images of one request: does `get_image_feature` raise on
# *that* server, on which rank, and why — or why not?
#
# The log says which server ran: its start-up line `server_args=…` (every argument, as the release printed
# it), the pool lines (the KV pool, the request rows, the mamba state slots) and each prefill pass. The kit
# reads the release, the attention-TP size, the page, the chunk and the pools from it, every value with the
# line it came from; options typed here win over the log, the log over the launch command, and the command
# over SGLang's defaults. Then whether SGLang's deferred split can fail depends first on what the *request
# side* (`multimodal/processors/kimi_k3.py`, or the EPD encoder) builds: eager rows skip the split entirely;
# deferred items carry a grid key and a `resize_config` the model checks. `kimi_viz.whatif` builds the
# items exactly as the release would (the byte rule, the preprocessing cache, the transport, the EPD
# encoder's own preprocessing), works out which items reach each rank (embedding cache hits, duplicates),
# and replays that release's `get_image_feature` on every rank. The same is on the command line:
# `kimi-viz whatif IMAGE... --server-log server.log` (or `--server "python -m sglang.launch_server …"
# --sglang-version V`, or `--sglang-version V --tp N`; `--sweep`, `--minimize`).
#
# Runs in about 4 s on a 2-core CPU (measured with `pytest --nbmake`: 3.6 s, most of it importing torch and
# matplotlib; shapes mode reads only the image headers). Made for papermill too:
# `papermill notebooks/05_whatif.ipynb out.ipynb -p server_log server.log`, or without a log
# `-p server_log None -p sglang_version 0.5.23 -p tp 4`.

# %% tags=["parameters"]
device = "auto"
server_log = "sample"  # your server's log (a path); "sample": the kit's (SGLang 0.5.18, attention-TP 2); None: none
server = None  # your launch command, e.g. "python -m sglang.launch_server --model-path /models/Kimi-K3 --tp 2"
images = ["chelsea.png", "microaneurysms.png"]  # file paths, or names of the kit's sample images
sglang_version = None  # typed over the log: the release (None: the log's; needed with a launch command alone)
tp = None  # typed over the log: the attention-TP size (None: the log's or the command's)
serving = None  # "normal" or "epd-encoder" (--encoder-only); None: the log's, else normal
epd_backend = None  # "cpu" or "gpu" with serving = "epd-encoder" (SGLANG_ENCODER_IMAGE_PROCESSOR_USE_GPU)
mm_feature_transport = None  # --mm-feature-transport: auto, cpu, cuda_ipc or cuda_vmm; None: the log's
embedding_cache_hits = []  # positions of images whose embedding is already cached

# %%
# %matplotlib inline
from kimi_viz import (
    DeploymentInput,
    KimiVizError,
    ServerSettings,
    explain,
    image_sources,
    minimize,
    minimized_text,
    plots,
    read_deployment,
    request_table,
    sample_log,
    sweep,
    sweep_summary,
    sweep_table,
    sweep_text,
    together,
    whatif,
)
from kimi_viz.report import Table, VerdictView

log = str(sample_log()) if server_log == "sample" else server_log
typed = {
    name: value
    for name, value in (("serving", serving), ("epd_backend", epd_backend), ("transport", mm_feature_transport))
    if value is not None
}
if embedding_cache_hits:
    typed["embedding_cache_hits"] = tuple(embedding_cache_hits)
request = image_sources(images)
log

# %% [markdown]
# ## 1. What the log says happened
#
# Every known Kimi-K3 vision message in the log, with the server its start-up lines describe and the prefill
# pass that raised (its last `Prefill batch` line before the error): how many requests shared it
# (`#new-seq`), how much came from the radix cache (`#cached-token`), and the load scenario classes that
# fit. On the command line: `kimi-viz explain --file server.log`.

# %%
found = []
if log is not None:
    with open(log, encoding="utf-8", errors="replace") as lines:
        found = [item for item in explain(lines.read(), replay_with=f"--server-log {log}") if item.server is not None]
Table(
    ["line", "SGLang raised", "the server", "the pass that raised", "fits"],
    [
        [
            item.line,
            item.text,
            item.server.facts.describe(),
            "—"
            if item.server.prefill is None
            else f"line {item.server.prefill.line}: #new-seq {item.server.prefill.new_seq}, "
            f"#new-token {item.server.prefill.new_token}, #cached-token {item.server.prefill.cached_token}",
            "; ".join(f"{name}: {why}" for name, why in item.server.load_classes()),
        ]
        for item in found
    ]
    or [["—", "no known Kimi-K3 vision error (or no log)", "—", "—", "—"]],
)

# %% [markdown]
# ## 2. Which server it was
#
# The deployment the replay runs on, read from the log (and the launch command, and what is typed above):
# the release and the attention-TP size with how each was found, then every value that is not SGLang's
# default with the line it came from. Flags the server was given that the kit does not model are listed with
# what each could change; a clean verdict under them says so.

# %%
deployment = read_deployment(
    DeploymentInput(server=server, server_log=log, sglang_version=sglang_version, tp_size=tp, typed_settings=typed)
)
report = deployment.report
defaults = ("default", "gpu-default", "kit")
Table(
    ["the server", "value", "where it came from"],
    [
        ["release", deployment.sglang_version, report.release],
        ["attention-TP", deployment.tp_size, report.tp],
        *([v.name, v.value, str(v.source)] for v in report.values if v.source.kind.value not in defaults),
        *(
            [f"not modelled: {item.option}", item.value, f"{item.source}: {item.effect}"]
            for item in report.not_modelled
        ),
        *(["note", "", note] for note in report.notes),
    ],
    caption=f"read from {', '.join(report.inputs) or 'typed options'}",
)

# %% [markdown]
# ## 3. What this release's request side builds
#
# One row per image: the grid key it carries (`image_grid_thw` from the request side, `grid_thws`
# from the EPD encoder), the deferred backend and `resize_config`, whether the feature stays raw or
# is preprocessed now, and the rule that decided it. With the cpu transport on a CUDA server
# (SGLang's default from 0.5.18 on) an image is deferred when its raw bytes are at most its
# processed float32 bytes — which holds for every photo that is not shrunk hard.

# %%
version, tp_size, settings = deployment.sglang_version, deployment.tp_size, deployment.settings
answer = whatif(request, sglang_version=version, tp_size=tp_size, settings=settings, device=device, server=report)
request_table(answer.replay.built)

# %% [markdown]
# ## 4. The verdict on every rank

# %%
VerdictView(
    answer.verdict, heading=f"SGLang {version} at TP {tp_size}", fixes=answer.fixes
) if answer.verdict else Table(["answer"], [[answer.why]])

# %% [markdown]
# In one paragraph — why it fails, or why nothing fails:

# %%
Table(["answer"], [[answer.why]])

# %% [markdown]
# ## 5. As the requests of one prefill pass, on this server's scheduler
#
# The log's failing pass may have held several requests (`#new-seq` above): their images met in one
# `get_image_feature` call. Here each image is a request of its own, all arriving together, replayed through
# the scheduler with the server's own flags from the log (chunk, page, tree, pools): the passes it forms and
# the outcome (or the one line saying why the kit does not replay those flags under load). On the command
# line: `kimi-viz whatif IMAGE... --together --server-log server.log`.

# %%
try:
    pass_answer = whatif(
        together(request),
        sglang_version=version,
        tp_size=tp_size,
        load=deployment.load,
        settings=settings,
        device=device,
        server=report,
        try_flags=False,
    )
    shared = " | ".join(", ".join(w.rid for w in plan.windows) for plan in pass_answer.replay.plans)
    outcome = [pass_answer.status.value, str(pass_answer.error or "—"), shared]
except KimiVizError as refused:  # flags the kit does not replay under load (a policy or strategy it does not model)
    outcome = ["refused", str(refused), "—"]
Table(
    ["status", "error", "which requests share a pass", "the scheduler's flags (from the log)"],
    [[*outcome, deployment.load.flags()]],
)

# %% [markdown]
# ## 6. Every release × attention-TP size
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
# ## 7. The same images under other deployments
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
# ## 8. The smallest request that still fails
#
# Six photos, four of which were sent before (their embeddings are cached, so only two reach
# `get_image_feature`). Delta debugging drops images while the same message still appears on some
# rank, keeps their order, and names the image to look at.

# %%
six = image_sources(["astronaut.png", "chelsea.png", "coffee.png", "rocket.jpg", "hubble_deep_field.jpg", "retina.jpg"])
smallest = minimize(
    six, sglang_version=version, tp_size=tp_size, settings=ServerSettings(embedding_cache_hits=(0, 2, 3, 5))
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
