"""``kimi-viz whatif``: the items each release builds, the sweep, the minimal failing set and the bad inputs.

The items are checked here against the rules read from each release's ``processors/kimi_k3.py``;
``tests/parity/test_request_side.py`` checks them against the real request side where SGLang imports.
"""

from __future__ import annotations

import io
import json

import pytest
from PIL import Image

from kimi_viz._whatif.ask import ddmin, minimize, sweep, whatif
from kimi_viz.cli import main
from kimi_viz.data import SAMPLE_PHOTOS, sample_images, sample_path
from kimi_viz.errors import KimiVizError, SettingNotInReleaseError, WhatIfError
from kimi_viz.forward.call import model_call
from kimi_viz.preprocess.images import has_alpha, load_image
from kimi_viz.releases import REQUEST_SIDES
from kimi_viz.report.answer_documents import cell_json
from kimi_viz.report.answer_views import answer_text, culprit_unit, minimized_text, sweep_summary, sweep_text
from kimi_viz.request.images import probe_image, probe_images
from kimi_viz.request.settings import OPTIONS, ServerSettings
from kimi_viz.request.sides import build_request, item_json, request_side_for
from kimi_viz.split.cause import ErrorInfo

GPU_GRIDS = "Kimi-K3 deferred GPU preprocessing produced wrong grids"
SEED = "Kimi-K3 deferred feature length does not match image grids"
TWO = ["chelsea.png", "microaneurysms.png"]  # 451x300 and 102x102: different grids
EPD_CPU_HITS = ["rocket.jpg", "astronaut.png", "coffee.png", "chelsea.png"]  # hits 1, 2 move chelsea's owner


def paths(names):
    return [sample_path(n) for n in names]


def strip_png(width: int = 30000, height: int = 60) -> bytes:
    buffer = io.BytesIO()
    Image.new("RGB", (width, height), (10, 20, 30)).save(buffer, "PNG")
    return buffer.getvalue()


# --- images ------------------------------------------------------------------------------------
def test_the_header_probe_agrees_with_the_full_loader_on_every_sample():
    for path in sample_images():
        probed = probe_image(path)
        loaded = load_image(path).image
        assert (probed.width, probed.height, probed.mode) == (loaded.width, loaded.height, loaded.mode), path.name
        assert probed.has_alpha == has_alpha(loaded), path.name


def test_probe_refuses_bad_images_with_the_kits_errors(tmp_path):
    (tmp_path / "not.png").write_text("hello")
    with pytest.raises(KimiVizError, match="not an image"):
        probe_image(tmp_path / "not.png")
    with pytest.raises(KimiVizError, match="no such file"):
        probe_image(tmp_path / "missing.png")
    with pytest.raises(WhatIfError, match="no images"):
        probe_images([])


# --- settings -------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"epd_backend": "gpu"}, "add --serving epd-encoder"),
        ({"preprocess_cache_mb": 0, "preprocess_cache_hits": (0,)}, "disabled cache has no hits"),
        ({"serving": "epd-encoder", "preprocess_cache_hits": (0,)}, "the EPD encoder has none"),
        ({"serving": "epd-encoder", "preprocess_cache_mb": 0}, "without the request side's preprocessing cache"),
        ({"serving": "epd-encoder", "consumer_config": "kimi-k25"}, "cannot differ"),
        ({"serving": "encoder"}, "expected one of"),
        ({"transport": "ipc"}, "expected one of"),
        ({"preprocess_cache_mb": -1}, ">= 0"),
        ({"embedding_cache_hits": (-1,)}, "from 0"),
    ],
)
def test_contradictory_or_bad_settings_raise_one_line_errors(kwargs, message):
    with pytest.raises(WhatIfError, match=message) as info:
        ServerSettings(**kwargs)
    assert "\n" not in str(info.value)


def test_every_setting_names_the_sglang_flag_it_stands_for():
    fields = set(ServerSettings.__dataclass_fields__)
    assert {o.field for o in OPTIONS} == fields
    assert all(o.sglang and o.meaning and o.option.startswith("--") for o in OPTIONS)


