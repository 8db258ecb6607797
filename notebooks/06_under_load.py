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
# # 06 · Why does my request fail only under load?
#
# **Every request passes when you send it alone, yet the server dies with `Kimi-K3 deferred feature
# length does not match image grids` (or "produced wrong grids") when traffic picks up. Why?**
#
# Because SGLang does not encode one request's images at a time. In every release the forward pass
# (`get_embedding_and_mask` in `managers/mm_schedule.py`) collects the embedding-cache misses of
# **every request in the prefill batch**, dedupes them, and sends them to `get_image_feature` in one
# call; afterwards it splits the rows back by each image's `<|media_pad|>` count and writes them onto
# the prompts. So two single-image requests that arrive together reach the deferred split exactly like
# one two-image request — and an exception there kills the scheduler with every request it holds.
# `kimi_viz.whatif` replays that whole path for a workload; on the command line it is
# `kimi-viz whatif IMAGE... --together` or `--requests FILE`.
#
# Runs in about 6 s on a 2-core CPU (measured with `pytest --nbmake`: 6.2 s; shapes mode: only the image
# headers are read). Made for papermill too:
# `papermill notebooks/06_under_load.ipynb out.ipynb -p sglang_version 0.5.23 -p tp 4`.

# %% tags=["parameters"]
device = "auto"
images = ["rocket.jpg", "astronaut.png"]  # one single-image request each: file paths or sample names
sglang_version = "0.5.18"
tp = 2
chunked_prefill_size = 150  # for section 5: small enough that the first image straddles two chunks
tokenized_chunk = 512  # section 7: a --chunked-prefill-size at which the counted and the tokenized chat cut apart
chat_sglang_version = "0.5.23"  # section 8, the second turn of a chat: its release,
chat_tp = 2  # attention-TP size,
page_size = None  # --page-size (None: the attention backend's, 1 with fa3 on an H200),
chat_chunked_prefill_size = 1024  # --chunked-prefill-size (a multiple of the page)
chat_cache_mb = 100  # and SGLANG_VLM_CACHE_SIZE_MB (0: the embedding cache stores nothing)
memory_sglang_version = "0.5.18"  # section 9, memory pressure: its release,
memory_tp = 2  # attention-TP size,
memory_pool = 1555  # --max-total-tokens: the KV pool (a server logs it at start-up, max_total_num_tokens)

# %%
# %matplotlib inline
from kimi_viz import (
    LOAD_SCENARIOS,
    DeploymentInput,
    LoadSettings,
    Request,
    Workload,
    check_table,
    pairs_table,
    parse_request,
    parse_workload,
    pass_table,
    prompt_table,
    read_deployment,
    read_model_folder,
    sweep,
    sweep_pairs,
    sweep_table,
    together,
    whatif,
    workload_table,
    write_demo_checkpoint,
)
from kimi_viz.plots import draw_forward_pass, draw_prompt
from kimi_viz.report import Stepper, Table
from kimi_viz.request import Renderer, check_releases

# %% [markdown]
# ## 1. Each request alone
#
# Every image as a request of its own, on this release and attention-TP size: what one `whatif` says.

# %%
alone = {
    name: whatif([name], sglang_version=sglang_version, tp_size=tp, device=device, under_load=False) for name in images
}
Table(["request", "status", "why"], [[name, a.status.value, a.why] for name, a in alone.items()])

# %% [markdown]
# ## 2. The same requests arriving together
#
# One workload: each image its own request, all arriving at once. The scheduler prefills them in one
# pass, so their images share one `get_image_feature` call. The table lists each request's prompt
# (where its `<|media_pad|>` run sits) and each pass (its windows, the call's items, the cache).

# %%
workload = together(images)
answer = whatif(workload, sglang_version=sglang_version, tp_size=tp, device=device)
Table(
    ["status", "failing ranks", "fixed in"],
    [[answer.status.value, answer.failing_ranks, answer.fixed_in.text if answer.fixed_in else "—"]],
)

# %%
workload_table(answer.replay)

# %%
pass_table(answer.replay)

# %% [markdown]
# In one paragraph, naming the requests and images of the call:

# %%
Table(["answer"], [[answer.why]])

