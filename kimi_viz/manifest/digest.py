"""A manifest's fingerprint: the name it is known by and the SHA-256 of its ``manifest.json`` (or ``.zip``).

The repro's docstring and ``issue.md`` name a manifest this way: the folder's (or file's) name only,
since a local path says nothing to a maintainer, and the digest, so that whoever holds the manifest
can tell it is the one the report was made from.
"""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

from ..errors import ArgumentError


def manifest_digest(manifest: str | os.PathLike[str]) -> tuple[str, str]:
    """Return ``(name, sha256)`` of a manifest folder, its ``manifest.json`` or its ``.zip``.

    The digest is of ``manifest.json`` for a folder (the file that names every payload with its
    shape), of the archive's bytes for a ``.zip``. ArgumentError when the file cannot be read.
    """
    path = Path(manifest)
    target = path / "manifest.json" if path.is_dir() else path
    digest = hashlib.sha256()
    try:
        with open(target, "rb") as handle:
            for block in iter(lambda: handle.read(1 << 20), b""):
                digest.update(block)
    except OSError as exc:
        raise ArgumentError(f"manifest: cannot read {str(target)!r} ({exc.strerror or exc})") from None
    name = path.parent.name if path.name == "manifest.json" else path.name
    return name or str(path), digest.hexdigest()


__all__ = ["manifest_digest"]