def test_hits_follow_their_images_into_a_subset():
    settings = ServerSettings(embedding_cache_hits=(1, 4))
    assert settings.for_subset([4, 0, 2]).embedding_cache_hits == (0,)
    with pytest.raises(WhatIfError, match="has 2 image"):
        settings.check_images(2)


# --- the items each release builds ------------------------------------------------------------------
def test_request_sides_follow_the_release_table():
    assert [s.version for s in REQUEST_SIDES.values()] == ["0.5.17", "0.5.18", "0.5.19", "0.5.23"]
    assert request_side_for("0.5.21").version == "0.5.19"
    assert request_side_for("0.5.23.post1").version == "0.5.23"


def test_0517_builds_eager_items_with_image_grid_thw_only():
    built = build_request(probe_images(paths(TWO)), ServerSettings(), "0.5.17")
    assert built.transport == "cuda_ipc"  # 0.5.17's unset flag on a one-node CUDA server
    for data in map(item_json, built.items):
        assert list(data["grids"]) == ["image_grid_thw"] and data["backend"] is None and data["feature"] == "eager"
    assert [it.feature.shape[0] for it in built.items] == [22 * 34, 8 * 8]


@pytest.mark.parametrize("release", ["0.5.18", "0.5.19", "0.5.22", "0.5.23"])
def test_default_serving_defers_every_photo_to_the_gpu_backend(release):
    built = build_request(probe_images(paths(["chelsea.png", "horse.png"])), ServerSettings(), release)
    assert built.transport == "cpu" and built.path == "cached"
    chelsea, horse = map(item_json, built.items)
    assert chelsea["grids"] == {"image_grid_thw": [[1, 22, 34]]} and chelsea["backend"] == "gpu"
    assert chelsea["resize_config"] == {
        "num_tokens": 187,
        "new_width": 451,
        "new_height": 300,
        "pad_width": 25,
        "pad_height": 8,
    }
    assert chelsea["feature_shape"] == [3, 300, 451] and horse["feature_shape"] == [4, 328, 400]  # RGBA keeps alpha


@pytest.mark.parametrize(
    "settings",
    [ServerSettings(transport="cuda_ipc"), ServerSettings(transport="cuda_vmm"), ServerSettings(defer="off")],
)
def test_a_non_cpu_transport_or_a_non_cuda_server_never_defers(settings):
    built = build_request(probe_images(paths(TWO)), settings, "0.5.23")
    assert built.forms == ["eager", "eager"]


def test_the_byte_rule_per_image_on_the_cached_path_and_jointly_without_the_cache():
    images = [probe_image(strip_png(), label="strip"), probe_image(sample_path("chelsea.png"))]
    cached = build_request(images, ServerSettings(), "0.5.18")
    assert cached.forms == ["eager", "deferred-gpu"]  # the strip is downscaled hard: fewer bytes once processed
    assert cached.decisions[0].raw_bytes > cached.decisions[0].processed_bytes
    uncached = build_request(images, ServerSettings(preprocess_cache_mb=0), "0.5.18")
    assert uncached.path == "uncached" and len(set(uncached.forms)) == 1  # one decision for all


def test_preprocessing_cache_hits_change_no_item():
    images = probe_images(paths(TWO))
    plain = build_request(images, ServerSettings(), "0.5.23")
    hit = build_request(images, ServerSettings(preprocess_cache_hits=(1,)), "0.5.23")
    assert [item_json(i) for i in plain.items] == [item_json(i) for i in hit.items]
    assert any("cached artifacts" in n for n in hit.notes)