# %% [markdown]
# ## 3. The forward pass, drawn
#
# Each request's prompt (text grey, its image's pad run coloured, the pass's window dashed), the rows
# that landed on its pad tokens, the items of the one `get_image_feature` call, and what stayed
# outside the call (cache hits, duplicates). When the pass raises, nothing is written and the message
# is under the call.

# %%
failing = answer.replay.failing_pass
shown = answer.replay.passes[failing if failing is not None else 0]
draw_forward_pass(shown).figure

# %% [markdown]
# Step through it: the scheduler's steps, then the failing rank's deferred split, then the splice.

# %%
Stepper.for_forward(shown)

# %% [markdown]
# ## 4. Which releases and TP sizes fail it
#
# Rows are the release groups whose request side, code path and forward pass are the same.

# %%
sweep_table(sweep(workload))

# %% [markdown]
# Which pairs of these images fail when prefilled together (every release × TP 1, 2, 4, 8):

# %%
pairs_table(sweep_pairs(images if len(images) > 2 else [*images, "chelsea.png", "coffee.png"]))

# %% [markdown]
# ## 5. A long prompt, chunked prefill and the embedding cache
#
# With `--chunked-prefill-size`, a prompt longer than the chunk is prefilled in several passes and an
# image can straddle two of them. SGLang encodes an overlapping image whole, slices the chunk's part,
# and caches the rest: the second pass takes it from the embedding cache (`--mm-embedding-cache-size 0`
# encodes it again). Here the first image's request has 100 text tokens before the image.

# %%
long = Workload((Request("r1", together([images[0]]).requests[0].images, before=100),))
chunked = whatif(
    long, sglang_version=sglang_version, tp_size=tp, load=LoadSettings(chunked_prefill_size=chunked_prefill_size)
)
pass_table(chunked.replay)

# %%
draw_forward_pass(chunked.replay.passes[min(1, len(chunked.replay.passes) - 1)]).figure

# %% [markdown]
# ## 6. What the server builds from a chat request
#
# Before any of this, the request side turns the client's body into token ids and checks them. For an
# OpenAI chat request SGLang asks the checkpoint tokenizer's `apply_chat_template` for one
# `<|media_pad|>` at each `image_url` part (`image_prompts`); the image processor then checks one pad
# per image and frames each pad as `<|media_begin|>image WxH<|media_content|>`, the image's token count
# of `<|media_pad|>` and `<|media_end|>`. On the command line: `kimi-viz whatif --chat REQUEST.json
# --sglang-version V --tp N`. Text tokens are counted (approximately), the media tokens and their ids
# are exact; section 7 tokenizes the same chat with a checkpoint folder (`--model-path DIR`).

# %%
chat_body = {
    "model": "kimi-k3",
    "messages": [
        {"role": "system", "content": "You are Kimi."},
        {
            "role": "user",
            "content": [
                {"type": "text", "text": "What do these pictures show?"},
                *({"type": "image_url", "image_url": {"url": name}} for name in images),
            ],
        },
    ],
}
chat = whatif(parse_request(chat_body), sglang_version=sglang_version, tp_size=tp)
check_table(chat.replay.outcome)

# %%
prompt_table(chat.replay.outcome)

# %% [markdown]
# The prompt drawn: the text grey, each image's block in its colour with its `image WxH` text and pad
# count, and below it each block's media tokens with their ids and positions.

# %%
draw_prompt(chat.replay.outcome).figure

# %% [markdown]
# When the checks pass, the request goes on like any other: a workload of one request whose text
# lengths come from this prompt (the call, the deferred split, the splice):

# %%
Table(["status", "stage", "answer"], [[chat.status.value, chat.stage or "—", chat.why if chat.replay.load else "—"]])

# %% [markdown]
# The same request where the ids reach the image processor with no `<|media_pad|>`: a checkpoint
# renderer that ignores `image_prompts`. Every release raises the one-to-one check's message (for
# `/generate`, a `text` without `<|media_pad|>` does the same):

# %%
refused = check_releases(parse_request(chat_body), renderer=Renderer(image_prompts=False))
rows = [
    [version, f"{o.rendered.placeholders} / {len(images)}", str(o.error_info() or "ok")]
    for version, o in refused.items()
]
Table(["SGLang", "<|media_pad|> ids / images", "request side"], rows)

# %%
draw_prompt(refused[sglang_version]).figure

