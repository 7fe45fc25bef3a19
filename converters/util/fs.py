"""Durable files: fsync a directory after renames, write a small file atomically, and hash bytes as they
pass through a file object (so a shard's sha256 is known the moment it is closed)."""
from __future__ import annotations

import hashlib
import io
import os
import tempfile
from typing import BinaryIO

__all__ = ["fsync_dir", "write_atomic", "HashingWriter", "HashingReader"]


def fsync_dir(path: str | os.PathLike) -> None:
    """fsync a directory so that renames inside it are durable (no-op where unsupported)."""
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def write_atomic(path: str | os.PathLike, data: bytes, *, tmp_prefix: str = ".tmp-") -> None:
    """Write ``data`` to ``path`` through a uniquely named temporary file in the same directory: fsync,
    rename, fsync the directory. Readers see the old file or the new one, never a part."""
    path = os.fspath(path)
    directory = os.path.dirname(path) or "."
    fd, tmp = tempfile.mkstemp(prefix=tmp_prefix, dir=directory)
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise
    fsync_dir(directory)


class HashingWriter(io.RawIOBase):
    """A write-only wrapper that counts and sha256-hashes what passes through it."""

    def __init__(self, raw: BinaryIO):
        self.raw = raw
        self.sha = hashlib.sha256()
        self.nbytes = 0

    def writable(self) -> bool:
        return True

    def write(self, b) -> int:
        mv = memoryview(b)
        self.sha.update(mv)
        self.nbytes += mv.nbytes
        return self.raw.write(mv)


class HashingReader(io.RawIOBase):
    """A read-only wrapper that counts and sha256-hashes what is read through it."""

    def __init__(self, raw: BinaryIO):
        self.raw = raw
        self.sha = hashlib.sha256()
        self.nbytes = 0

    def readable(self) -> bool:
        return True

    def readinto(self, b) -> int:
        n = self.raw.readinto(b)
        if n:
            self.sha.update(memoryview(b)[:n])
            self.nbytes += n
        return n or 0
