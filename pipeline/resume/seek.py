"""Where to enter a TFRecord file to read it from record ``k``: a byte offset from the file's record-offset
index (``pipeline.resume.offsets``), or ``None`` to read through the ``k`` records before it. The source that
opens a file at that offset is ``pipeline.graph.seeksource``.

TensorFlow's ``TFRecordDataset(path).skip(k)`` reads every byte before record ``k`` whenever the records are
smaller than its read buffer (8 MiB): a 1 GiB shard entered near its end costs seconds from the page cache and
far more from disk. An uncompressed local file is instead entered at record ``k``'s byte offset, looked up in
its index (computed once, cached, checked against the file before use), by TensorFlow's ``TFRecordDatasetV2``
op, whose ``byte_offsets`` input seeks.

It reads through when the op is missing from this TensorFlow (found by looking for it, not by version), for
GZIP/ZLIB files (an offset into compressed data means nothing), for remote files (``s3://``: not indexed) and
when the index cannot be made or does not match the file (one warning). Either way the records are byte for
byte those of ``TFRecordDataset(path).skip(k)``.
"""
from __future__ import annotations

import logging
import os

from converters.util.checks import as_int

from .offsets import has_cached_index, offset_of
from ..plan.readplan import DEFAULT_BUFFER_BYTES

__all__ = ["entry_offset", "check_entry", "has_seek_op", "seek_pays", "SKIP_BELOW_BYTES"]

log = logging.getLogger(__name__)

_COMPRESSION = {"": "", "NONE": "", "GZIP": "GZIP", "ZLIB": "ZLIB"}

# Below this many bytes before the entry point, reading through them (TensorFlow's ``skip``, ~0.7 GB/s from the
# page cache) costs less than a first index walk (loading numba and its kernel: ~1 s once per process), so an
# index is built only for deeper entries or used when already cached (``tfpipe pipeline offsets SET``).
SKIP_BELOW_BYTES = 256 << 20


def has_seek_op() -> bool:
    """Whether this TensorFlow has the ``TFRecordDatasetV2`` op (a ``byte_offsets`` input per file)."""
    from tensorflow.python.ops import gen_dataset_ops

    return hasattr(gen_dataset_ops, "tf_record_dataset_v2")


def check_entry(path, k, compression_type, buffer_size, records) -> tuple[str, int, str, int]:
    """``(path, k, compression type, buffer bytes)`` checked: a ``ValueError`` naming the bad value."""
    path = os.fspath(path)
    k = as_int(k, "k", minimum=0, must="a record number >= 0")
    records = as_int(records, "records", minimum=0, none=True, must="the file's record count (>= 0) or None")
    if records is not None and k > records:
        raise ValueError(f"k={k} is past the end of {path}, which has {records} records")
    ctype = _COMPRESSION.get(str(compression_type or "").upper())
    if ctype is None:
        raise ValueError(f"compression_type must be '', 'GZIP' or 'ZLIB', got {compression_type!r}")
    buf = DEFAULT_BUFFER_BYTES if buffer_size is None else buffer_size
    if isinstance(buf, bool) or not isinstance(buf, int) or buf < 0:
        raise ValueError(f"buffer_size must be bytes >= 0 (0: no buffering) or None, got {buffer_size!r}")
    return path, k, ctype, buf


def entry_offset(path: str, k: int, *, compressed: bool, records: int | None = None, sha256: str | None = None,
                 index_dir: str | None = None) -> int | None:
    """The byte offset at which record ``k`` (> 0) of ``path`` starts, or ``None``: read through the ``k``
    records before it (compressed, remote, no seek op here, or no index that matches the file)."""
    if compressed:
        log.debug("%s: compressed records cannot be entered by byte offset: skipping %d records", path, k)
        return None
    if "://" in path:
        log.debug("%s: a remote file is not indexed: skipping %d records", path, k)
        return None
    if not has_seek_op():
        log.debug("this TensorFlow has no TFRecordDatasetV2 op: skipping %d records of %s", k, path)
        return None
    offset = offset_of(path, k, records=records, sha256=sha256, directory=index_dir)
    if offset is not None:
        log.debug("%s: entering record %d at byte %d", path, k, offset)
    return offset


def seek_pays(path: str, k: int, records: int | None, sha256: str | None = None) -> bool:
    """Whether entering the local file ``path`` at record ``k`` should seek by its record-offset index: the
    index is cached (under ``sha256`` when given), or more than ``SKIP_BELOW_BYTES`` precede record ``k``."""
    try:
        cached = has_cached_index(path, sha256=sha256)
        before = os.path.getsize(path) * k // records if records else os.path.getsize(path)
    except (OSError, ValueError):
        return True                              # let the seek report or fall back
    return cached or before >= SKIP_BELOW_BYTES