# %% [markdown]
# ## 7. Tokenized by the checkpoint, not counted
#
# Without a checkpoint the kit *counts* a chat's text (about one token per 8 letters, the role framing, the
# generation prompt): the media tokens and their ids are exact, the text's length is not. Given the checkpoint
# folder (`--model-path DIR`: its `config.json`, `preprocessor_config.json`, `tokenizer_config.json` and
# `tiktoken.model`, read as data, none of its code run), the chat is *tokenized* as the server tokenizes it:
# SGLang's `kimi_k3` chat encoding of the release, the checkpoint's own BPE ranks and special ids. Every id is
# then exact, and so is where each image's `<|media_pad|>` run starts — which decides where a chunked prefill
# cuts the prompt, which pass each image lands in, and which images meet in one `get_image_feature` call.
#
# The folder below is **synthetic** (`kimi_viz.write_demo_checkpoint`): Kimi-K3's files and special ids
# (`<|media_pad|>` 163605), but a made-up vocabulary in which most words fall apart into single bytes, so its
# text runs longer than the real tokenizer's would. It shows what tokenizing changes; point `read_model_folder`
# at your own checkpoint for your real prompt. On the command line: `kimi-viz whatif --chat REQUEST.json
# --model-path DIR --sglang-version V --tp N --chunked-prefill-size N`.

# %%
checkpoint = write_demo_checkpoint()  # a new temporary folder
model = read_model_folder(checkpoint)
Table(
    ["checkpoint folder", "architecture", "SGLang runs", "<|media_pad|> id: processor / tokenizer", "tokenizer"],
    [
        [
            checkpoint.name,
            model.architecture,
            f"{model.facts.sglang_model} ({model.facts.processor})",
            f"{model.placeholder.resolved} / {model.placeholder.tokenizer_id}",
            f"{model.tokenizer_class}: {(checkpoint / 'SYNTHETIC.md').read_text().splitlines()[0].lstrip('# ')}",
        ]
    ],
)

# %% [markdown]
# The same chat as in section 6, counted and tokenized, on this release with `--chunked-prefill-size` set to
# `tokenized_chunk`: each prompt's length (after the processor expands each image), where each image's pad run
# lies, the passes the scheduler cuts it into, and the pass (or passes: it straddles them) each image is encoded
# in. With the defaults (rocket.jpg and astronaut.png on 0.5.18 at attention-TP 2, a chunk of 512) the counted
# prompt puts both images in pass 1, where they meet in one call and 0.5.18 raises; the tokenized prompt is longer
# before the first image (the `kimi_k3` encoding's own system framing, and this vocabulary's short tokens), so the
# first image straddles passes 1 and 2, the second is encoded in pass 2 beside the first's cached rows, and
# nothing raises. Counting is close enough for which check fires; where a chunk cuts, it is not.

# %%
deployment = read_deployment(
    DeploymentInput(
        model=model, sglang_version=sglang_version, tp_size=tp, typed_load={"chunked_prefill_size": tokenized_chunk}
    )
)
by_text = {
    "counted": whatif(parse_request(chat_body), sglang_version=sglang_version, tp_size=tp, load=deployment.load),
    "tokenized": whatif(
        parse_request(chat_body),
        sglang_version=sglang_version,
        tp_size=tp,
        load=deployment.load,
        settings=deployment.settings,
        model=model,
    ),
}


landing = {  # each image's pad run, and the passes (1-based) whose window overlaps it
    name: [
        (
            a,
            b,
            [
                k + 1
                for k, plan in enumerate(answer.replay.load.plans)
                for w in plan.windows
                if w.prefix_len <= b and a < w.end
            ],
        )
        for a, b in answer.replay.load.prompts[0].pad_runs
    ]
    for name, answer in by_text.items()
}
Table(
    ["prompt", "ids", "passes (windows)", *images, "status"],
    [
        [
            answer.replay.outcome.rendered.by,
            answer.replay.load.prompts[0].length,
            ", ".join(f"[{w.prefix_len}, {w.end})" for plan in answer.replay.load.plans for w in plan.windows),
            *(
                f"{a}..{b}: pass {passes[0]}" + (f"–{passes[-1]} (straddles)" if len(passes) > 1 else "")
                for a, b, passes in landing[name]
            ),
            answer.status.value + (f": {answer.error}" if answer.error else ""),
        ]
        for name, answer in by_text.items()
    ],
)

