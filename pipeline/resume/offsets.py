"""The record-offset index of an uncompressed TFRecord file: the little-endian uint64 byte offset of every
record (8 bytes a record), so that a resume can enter a shard at record k without reading the k records
before it (``pipeline.resume.seek.records_from``).

``compute_offsets(path)`` walks the 12-byte record headers (length, masked CRC32C of the length; the CRC is
checked, a bad header is an ``IntegrityError`` naming the file and the byte offset) in a numba kernel over the
file mapped in memory: it touches only the headers, so a file of big records costs a page or two per record,
and no Python runs per record. (Shards are never rewritten in place: like any memory map, one truncated by
another process during its walk would fault this one.)

``ensure_index`` computes an index once and caches it under ``index_dir()`` (``$TFPIPE_CACHE/offsets``, else
``~/.cache/tfpipe/offsets``), keyed by the shard's sha256 from the manifest when known (the same bytes have the
same index wherever they lie), else by absolute path, size and mtime; written atomically (temp, fsync,
rename), read back only when it is a regular file of 8 × records bytes. A cache directory that cannot be
written means no caching (one warning). ``offset_of(path, k)`` trusts an offset only after checking the file
itself: the record header there and at the record before it (whose end must be the offset), and the last
record's, which must end at the end of the file; anything wrong is one warning and ``None`` (the caller then
reads through, ``TFRecordDataset.skip``). No TensorFlow here; numba only when an index is computed.
"""
from __future__ import annotations

import hashlib
import logging
import mmap
import os
import stat
from dataclasses import dataclass, field

import numpy as np

from converters.util.errors import IntegrityError
from converters.util.fs import is_sha256, write_atomic
from converters.util.system import cache_root

__all__ = ["OFFSET_BYTES", "IndexResult", "index_dir", "index_path", "compute_offsets", "ensure_index", "offset_of",
           "masked_length_crc"]

log = logging.getLogger(__name__)

OFFSET_BYTES = 8                    # one little-endian uint64 per record
_HEADER = 12                        # uint64 length + uint32 masked CRC32C of those 8 bytes
_FRAME = 16                         # header + uint32 masked CRC32C of the data
_CHUNK_RECORDS = 1 << 20            # offsets found per kernel call (8 MiB)
_POLY = 0x82F63B78
_DTYPE = np.dtype("<u8")
_unwritable: set[str] = set()       # cache directories already warned about (one warning each)


@dataclass(frozen=True)
class IndexResult:
    """One shard's index: ``status`` is ``"cached"`` (found in the cache), ``"indexed"`` (computed and written
    to ``cache_path``) or ``"uncached"`` (computed; the cache could not take it). ``offsets`` is the computed
    array (None when it was found in the cache and not read)."""

    path: str
    records: int
    status: str
    cache_path: str
    offsets: np.ndarray | None = field(default=None, compare=False, repr=False)


def index_dir() -> str:
    """Where indexes are cached: ``$TFPIPE_CACHE/offsets``, else ``~/.cache/tfpipe/offsets``."""
    return os.path.join(cache_root(), "offsets")


def index_path(path: str, *, sha256: str | None = None, directory: str | None = None,
               st: os.stat_result | None = None) -> str:
    """The cache file of ``path``'s index: named by ``sha256`` (the shard's, from its manifest) when given,
    else by a hash of the absolute path, size and mtime (a rewritten file gets a new name)."""
    directory = directory if directory is not None else index_dir()
    if sha256 is not None:
        if not is_sha256(sha256):
            raise ValueError(f"sha256 must be 64 lowercase hex digits (the manifest's), got {sha256!r}")
        return os.path.join(directory, f"{sha256}.offsets")
    st = st if st is not None else os.stat(path)
    key = f"{os.path.abspath(path)}\0{st.st_size}\0{st.st_mtime_ns}".encode("utf-8", "surrogateescape")
    return os.path.join(directory, f"path-{hashlib.sha256(key).hexdigest()[:40]}.offsets")


