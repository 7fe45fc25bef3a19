"""Checksums of whole files, as the manifest records them."""
from __future__ import annotations

import hashlib
import mmap
import os
from typing import BinaryIO

__all__ = ["file_digest", "open_file_digest"]

_CHUNK = 8 << 20  # 8 MiB


def file_digest(path: str | os.PathLike) -> tuple[int, str]:
    """``(size in bytes, sha256 hex digest)`` of a file (:func:`open_file_digest`)."""
    with open(path, "rb") as f:
        return open_file_digest(f)


def open_file_digest(f: BinaryIO, sha=None, start: int = 0) -> tuple[int, str]:
    """``(size in bytes, sha256 hex digest)`` of open file ``f``'s bytes, from its start: hashed from a
    read-only mapping, a piece at a time (no copy of the bytes first: measured on a 1 GiB shard in the page
    cache, 0.62 CPU-s against 0.72 read in pieces), or read in pieces (bounded memory) where the file cannot be
    mapped (an empty file, a pipe). ``sha``: a sha256 that has already hashed the file's first ``start`` bytes,
    continued from there (a seekable file)."""
    sha = sha if sha is not None else hashlib.sha256()
    try:
        mm = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)
    except (OSError, ValueError):
        if f.seekable():
            f.seek(start)
        size = start
        while chunk := f.read(_CHUNK):
            sha.update(chunk)
            size += len(chunk)
        return size, sha.hexdigest()
    with mm, memoryview(mm) as view:
        for at in range(start, len(mm), _CHUNK):
            sha.update(view[at:at + _CHUNK])
        return len(mm), sha.hexdigest()