# %% [markdown]
# The first pass of each, drawn: with the defaults the counted prompt's holds both images (their grids differ,
# and 0.5.18's call raises at attention-TP 2); the tokenized prompt's holds the first image's head only.

# %%
draw_forward_pass(by_text["counted"].replay.load.passes[0], title="counted: pass 1").figure

# %%
draw_forward_pass(by_text["tokenized"].replay.load.passes[0], title="tokenized: pass 1").figure

# %% [markdown]
# The ids the checkpoint's tokenizer gives the tokenized prompt around the images (`apply_chat_template`'s
# output: one `<|media_pad|>` per image, which the processor then expands into the image's block); the counted
# prompt has no ids for its text.

# %%
rendered = by_text["tokenized"].replay.outcome.rendered
pads = [k for k, token_id in enumerate(rendered.input_ids) if token_id == model.placeholder.resolved]
Table(
    ["position", "id", "token"],
    [
        [k, rendered.input_ids[k], rendered.tokens[k]]
        for k in range(max(0, pads[0] - 8), min(rendered.length, pads[-1] + 3))
    ],
    caption=f"{rendered.length} ids, {len(pads)} <|media_pad|> (id {model.placeholder.resolved}); those around them",
)

# %% [markdown]
# ## 8. The second turn of a chat
#
# **A chat's first turn sends camera.png; the second turn continues it with coffee.png. Which of the
# second turn's images does SGLang encode again, and which come from what it already holds?**
#
# A later turn re-sends the whole conversation: the system prompt, turn 1's text and image, turn 1's
# answer, then its own text and image. The scheduler looks the prompt up in its **radix prefix cache**,
# the KV of every prompt it prefilled, and prefills only what follows the match. It never sees
# `<|media_pad|>`: each image's run is replaced by **pad values derived from the image's hash** (one
# value up to 0.5.22, four cycled from 0.5.23), so equal images match and different ones do not.
#
# Kimi-K3's text model is hybrid linear attention, so its tree (`UnifiedRadixCache` with a FULL and a
# MAMBA component) can only resume where it **saved a linear-attention state**: a hit is cut back to the
# deepest saved state on it. At the default flags (`--mamba-radix-cache-strategy auto` → `extra_buffer`,
# because the overlap schedule is on) turn 1's prefill saved its state at its prompt length floored to
# 64 — here 448 of 484 tokens — and its KV entered the tree only that far. Turn 2 shares 503 tokens with
# turn 1 (a plain radix tree would hold camera.png whole) but starts at 448, inside camera.png's pad run
# 90..450: camera.png overlaps turn 2's window again. Its last rows then come from the embedding cache
# when it still holds camera.png, and otherwise from a `get_image_feature` call beside coffee.png. A
# fresh request with the same system prompt shares its tokens, but no state was saved there. Turn 1 and
# the fresh request arrive together; turn 2 follows turn 1's 20 generated tokens.
#
# On 0.5.18 at attention-TP 2 with the cache off (`chat_cache_mb = 0`) that call holds two images and
# raises: load scenarios S18 (`kimi-viz scenario run s18-prefix-reopens-image`, at page 64) and S19
# (`kimi-viz scenario run s19-saved-state-reopens-image`, at the default flags, where only the hybrid
# tree's cut back re-opens the image). Here, on 0.5.18, turn 1 and the fresh request already fail
# together in pass 1 (S14).

# %%
conversation = parse_workload(
    {
        "requests": [
            {"id": "t1", "images": ["camera.png"], "output": 20, "system": 50},
            {"id": "t2", "continues": "t1", "images": ["coffee.png"]},
            {"id": "o1", "images": ["horse.png"], "system": 50},
        ]
    }
)
chat_load = LoadSettings(page_size=page_size, chunked_prefill_size=chat_chunked_prefill_size, cache_mb=chat_cache_mb)
turns = whatif(conversation, sglang_version=chat_sglang_version, tp_size=chat_tp, load=chat_load, device=device)
Table(
    ["status", "error", "fixed in", "settings"],
    [[turns.status.value, str(turns.error or "—"), turns.fixed_in.text if turns.fixed_in else "—", chat_load.flags()]],
)