def masked_length_crc(length_bytes: bytes) -> int:
    """The masked CRC32C TFRecord stores after a record's 8 length bytes, in plain Python (a check of one or
    two headers must not import numba: ``converters.tfrecord.crc`` is the kernel for bulk work, and the tests
    compare the two)."""
    c = 0xFFFFFFFF
    for b in length_bytes:
        c ^= b
        for _ in range(8):
            c = (c >> 1) ^ _POLY if c & 1 else c >> 1
    c ^= 0xFFFFFFFF
    return ((((c >> 15) | (c << 17)) & 0xFFFFFFFF) + 0xA282EAD8) & 0xFFFFFFFF


def _damage(path: str, reason: str, offset: int) -> IntegrityError:
    exc = IntegrityError(f"{path}: {reason} at byte {offset}")
    exc.reason, exc.offset = reason, offset
    return exc


def compute_offsets(path: str) -> np.ndarray:
    """The byte offset of every record of the uncompressed TFRecord file ``path`` (uint64, in order), from its
    record headers only. Raises ``IntegrityError`` (file and byte offset) at a header whose length CRC is
    wrong (a damaged file, or not an uncompressed TFRecord file: a GZIP shard fails at byte 0) or at a record
    the file ends inside."""
    path = os.fspath(path)
    with open(path, "rb") as f:
        size = os.fstat(f.fileno()).st_size
        if size == 0:
            return np.zeros(0, _DTYPE)
        from .offsetscan import WALK_BAD_HEADER, walk_chunk

        mm = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)
        try:
            buf = np.frombuffer(mm, np.uint8)
            parts, pos, status = [], 0, 0
            while pos < size:
                out = np.empty(_CHUNK_RECORDS, np.uint64)
                n, pos, status = walk_chunk(buf, pos, out)
                parts.append(out[:n])
                if status:
                    break
            del buf
        finally:
            try:
                mm.close()
            except BufferError:   # an exception's traceback still holds the array: the mapping goes with it
                pass
    if status == WALK_BAD_HEADER:
        raise _damage(path, "corrupt record header (length CRC mismatch: damaged, or not an uncompressed "
                            "TFRecord file)", pos)
    if status:
        raise _damage(path, "truncated record (the file ends inside it)", pos)
    return np.concatenate(parts).astype(_DTYPE, copy=False)


def _open_cached(cpath: str, records: int | None) -> int | None:
    """A read-only descriptor of the cache file ``cpath`` when it is a regular file (no link) of
    8 × ``records`` bytes (a multiple of 8 when the count is unknown), else None."""
    try:
        fd = os.open(cpath, os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0))
    except OSError:
        return None
    st = os.fstat(fd)
    ok = stat.S_ISREG(st.st_mode) and (st.st_size == OFFSET_BYTES * records if records is not None
                                       else st.st_size % OFFSET_BYTES == 0)
    if not ok:
        os.close(fd)
        return None
    return fd


def _store(cpath: str, offsets: np.ndarray) -> bool:
    directory = os.path.dirname(cpath)
    try:
        os.makedirs(directory, exist_ok=True)
        write_atomic(cpath, offsets.astype(_DTYPE, copy=False).tobytes())
        return True
    except OSError as exc:
        if directory not in _unwritable:
            _unwritable.add(directory)
            log.warning("cannot cache record-offset indexes in %s (%s): computing them at each use",
                        directory, exc.strerror or exc)
        return False


def ensure_index(path: str, *, records: int | None = None, sha256: str | None = None,
                 directory: str | None = None) -> IndexResult:
    """``path``'s index: found in the cache, else computed and cached. ``records`` (the manifest's count)
    makes a cache file of another size unusable; a computed index with another count is not cached (the file
    is not the manifest's: one warning)."""
    path = os.fspath(path)
    if records is not None and (not isinstance(records, int) or records < 0):
        raise ValueError(f"records must be a count >= 0, got {records!r}")
    st = os.stat(path)
    cpath = index_path(path, sha256=sha256, directory=directory, st=st)
    fd = _open_cached(cpath, records)
    if fd is not None:
        n = os.fstat(fd).st_size // OFFSET_BYTES
        os.close(fd)
        return IndexResult(path, n, "cached", cpath)
    offsets = compute_offsets(path)
    if records is not None and len(offsets) != records:
        log.warning("%s has %d records, its manifest says %d: the record-offset index is not cached",
                    path, len(offsets), records)
        return IndexResult(path, len(offsets), "uncached", cpath, offsets)
    status = "indexed" if _store(cpath, offsets) else "uncached"
    return IndexResult(path, len(offsets), status, cpath, offsets)


