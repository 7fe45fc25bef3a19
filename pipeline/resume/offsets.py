"""The record-offset index of an uncompressed TFRecord file: the little-endian uint64 byte offset of every
record (8 bytes a record), so that a resume can enter a shard at record k without reading the k records
before it (``pipeline.graph.seeksource.records_from``).

``compute_offsets(path)`` walks the 12-byte record headers (length, masked CRC32C of the length; the CRC is
checked, a bad header is an ``IntegrityError`` naming the file and the byte offset) in a numba kernel over the
file mapped in memory: it touches only the headers, so a file of big records costs a page or two per record,
and no Python runs per record. (Shards are never rewritten in place: like any memory map, one truncated by
another process during its walk would fault this one.)

``ensure_index`` computes an index once and caches it under ``index_dir()`` (``$TFPIPE_CACHE/offsets``, else
``~/.cache/tfpipe/offsets``), keyed by the shard's sha256 from the manifest when known (the same bytes have the
same index wherever they lie: ``tfpipe pipeline offsets SET`` and a resume both look it up so), else by absolute
path, size and mtime; written atomically (temp, fsync, rename). A cache file holds the offsets and a trailer:
the record count, the shard's size and a sha256 over the index bytes, the count, the size and the cache key
(the shard's identity). It is used only when it is a regular file (opened without following links, non-blocking:
a FIFO or a link planted there is never read), its checksum, count (the manifest's) and shard size match, and
its offsets are those of consecutive records (the first at byte 0, at least 16 bytes apart, inside the file);
anything else is one warning naming the entry and the reason, and the shard is walked again (the entry
replaced). A cache directory that cannot be written means no caching (one warning). ``offset_of(path, k)``
then checks the file itself: the record header at the offset and at the record before it (whose end must be
the offset), and the last record's, which must end at the end of the file; anything wrong is one warning and
``None`` (the caller then reads through, ``TFRecordDataset.skip``). Only regular files are opened, shards and
cache entries alike. No TensorFlow here; numba only when an index is computed.
"""
from __future__ import annotations

import errno
import hashlib
import logging
import mmap
import os
import stat
import time
from dataclasses import dataclass, field

import numpy as np

from converters.util.errors import IntegrityError
from converters.util.fs import NotRegularFileError, file_kind, is_sha256, open_regular, write_atomic
from converters.util.system import cache_root

__all__ = ["OFFSET_BYTES", "TRAILER_BYTES", "IndexResult", "index_dir", "index_path", "has_cached_index",
           "compute_offsets", "encode_index", "ensure_index", "offset_of", "masked_length_crc"]

log = logging.getLogger(__name__)

OFFSET_BYTES = 8                    # one little-endian uint64 per record
TRAILER_BYTES = 56                  # magic (8) + record count (8) + shard bytes (8) + sha256 (32)
_MAGIC = b"tfpoffs1"
_SUFFIX = ".offsets"
_HEADER = 12                        # uint64 length + uint32 masked CRC32C of those 8 bytes
_FRAME = 16                         # header + uint32 masked CRC32C of the data
_CHUNK_RECORDS = 1 << 20            # offsets found per kernel call (8 MiB)
_POLY = 0x82F63B78
_DTYPE = np.dtype("<u8")
_READ_FLAGS = os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_CLOEXEC", 0)
_unwritable: set[str] = set()       # cache directories already warned about (one warning each)


@dataclass(frozen=True)
class IndexResult:
    """One shard's index: ``status`` is ``"cached"`` (found in the cache and checked), ``"indexed"`` (computed
    and written to ``cache_path``) or ``"uncached"`` (computed; the cache could not take it). ``offsets``: the
    index (uint64 record offsets)."""

    path: str
    records: int
    status: str
    cache_path: str
    offsets: np.ndarray = field(compare=False, repr=False)


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
        return os.path.join(directory, f"{sha256}{_SUFFIX}")
    st = st if st is not None else os.stat(path)
    key = f"{os.path.abspath(path)}\0{st.st_size}\0{st.st_mtime_ns}".encode("utf-8", "surrogateescape")
    return os.path.join(directory, f"path-{hashlib.sha256(key).hexdigest()[:40]}{_SUFFIX}")


def has_cached_index(path: str, *, sha256: str | None = None, directory: str | None = None) -> bool:
    """Whether the cache holds a regular file under ``path``'s key (looked at, not opened or checked)."""
    try:
        return stat.S_ISREG(os.lstat(index_path(path, sha256=sha256, directory=directory)).st_mode)
    except (OSError, ValueError):
        return False


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


