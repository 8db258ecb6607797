"""Batch manifests (format version 1): a writer and a strict, safe reader.

A manifest is a folder (or a ``.zip`` of one) holding ``manifest.json`` plus the payload files it
names: images under ``images/`` and tensors in ``tensors.safetensors``. Nothing in a manifest is
ever executed or unpickled. The reader checks every field against the JSON Schema shipped in
``kimi_viz/manifest/manifest-v1.schema.json``, confines every file to the manifest folder, reads
tensors only with safetensors after checking the file header itself, reads images only with
Pillow after checking their pixel count, and checks every declared shape against the size limits
before anything is allocated. Errors are :class:`~kimi_viz.errors.ManifestError` naming the JSON
path (``items[3].deferred.resize_config.pad_width``); unknown keys are warnings.

The modules, one job each: :mod:`.schema` (the format's constants, the JSON Schema, validation and
its messages), :mod:`.sources` (the safe folder and zip sources and payload header checks),
:mod:`.read` (:func:`read_manifest`), :mod:`.write` (:func:`write_manifest`) and :mod:`.digest`
(:func:`manifest_digest`, the name and SHA-256 reports give a manifest). Import the names
below from ``kimi_viz.manifest``.
"""

from .digest import manifest_digest
from .format import DTYPES, FORMAT, VERSION
from .read import check_manifest, read_manifest
from .schema import ManifestWarning, json_path, schema_path, validate_manifest_json
from .sources import read_safetensors_header
from .write import jsonable, manifest_payload, redact_batch, write_manifest

__all__ = [
    "DTYPES",
    "check_manifest",
    "FORMAT",
    "VERSION",
    "ManifestWarning",
    "json_path",
    "jsonable",
    "manifest_digest",
    "manifest_payload",
    "read_manifest",
    "read_safetensors_header",
    "redact_batch",
    "schema_path",
    "validate_manifest_json",
    "write_manifest",
]