def _entries(res: IndexResult, fd: int | None, ks: list[int]) -> list[int]:
    if res.offsets is not None:
        return [int(res.offsets[k]) for k in ks]
    out = []
    for k in ks:
        raw = os.pread(fd, OFFSET_BYTES, OFFSET_BYTES * k)
        out.append(int.from_bytes(raw, "little") if len(raw) == OFFSET_BYTES else -1)
    return out


def _record_end(shard: int, offset: int, size: int) -> int | None:
    """Where the record whose header is at ``offset`` ends, when the header is there (length CRC right) and
    the record fits in the file; else None."""
    if not 0 <= offset <= size - _FRAME:
        return None
    head = os.pread(shard, _HEADER, offset)
    if len(head) != _HEADER or masked_length_crc(head[:8]) != int.from_bytes(head[8:], "little"):
        return None
    end = offset + _FRAME + int.from_bytes(head[:8], "little")
    return end if end <= size else None


def _check(shard: int, size: int, n: int, prev: int | None, at: int | None, last: int) -> str | None:
    """Why offsets ``prev`` (record k-1), ``at`` (record k; None: k is past the end) and ``last`` (record
    n-1) cannot be right for the file, or None."""
    if n and _record_end(shard, last, size) != size:
        return f"its last record (at byte {last}) does not end at the end of the file ({size} bytes)"
    if at is not None and not (0 <= at < size and _record_end(shard, at, size) is not None):
        return f"no record header at byte {at}"
    if prev is not None and _record_end(shard, prev, size) != (size if at is None else at):
        return f"the record at byte {prev} does not end where the next one starts"
    return None


def offset_of(path: str, k: int, *, records: int | None = None, sha256: str | None = None,
              directory: str | None = None) -> int | None:
    """The byte offset of record ``k`` of ``path`` (the file size when ``k`` is at or past the last record),
    from its index (computed and cached on first use) and checked against the file; None, after one warning,
    when the index does not match the file (a damaged cache file is removed, so the next use recomputes it)."""
    if not isinstance(k, int) or k < 0:
        raise ValueError(f"k must be a record number >= 0, got {k!r}")
    path = os.fspath(path)
    try:
        res = ensure_index(path, records=records, sha256=sha256, directory=directory)
    except OSError as exc:     # (a damaged file is an IntegrityError, raised)
        log.warning("cannot index the record offsets of %s (%s): reading through its first %d records", path,
                    exc.strerror or exc, k)
        return None
    fd = None if res.offsets is not None else _open_cached(res.cache_path, records)
    if res.offsets is None and fd is None:
        log.warning("the record-offset index %s vanished while in use: reading %s through its first %d records",
                    res.cache_path, path, k)
        return None
    try:
        n = res.records if res.offsets is not None else os.fstat(fd).st_size // OFFSET_BYTES
        prev_k = min(k, n) - 1 if min(k, n) > 0 else None      # the record before k (the last one past the end)
        at_k = k if k < n else None
        wanted = [i for i in (prev_k, at_k, n - 1) if i is not None and i >= 0]
        got = dict(zip(wanted, _entries(res, fd, wanted)))
        prev, at = got.get(prev_k), got.get(at_k)
        with open(path, "rb") as f:
            size = os.fstat(f.fileno()).st_size
            if n:
                why = _check(f.fileno(), size, n, prev, at, got[n - 1])
            else:
                why = None if size == 0 else "it lists no records"
    finally:
        if fd is not None:
            os.close(fd)
    if why is None:
        return size if at is None else at
    log.warning("the record-offset index of %s (%s) does not match the file: %s; reading through its first %d "
                "records instead", path, res.cache_path, why, k)
    if res.offsets is None:
        try:
            os.unlink(res.cache_path)
        except OSError:
            pass
    return None
