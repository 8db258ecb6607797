"""The constants of manifest format version 1: names, versions, limits, and the one set of feature dtypes and layouts.

The JSON Schema (``manifest-v1.schema.json``), the schema checks (:mod:`.schema`), the fast path
(:mod:`.fastcheck`), the reader and the writer all take these from here; a test holds the schema
file's enums to them.
"""

from __future__ import annotations

FORMAT = "kimi-viz-manifest"
VERSION = 1
MANIFEST_NAME = "manifest.json"
TENSORS_NAME = "tensors.safetensors"
IMAGES_DIR = "images"

# dtype names in manifests -> (safetensors header name, bytes per element)
DTYPES = {"uint8": ("U8", 1), "float32": ("F32", 4), "bfloat16": ("BF16", 2), "float16": ("F16", 2)}
# The one set of feature dtypes and layouts: the JSON Schema's enums, the fast path and the reader all use these.
TENSOR_DTYPES = tuple(DTYPES)
SHAPE_ONLY_DTYPES = (*TENSOR_DTYPES, "unknown")  # a redacted capture may not know the dtype
TENSOR_LAYOUTS = ("chw", "hwc", "patches", "stacked")
SHAPE_ONLY_LAYOUTS = ("image", *TENSOR_LAYOUTS)  # a redacted raw image keeps only its shape
MAX_ITEMS = 4096  # items in one manifest: a get_image_feature batch (the replay and report scale with it)
# forward_context: the statuses of a request's image in the forward pass, and the limit on its lists.
CONTEXT_IMAGE_STATUSES = ("in-call", "cache-hit", "same-image", "outside-window", "not-in-call")
MAX_CONTEXT_ENTRIES = 4096  # requests, images of a request, runs of an image, call items