def _walk(path: str) -> tuple[np.ndarray, int]:
    """(record offsets, file size) of the regular file ``path``: see :func:`compute_offsets`."""
    start = time.perf_counter()
    with open_regular(path) as f:         # (a FIFO or device is only looked at: NotRegularFileError)
        size = os.fstat(f.fileno()).st_size
        if size == 0:
            return np.zeros(0, _DTYPE), 0
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
    offsets = np.concatenate(parts).astype(_DTYPE, copy=False)
    log.debug("walked the record headers of %s: %d records in %.3f s", path, len(offsets),
              time.perf_counter() - start)
    return offsets, size


def compute_offsets(path: str) -> np.ndarray:
    """The byte offset of every record of the uncompressed TFRecord file ``path`` (uint64, in order), from its
    record headers only. Raises ``IntegrityError`` (file and byte offset) at a header whose length CRC is
    wrong (a damaged file, or not an uncompressed TFRecord file: a GZIP shard fails at byte 0) or at a record
    the file ends inside, and ``NotRegularFileError`` (an ``OSError``) for anything but a regular file."""
    return _walk(os.fspath(path))[0]


def _cache_key(cpath: str) -> bytes:
    name = os.path.basename(cpath)
    return (name[:-len(_SUFFIX)] if name.endswith(_SUFFIX) else name).encode("utf-8", "surrogateescape")


def _digest(key: bytes, head: bytes, body: bytes) -> bytes:
    h = hashlib.sha256(head)
    h.update(key + b"\0")
    h.update(body)
    return h.digest()


