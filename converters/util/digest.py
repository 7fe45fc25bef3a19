"""Checksums of whole files, as the manifest records them."""
from __future__ import annotations

import hashlib
import os

__all__ = ["file_digest"]

_CHUNK = 8 << 20  # 8 MiB


def file_digest(path: str | os.PathLike) -> tuple[int, str]:
    """``(size in bytes, sha256 hex digest)`` of a file, read in chunks (bounded memory)."""
    sha = hashlib.sha256()
    size = 0
    with open(path, "rb") as f:
        while chunk := f.read(_CHUNK):
            sha.update(chunk)
            size += len(chunk)
    return size, sha.hexdigest()
