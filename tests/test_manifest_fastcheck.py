"""The document-level fast path of manifest validation is a strict subset of the schema.

:func:`~kimi_viz.manifest.fastcheck.document_is_plainly_valid` lets a manifest whose every part is
plain skip ``jsonschema`` (and its import). It must never accept a document that ``jsonschema``
refuses or warns about: hypothesis mutates plain documents and checks every accepted one against
the schema itself. Anything unusual still goes through ``jsonschema`` for its exact message.
"""

from __future__ import annotations

import copy
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from kimi_viz.errors import ManifestError
from kimi_viz.manifest.fastcheck import document_is_plainly_valid, item_is_plainly_valid
from kimi_viz.manifest.schema import _validator, validate_manifest_json

ITEM = {
    "grids": {"grid_thws": [[1, 2, 2]]},
    "feature": {"kind": "shape_only", "layout": "patches", "shape": [4, 3, 14, 14], "dtype": "float32"},
}
GOOD_DOCUMENTS: list[dict[str, Any]] = [
    {"format": "kimi-viz-manifest", "version": 1, "items": []},
    {
        "format": "kimi-viz-manifest",
        "version": 1,
        "created_by": "kimi-viz capture",
        "source": {
            "sglang_version": "0.5.18",
            "code_variant": "pre-fix",
            "code_variant_source": "detected",
            "recorded": {"outcome": "error", "error": {"type": "ValueError", "message": "m"}},
            "note": "",
        },
        "runtime": {"attn_tp_size": 8, "attn_tp_rank": 3, "image_indices": [0, 4]},
        "processor": {
            "patch_size": 14,
            "merge_kernel_size": [2, 2],
            "in_patch_limit": 65536,
            "patch_limit_on_one_side": 512,
            "fixed_output_tokens": None,
            "image_mean": [0.5, 0.5, 0.5],
            "image_std": [0.5, 0.5, 0.5],
            "transparent_bg_config": {"pattern": "chessboard", "chessboard_square_size": 8},
            "transparent_bg_fill_stage": "before_resize",
        },
        "items": [],
        "extra": {"processor_output": "concatenated"},
    },
    {
        "format": "kimi-viz-manifest",
        "version": 1,
        "source": {"sglang_version": None, "recorded": {"outcome": "ok", "error": None}},
        "runtime": {"attn_tp_size": 1, "attn_tp_rank": None, "image_indices": None},
        "processor": {"merge_kernel_size": 2, "fixed_output_tokens": 256},
        "items": [],
    },
    {
        "format": "kimi-viz-manifest",
        "version": 1,
        "items": [],
        "forward_context": {
            "requests": [
                {
                    "rid": "req-a",
                    "batch_index": 2,
                    "prefix_len": 0,
                    "extend_len": 20,
                    "images": [
                        {"offsets": [[1, 2]], "status": "cache-hit", "call_item": None},
                        {"offsets": [[5, 12], [14, 15]], "status": "outside-window"},
                    ],
                },
                {"prefix_len": None, "extend_len": None, "images": []},
            ],
            "items": [],
            "chunked_prefill_size": -1,
            "source": "",
        },
    },
]
values = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(-5, 2**32)
    | st.floats(allow_nan=False)
    | st.sampled_from(["kimi-viz-manifest", "ok", "error", "pre-fix", "detected", "chessboard", "in-call", "", "x"]),
    lambda children: (
        st.lists(children, max_size=4)
        | st.dictionaries(
            st.sampled_from(
                ["outcome", "error", "type", "message", "pattern", "attn_tp_size", "patch_size", "status", "rid", "x"]
            ),
            children,
            max_size=4,
        )
    ),
    max_leaves=10,
)


def _paths(value, prefix=()):
    yield prefix
    if isinstance(value, dict):
        for key, child in value.items():
            yield from _paths(child, prefix + (key,))
    elif isinstance(value, list):
        for index, child in enumerate(value):
            yield from _paths(child, prefix + (index,))


@pytest.mark.parametrize("document", GOOD_DOCUMENTS, ids=["minimal", "full", "nulls", "forward-context"])
def test_plain_documents_take_the_fast_path_and_the_schema_agrees(document):
    assert document_is_plainly_valid(document)
    assert list(_validator().iter_errors(document)) == []


@settings(max_examples=600, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_fuzz_the_document_fast_path_is_a_subset_of_the_schema(data):
    document = copy.deepcopy(data.draw(st.sampled_from(GOOD_DOCUMENTS)))
    for _ in range(data.draw(st.integers(1, 3))):
        path = data.draw(st.sampled_from([p for p in _paths(document) if p]))
        parent = document
        for key in path[:-1]:
            parent = parent[key]
        if data.draw(st.booleans()):
            parent[path[-1]] = data.draw(values)
        else:
            del parent[path[-1]]
        if not [p for p in _paths(document) if p]:
            break
    # validate_manifest_json skips jsonschema only when the document and every item are plain
    if document_is_plainly_valid(document) and all(item_is_plainly_valid(item) for item in document["items"]):
        errors = list(_validator().iter_errors(document))
        assert errors == [], (document, [e.message for e in errors])


def test_what_the_fast_path_declines_still_gets_the_schemas_warning_and_error():
    unknown = {**copy.deepcopy(GOOD_DOCUMENTS[1]), "items": [ITEM], "surprise": 1}
    unknown["runtime"]["image_indices"] = [0]
    assert not document_is_plainly_valid(unknown)
    assert validate_manifest_json(unknown) == ["surprise: unknown key 'surprise' (ignored)"]
    bad = copy.deepcopy(GOOD_DOCUMENTS[1])
    bad["runtime"]["attn_tp_size"] = 0
    assert not document_is_plainly_valid(bad)
    with pytest.raises(ManifestError) as caught:
        validate_manifest_json(bad)
    assert "runtime.attn_tp_size" in str(caught.value)


def test_the_schema_file_and_the_fast_path_share_one_set_of_dtypes_and_layouts():
    """The schema file's feature dtypes and layouts are the ones ``format.py`` holds and the fast path uses."""
    import json

    from kimi_viz.manifest import fastcheck, schema
    from kimi_viz.manifest import format as manifest_format

    defs = json.loads(schema.schema_path().read_text(encoding="utf-8"))["$defs"]
    tensor, shape_only = defs["feature_tensor"]["properties"], defs["feature_shape_only"]["properties"]
    assert tuple(tensor["dtype"]["enum"]) == manifest_format.TENSOR_DTYPES == fastcheck.TENSOR_DTYPES
    assert tuple(tensor["layout"]["enum"]) == manifest_format.TENSOR_LAYOUTS == fastcheck.TENSOR_LAYOUTS
    assert tuple(shape_only["dtype"]["enum"]) == manifest_format.SHAPE_ONLY_DTYPES == fastcheck.SHAPE_ONLY_DTYPES
    assert tuple(shape_only["layout"]["enum"]) == manifest_format.SHAPE_ONLY_LAYOUTS == fastcheck.SHAPE_ONLY_LAYOUTS
    assert set(manifest_format.TENSOR_DTYPES) == set(manifest_format.DTYPES)