def encode_index(cache_path: str, offsets: np.ndarray, shard_bytes: int) -> bytes:
    """The bytes of the cache file ``cache_path`` for ``offsets`` of a shard of ``shard_bytes`` bytes: the
    offsets, then the trailer (magic, count, shard size, sha256 over them and the cache key)."""
    body = np.asarray(offsets).astype(_DTYPE, copy=False).tobytes()
    head = _MAGIC + (len(body) // OFFSET_BYTES).to_bytes(8, "little") + int(shard_bytes).to_bytes(8, "little")
    return body + head + _digest(_cache_key(cache_path), head, body)


def _read_entry(cpath: str, limit: int) -> bytes | str | None:
    """The bytes of the cache file ``cpath`` (None: there is none), or why it cannot be used (a str). Opened
    without following a link and non-blocking: a FIFO or device planted there is never read."""
    try:
        fd = os.open(cpath, _READ_FLAGS | getattr(os, "O_NOFOLLOW", 0))
    except (FileNotFoundError, NotADirectoryError):        # (no cache directory: nothing cached)
        return None
    except OSError as exc:
        return "it is a symbolic link" if exc.errno == errno.ELOOP else f"it cannot be opened ({exc.strerror})"
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            return f"it is {file_kind(st.st_mode)}, not a regular file"
        if st.st_size > limit:
            return f"it is {st.st_size} bytes, more than an index of this shard can be ({limit})"
        os.set_blocking(fd, True)
        parts, left = [], limit + 1
        while left > 0 and (chunk := os.read(fd, min(left, 1 << 24))):
            parts.append(chunk)
            left -= len(chunk)
        return b"".join(parts)
    finally:
        os.close(fd)


def _decode(cpath: str, data: bytes, records: int | None, size: int) -> np.ndarray | str:
    """The offsets a cache file holds, or why they cannot be this shard's (a str)."""
    if len(data) < TRAILER_BYTES or (len(data) - TRAILER_BYTES) % OFFSET_BYTES:
        return f"its {len(data)} bytes are not an index with its trailer (an older tfpipe's, or cut short)"
    body, head, digest = data[:-TRAILER_BYTES], data[-TRAILER_BYTES:-32], data[-32:]
    n, made_for = int.from_bytes(head[8:16], "little"), int.from_bytes(head[16:24], "little")
    if head[:8] != _MAGIC:
        return "it has no index trailer (an older tfpipe's, or damaged)"
    if n * OFFSET_BYTES != len(body):
        return f"its trailer says {n} records, it holds {len(body) // OFFSET_BYTES}"
    if _digest(_cache_key(cpath), head, body) != digest:
        return "its checksum does not match its content (damaged, edited or moved from another key)"
    if made_for != size:
        return f"it was made for a file of {made_for} bytes, this one has {size}"
    if records is not None and n != records:
        return f"it lists {n} records, the manifest says {records}"
    offsets = np.frombuffer(body, _DTYPE)
    if n == 0:
        return offsets if size == 0 else "it lists no records"
    if offsets[0] != 0 or int(offsets[-1]) > size - _FRAME or (n > 1 and np.diff(offsets).min() < _FRAME):
        return "its offsets are not those of consecutive records (the first at 0, each 16 bytes or more apart)"
    return offsets


def _load(cpath: str, records: int | None, size: int) -> np.ndarray | str | None:
    """The checked offsets cached at ``cpath``, None when nothing is there, or why the entry is unusable."""
    most = size // _FRAME if records is None else records       # a record takes 16 bytes or more
    data = _read_entry(cpath, OFFSET_BYTES * most + TRAILER_BYTES)
    return _decode(cpath, data, records, size) if isinstance(data, bytes) else data


def _store(cpath: str, data: bytes) -> bool:
    directory = os.path.dirname(cpath)
    try:
        os.makedirs(directory, exist_ok=True)
        write_atomic(cpath, data)
        return True
    except OSError as exc:
        if directory not in _unwritable:
            _unwritable.add(directory)
            log.warning("cannot cache record-offset indexes in %s (%s): computing them at each use",
                        directory, exc.strerror or exc)
        return False


def ensure_index(path: str, *, records: int | None = None, sha256: str | None = None,
                 directory: str | None = None) -> IndexResult:
    """``path``'s index: found in the cache and checked, else computed and cached. ``records`` (the manifest's
    count) makes a cache file with another count unusable; a computed index with another count is not cached
    (the file is not the manifest's: one warning). ``path`` must be a regular file (``NotRegularFileError``)."""
    path = os.fspath(path)
    if records is not None and (isinstance(records, bool) or not isinstance(records, int) or records < 0):
        raise ValueError(f"records must be a count >= 0, got {records!r}")
    st = os.stat(path)
    if not stat.S_ISREG(st.st_mode):
        raise NotRegularFileError(errno.EINVAL, f"is {file_kind(st.st_mode)}, not a regular file", path)
    cpath = index_path(path, sha256=sha256, directory=directory, st=st)
    got = _load(cpath, records, st.st_size)
    if isinstance(got, np.ndarray):
        return IndexResult(path, len(got), "cached", cpath, got)
    if got is not None:
        log.warning("the record-offset index %s of %s is not used: %s; walking the file again", cpath, path, got)
    offsets, size = _walk(path)
    if records is not None and len(offsets) != records:
        log.warning("%s has %d records, its manifest says %d: the record-offset index is not cached",
                    path, len(offsets), records)
        return IndexResult(path, len(offsets), "uncached", cpath, offsets)
    status = "indexed" if _store(cpath, encode_index(cpath, offsets, size)) else "uncached"
    return IndexResult(path, len(offsets), status, cpath, offsets)


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
    when the index does not match the file (a cached entry is then removed, so the next use recomputes it)."""
    if isinstance(k, bool) or not isinstance(k, int) or k < 0:
        raise ValueError(f"k must be a record number >= 0, got {k!r}")
    path = os.fspath(path)
    try:
        res = ensure_index(path, records=records, sha256=sha256, directory=directory)
        offsets, n = res.offsets, res.records
        prev_k = min(k, n) - 1 if min(k, n) > 0 else None      # the record before k (the last one past the end)
        at = int(offsets[k]) if k < n else None
        prev = int(offsets[prev_k]) if prev_k is not None else None
        with open_regular(path) as f:
            size = os.fstat(f.fileno()).st_size
            why = _check(f.fileno(), size, n, prev, at, int(offsets[n - 1])) if n else (
                None if size == 0 else "it lists no records")
    except OSError as exc:     # (a damaged file is an IntegrityError, raised)
        log.warning("cannot index the record offsets of %s (%s): reading through its first %d records", path,
                    exc.strerror or exc, k)
        return None
    if why is None:
        return size if at is None else at
    log.warning("the record-offset index of %s (%s) does not match the file: %s; reading through its first %d "
                "records instead", path, res.cache_path, why, k)
    if res.status == "cached":
        try:
            os.unlink(res.cache_path)
        except OSError:
            pass
    return None