@pytest.mark.parametrize("backend", ["cpu", "gpu"])
def test_the_epd_encoder_builds_grid_thws_items_and_drops_alpha(backend):
    settings = ServerSettings(serving="epd-encoder", epd_backend=backend)  # type: ignore[arg-type]
    built = build_request(probe_images(paths(["horse.png"])), settings, "0.5.18")
    (data,) = map(item_json, built.items)
    assert list(data["grids"]) == ["grid_thws"] and data["backend"] == backend and data["feature"] == "raw"
    assert data["feature_shape"] == ([3, 328, 400] if backend == "gpu" else [328, 400, 3])


def test_the_0517_encoder_is_eager():
    built = build_request(probe_images(paths(TWO)), ServerSettings(serving="epd-encoder"), "0.5.17")
    assert built.forms == ["eager", "eager"] and all(list(i.grids) == ["grid_thws"] for i in built.items)


def test_epd_cpu_preprocesses_each_ranks_own_images_on_the_encoder():
    built = build_request(probe_images(paths(TWO)), ServerSettings(serving="epd-encoder"), "0.5.18")
    call = model_call(built, 2, "0.5.18")
    assert call.owners == [0, 1] and call.rank_batches is not None
    assert [[it.local_preprocessed for it in b.items] for b in call.rank_batches] == [[True, False], [False, True]]


def test_releases_refuse_flags_they_lack():
    with pytest.raises(SettingNotInReleaseError, match="accepts only cpu, cuda_ipc"):
        build_request(probe_images(paths(TWO)), ServerSettings(transport="cuda_vmm"), "0.5.17")
    with pytest.raises(SettingNotInReleaseError, match="no preprocessing cache"):
        build_request(probe_images(paths(TWO)), ServerSettings(preprocess_cache_mb=0), "0.5.17")


def test_duplicates_and_embedding_cache_hits_do_not_reach_get_image_feature():
    images = paths(["chelsea.png", "chelsea.png", "coffee.png", "text.png"])
    answer = whatif(images, sglang_version="0.5.23", tp_size=2, settings=ServerSettings(embedding_cache_hits=(3,)))
    assert answer.replay.call.positions == [0, 2]
    assert {s.image for s in answer.replay.call.skipped} == {1, 3}
    every = whatif(images, sglang_version="0.5.18", tp_size=2, settings=ServerSettings(embedding_cache_hits=(0, 2, 3)))
    assert every.status == "no-call" and "Nothing reaches" in every.why


# --- what it must show ---------------------------------------------------------------------------------
def _failures(result, tp):
    cell = result.cell(result.rows[1][0].version, tp)
    return [(r.rank, r.error.message) for r in cell.answer.verdict.ranks if r.error is not None]


@pytest.mark.parametrize(
    "settings", [ServerSettings(transport="cpu"), ServerSettings(serving="epd-encoder", epd_backend="gpu")]
)
def test_gpu_backend_two_grids_fail_on_0518_at_tp2_and_up_and_are_clean_from_0519(settings):
    result = sweep(paths(TWO), settings=settings)
    assert sweep_summary(result) == "fails on 0.5.18 at TP ≥ 2 (A); clean from 0.5.19"
    for tp in (2, 4, 8):
        assert _failures(result, tp) == [(1, GPU_GRIDS)]  # rank 1 holds image 1: not the prefix
    assert result.cell("0.5.18", 1).status == "clean"
    assert all(
        c.status == "clean"
        for c in result.cells
        if c.releases[0].request_side.version in ("0.5.17", "0.5.19", "0.5.23")
    )
    assert "✗ A rank 1" in sweep_text(result) and f"A: ValueError: {GPU_GRIDS}" in sweep_text(result)


def test_epd_cpu_backend_fails_with_the_seed_message_when_cache_hits_move_an_owner():
    settings = ServerSettings(serving="epd-encoder", embedding_cache_hits=(1, 2))
    result = sweep(paths(EPD_CPU_HITS), settings=settings)
    assert sweep_summary(result) == "fails on 0.5.18 at TP ≥ 2 (A); clean from 0.5.19"
    assert _failures(result, 2) == [(1, SEED)]
    why = result.cell("0.5.18", 2).answer.why
    assert "Image 3 reaches rank 1 raw" in why and "S3" in why