# %% [markdown]
# What the server runs, as this release resolves the flags for Kimi-K3 (the tree, the strategy, the
# loop, the attention backend and its page), and every state its tree saved: whose, at which depth.

# %%
server = turns.replay.schedule.server
Table(
    ["the server runs", "saved states (request@depth)"],
    [[server.describe(), ", ".join(f"{s.rid}@{s.depth}" for s in turns.replay.schedule.saves) or "none"]],
)

# %% [markdown]
# The passes, each request with what it shares with the tree (what a plain radix tree would match), the
# saved state it starts from, and the window this pass prefills (`[prefix, prefix + extend)`); a request
# cut into chunks starts each later chunk where the last ended.

# %%
matches = dict(zip([r.rid for r in conversation.requests], turns.replay.prefix_matches()))
Table(
    ["pass", "request", "prompt tokens", "<|media_pad|> runs", "shared", "saved state", "window", "outcome"],
    [
        [
            k + 1,
            w.rid,
            w.length,
            ", ".join(f"{a}..{b}" for a, b in turns.replay.prompts[w.index].pad_runs),
            "—" if matches[w.rid] is None else max(matches[w.rid].full, matches[w.rid].plain or 0),
            w.matched,
            f"[{w.prefix}, {w.prefix + w.extend})",
            trace.outcome if trace.error is None else f"{trace.error.type} ({trace.stage})",
        ]
        for k, trace in enumerate(turns.replay.passes)
        for w in trace.batch
    ],
)

# %% [markdown]
# Turn 2's pass, drawn (the failing pass instead, when an earlier one raises): its window starts at
# the saved state it was cut back to (marked on the prompt track with the tree's other saved states);
# an image whose run ends before it is not in the pass at all.

# %%
turn2_pass = next(
    (t for t in turns.replay.passes if any(w.rid == "t2" for w in t.batch)),
    turns.replay.passes[-1],
)
draw_forward_pass(turn2_pass).figure

# %% [markdown]
# Where each image's rows come from: an image whose pad run ends before the request's matched prefix
# is in the radix prefix (its KV is reused, nothing is embedded); otherwise the pass's embedding-cache
# lookup says whether the cache held it (a hit) or `get_image_feature` encoded it (a miss).

# %%
Table(
    ["request", "image", "<|media_pad|> run", "matched prefix", "rows from", "pass by pass"],
    [
        [
            supply.rid,
            supply.label,
            f"{supply.offsets[0]}..{supply.offsets[1]}",
            supply.matched,
            supply.supplier
            + (" (re-opened by the cut back)" if supply.reopened_by_cut else "")
            + (" (the prefix ends inside its run)" if supply.cut_by_prefix and not supply.reopened_by_cut else ""),
            ", ".join(f"pass {k + 1}: {who}" for k, who in supply.by_pass) or "—",
        ]
        for supply in turns.replay.image_supplies()
    ],
)

# %% [markdown]
# Which single scheduler flag would change the outcome: the same workload replayed with each flag
# changed alone (among them the hybrid tree's: `--disable-overlap-schedule` turns `auto` into
# `no_buffer`, which saves a state at every insert, at page 1).

# %%
Table(
    ["flag changed alone", "status"],
    [[change.flag, change.status.value] for change in turns.flags.changes]
    or [["(none of: " + ", ".join(turns.flags.tried) + ")", turns.status.value]],
)

# %% [markdown]
# ## 9. Only at peak hours: memory decides who meets
#
# **Three requests are each prefilled alone on a quiet server. At peak hours two of them land in one
# `get_image_feature` call. How?**
#
# A busy server's KV pool is full (`--max-total-tokens`; a server prints its pool at start-up as
# `max_total_num_tokens=`). The adder then refuses requests whose window and remaining outputs do not fit
# (`NO_TOKEN`, which also holds prefill back until a running request leaves), every allocation evicts the
# radix tree's least recently used unlocked leaves, and a decode step that does not fit **retracts** the
# running request with the fewest outputs: its KV is freed, it goes back to the waiting queue and is
# prefilled again later — beside whoever is prefilled then. Here r2 is retracted at step 460 and comes
# back in the same pass as r3, which had been waiting: their two images meet in one call (load scenario
# S20, `kimi-viz scenario run s20-retraction-meets-requests`). With the pools unbounded (the default when
# no memory flag is given) the kit says so, and nothing of this happens.