def test_epd_cpu_backend_without_hits_is_clean_and_says_why():
    result = sweep(paths(TWO), settings=ServerSettings(serving="epd-encoder"))
    assert all(c.status == "clean" for c in result.cells)
    assert "materialize_for_rank" in result.cell("0.5.18", 2).answer.why


def test_eager_features_never_fail_and_the_sweep_says_why():
    result = sweep(paths(TWO), settings=ServerSettings(transport="cuda_ipc"))
    assert sweep_summary(result) == "clean on every release and attention-TP size"
    why = result.cell("0.5.18", 2).answer.why
    assert "eager" in why and "cuda_ipc transport never defers" in why and "deferred split never runs" in why
    assert "no deferred preprocessing" in result.cell("0.5.17", 8).answer.why


def test_a_refused_setting_makes_its_row_not_applicable():
    result = sweep(paths(TWO), settings=ServerSettings(transport="cuda_vmm"))
    assert {c.status for c in result.cells if c.releases[0].request_side.version == "0.5.17"} == {"not-applicable"}
    assert "0.5.17 refuses these settings" in sweep_summary(result)


def test_sweep_json_is_one_object_per_cell():
    cells = [cell_json(c) for c in sweep(paths(TWO)).cells]
    assert len(cells) == 16
    assert {(c["release"], c["tp_size"]) for c in cells} == {
        (r, t) for r in ("0.5.17", "0.5.18", "0.5.19", "0.5.23") for t in (1, 2, 4, 8)
    }
    failing = [c for c in cells if c["status"] == "error-reproduced"]
    assert [c["tp_size"] for c in failing] == [2, 4, 8] and failing[0]["error"]["message"] == GPU_GRIDS
    assert failing[0]["culprit"] == 1 and failing[0]["failing_ranks"] == [1]


def test_pixels_and_shapes_give_the_same_outcome():
    images = paths(["chelsea.png", "horse.png", "microaneurysms.png"])
    for settings in (ServerSettings(), ServerSettings(serving="epd-encoder"), ServerSettings(transport="cuda_ipc")):
        a = whatif(images, sglang_version="0.5.18", tp_size=2, settings=settings, mode="shapes", device="cpu")
        b = whatif(images, sglang_version="0.5.18", tp_size=2, settings=settings, mode="pixels", device="cpu")
        assert [(r.rank, r.outcome, r.error) for r in a.verdict.ranks] == [
            (r.rank, r.outcome, r.error) for r in b.verdict.ranks
        ]


def test_a_failing_whatif_names_the_fix_release_and_the_image_to_look_at():
    answer = whatif(paths(TWO), sglang_version="0.5.18", tp_size=2)
    assert answer.fixed_in is not None and answer.fixed_in.release == "0.5.19"
    assert answer.verdict.to_json(answer.fixes)["release"]["fixed_in"]["release"] == "0.5.19"
    assert answer.replay.culprit(answer.verdict) == 1
    text = answer_text(answer)
    assert "look at: image 1 (microaneurysms.png" in text and "image_grid_thw=[1, 22, 34]" in text


# --- minimize -----------------------------------------------------------------------------------------
def test_ddmin_finds_a_one_minimal_subset_in_order():
    assert ddmin(list(range(8)), lambda s: 2 in s and 6 in s) == [2, 6]
    assert ddmin(list(range(5)), lambda s: 3 in s) == [3]


def test_minimize_shrinks_a_six_image_request_to_the_two_its_failure_needs():
    names = ["astronaut.png", "chelsea.png", "coffee.png", "rocket.jpg", "hubble_deep_field.jpg", "retina.jpg"]
    # Four of the six are embedding-cache hits: only chelsea and hubble reach get_image_feature.
    found = minimize(
        paths(names), sglang_version="0.5.18", tp_size=2, settings=ServerSettings(embedding_cache_hits=(0, 2, 3, 5))
    )
    assert found.target == ErrorInfo("ValueError", GPU_GRIDS)
    assert found.kept == (1, 4) and culprit_unit(found) == 4
    assert "minimal set: 2 of 6 images" in minimized_text(found)