# %%
peak = LOAD_SCENARIOS["s20-retraction-meets-requests"].build()
peak_load = LoadSettings(max_total_tokens=memory_pool, cache_mb=0)
at_peak = whatif(peak, sglang_version=memory_sglang_version, tp_size=memory_tp, load=peak_load, device=device)
quiet = whatif(
    peak, sglang_version=memory_sglang_version, tp_size=memory_tp, load=LoadSettings(cache_mb=0), device=device
)
Table(
    ["memory", "status", "which requests share a pass"],
    [
        [
            answer.replay.schedule.server.memory.describe(),
            answer.status.value,
            " | ".join(", ".join(w.rid for w in p.windows) for p in answer.replay.plans),
        ]
        for answer in (quiet, at_peak)
    ],
)

# %% [markdown]
# What memory did at peak hours: every retraction (the step, the request and the outputs it prefills
# again), the steps whose walk the KV budget stopped (`NO_TOKEN`), and the steps in which the tree evicted.

# %%
schedule_at_peak = at_peak.replay.schedule
Table(
    ["event", "steps"],
    [
        [
            "retracted",
            ", ".join(f"{r.rid} at {r.step} ({r.outputs} outputs)" for r in schedule_at_peak.retractions) or "—",
        ],
        ["NO_TOKEN", ", ".join(str(step) for step in schedule_at_peak.no_token) or "—"],
        [
            "the tree evicted",
            ", ".join(
                f"{m.step}: {m.evicted_tokens} tokens, {m.evicted_states} state{'' if m.evicted_states == 1 else 's'}"
                for m in schedule_at_peak.evictions[:6]
            )
            + (" …" if len(schedule_at_peak.evictions) > 6 else "")
            or "—",
        ],
        ["answer", at_peak.why],
    ],
)

# %% [markdown]
# The pass where they meet: r2's track says it was retracted and is prefilled again (its earlier outputs
# included); the title's second line says what memory did since the previous pass.

# %%
meeting = at_peak.replay.passes[at_peak.replay.failing_pass or -1]
draw_forward_pass(meeting).figure

# %% [markdown]
# **A chat's second turn fails only at peak hours. Why?** Turn 2 re-sends turn 1's image. On a quiet
# server it starts from turn 1's saved state, past the image, which never reaches the call. When memory
# is short the tree evicts turn 1's cached prefix (least recently used, while another request decodes):
# turn 2 starts at 0 and its image goes back into the call, beside whatever is prefilled with it (load
# scenario `s20-evicted-turn-meets-request`, its own KV pool of 900 tokens).

# %%
turn_chat = LOAD_SCENARIOS["s20-evicted-turn-meets-request"]
turn_answers = [
    whatif(turn_chat.build(), sglang_version=memory_sglang_version, tp_size=memory_tp, load=load, device=device)
    for load in (LoadSettings(cache_mb=0), turn_chat.load)
]
Table(
    ["memory", "status", "turn 2 starts at", "images in the call that prefills turn 2"],
    [
        [
            answer.replay.schedule.server.memory.describe(),
            answer.status.value,
            answer.replay.matched[2],
            " | ".join(
                ", ".join(f"{item.source.rid}: {item.source.label}" for item in call.items)
                for trace, plan in zip(answer.replay.passes, answer.replay.plans)
                if any(w.rid == "t2" for w in plan.windows)
                for call in trace.calls
            ),
        ]
        for answer in turn_answers
    ],
)

# %% [markdown]
# What the answer says at peak hours: which tokens of turn 2's prefix were evicted and when, and where
# its image went.

# %%
turn_answers[1].why

# %% [markdown]
# **What to take away:** an intermittent "only under load" report is a batch the server formed, not a
# request. Replay the requests that were in flight together (`kimi-viz whatif A B --together
# --sglang-version V --tp N`, or `--requests FILE` with their text lengths); a single-request
# `kimi-viz whatif` also warns when a request that is clean alone fails beside another, and names the
# smallest such pair. On 0.5.18 at attention-TP ≥ 2 any two images with different grids do it; 0.5.19
# and later read each image's own grid. `docs/whatif.md` ("Workloads") documents the request file and
# what the scheduler model simplifies.