def test_minimize_keeps_the_cache_hits_a_failure_needs():
    settings = ServerSettings(serving="epd-encoder", embedding_cache_hits=(1, 2))
    found = minimize(paths(EPD_CPU_HITS), sglang_version="0.5.18", tp_size=2, settings=settings)
    assert found.target == ErrorInfo("ValueError", SEED) and found.kept == (0, 1, 2, 3) and culprit_unit(found) == 3
    assert found.order_matters is True


def test_minimize_of_a_passing_request_says_so():
    found = minimize(paths(TWO), sglang_version="0.5.23", tp_size=2)
    assert found.target is None and "no failure to shrink" in minimized_text(found)


# --- the command line ------------------------------------------------------------------------------------
def test_cli_sweep_json_prints_one_object_per_line(capsys):
    code = main(["whatif", *map(str, paths(TWO)), "--sweep", "--json"])
    lines = capsys.readouterr().out.strip().splitlines()
    assert code == 1 and len(lines) == 16
    assert all(isinstance(json.loads(line), dict) for line in lines)


def test_cli_whatif_and_minimize(capsys):
    assert main(["whatif", *map(str, paths(TWO)), "--sglang-version", "0.5.19", "--tp", "2"]) == 0
    assert "CLEAN REPLAY" in capsys.readouterr().out
    args = ["whatif", *map(str, paths(SAMPLE_PHOTOS[:3])), "--sglang-version", "0.5.18", "--tp", "2", "--minimize"]
    assert main([*args, "--json"]) == 1
    assert len(json.loads(capsys.readouterr().out)["kept"]) == 2


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        ([], "no images"),
        (["IMG", "--sglang-version", "0.5.3", "--tp", "2"], "has no Kimi-K3 model"),
        (["IMG", "--sglang-version", "banana", "--tp", "2"], "expected a release such as 0.5.23"),
        (["IMG", "--sglang-version", "0.5.18", "--tp", "0"], "--tp 0: expected an attention-TP size"),
        (["IMG", "--sglang-version", "0.5.18", "--tp", "two"], "--tp 'two'"),
        (["IMG", "--sglang-version", "0.5.18"], "--tp missing"),
        (["IMG", "--sweep", "--tp", "2"], "drop --sglang-version and --tp"),
        (["IMG", "--sweep", "--minimize"], "pick one"),
        (["IMG", "--sweep", "--epd-backend", "gpu"], "add --serving epd-encoder"),
        (["IMG", "--sweep", "--serving", "epd"], "--serving 'epd'"),
        (["IMG", "--sweep", "--embedding-cache-hit", "5"], "the request has 1 image"),
        (["IMG", "--sglang-version", "0.5.17", "--tp", "2", "--mm-feature-transport", "cuda_vmm"], "accepts only"),
    ],
)
def test_cli_bad_input_gets_one_line_errors(extra, message, capsys):
    args = [str(sample_path("chelsea.png")) if a == "IMG" else a for a in extra]
    assert main(["whatif", *args]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("kimi-viz whatif: error: ") and message in err and "\n" not in err


def test_a_future_release_replays_the_newest_known_code_and_says_so(capsys):
    assert main(["whatif", str(sample_path("chelsea.png")), "--sglang-version", "0.9.9", "--tp", "2", "--json"]) == 0
    answer = json.loads(capsys.readouterr().out)
    assert answer["sglang_version"] == "0.5.23"
    assert answer["notes"] == [
        "SGLang 0.9.9 is newer than the newest release kimi-viz knows (0.5.23); replaying 0.5.23's post-fix path"
    ]
    assert main(["whatif", str(sample_path("chelsea.png")), "--sglang-version", "0.5.23", "--tp", "2", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["notes"] == []
