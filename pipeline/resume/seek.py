"""``records_from(path, k)``: the records of one TFRecord file from record ``k``, without reading the ``k``
records before it where that is possible.

``tf.data.TFRecordDataset(path).skip(k)`` reads every byte before record ``k`` whenever the records are
smaller than its read buffer (8 MiB): a 1 GiB shard entered near its end costs seconds from the page cache and
far more from disk. For an uncompressed file, ``records_from`` instead looks up record ``k``'s byte offset in
the file's record-offset index (``pipeline.resume.offsets``: computed once, cached, checked against the file before
use) and opens the file there with TensorFlow's ``TFRecordDatasetV2`` op, whose ``byte_offsets`` input seeks.

It reads through (``.skip(k)``) when the op is missing from this TensorFlow (found by looking for it, not by
version), for GZIP/ZLIB files (an offset into compressed data means nothing), for remote files (``s3://``:
not indexed) and when the index cannot be made or does not match the file (one warning). Either way the
records are byte for byte those of ``TFRecordDataset(path).skip(k)``.

The op is wrapped in a one-element ``flat_map``: TensorFlow serializes a dataset made at the top level when it
builds an iterator, and ``TFRecordDatasetV2``'s serialization leaves out the ``byte_offsets`` input (the
iterator then fails to build); built inside a function, the op's node keeps its four inputs.
"""
from __future__ import annotations

import logging
import os

from converters.util.checks import as_int

from .offsets import has_cached_index, offset_of
from ..plan.readplan import DEFAULT_BUFFER_BYTES

__all__ = ["records_from", "records_at", "has_seek_op", "seek_pays", "SKIP_BELOW_BYTES"]

log = logging.getLogger(__name__)

_COMPRESSION = {"": "", "NONE": "", "GZIP": "GZIP", "ZLIB": "ZLIB"}
_classes: dict[str, type] = {}

# Below this many bytes before the entry point, reading through them (TensorFlow's ``skip``, ~0.7 GB/s from the
# page cache) costs less than a first index walk (loading numba and its kernel: ~1 s once per process), so an
# index is built only for deeper entries or used when already cached (``tfpipe pipeline offsets SET``).
SKIP_BELOW_BYTES = 256 << 20


def has_seek_op() -> bool:
    """Whether this TensorFlow has the ``TFRecordDatasetV2`` op (a ``byte_offsets`` input per file)."""
    from tensorflow.python.ops import gen_dataset_ops

    return hasattr(gen_dataset_ops, "tf_record_dataset_v2")


def _source_class() -> type:
    """A ``DatasetSource`` over ``TFRecordDatasetV2`` (defined on first use: TensorFlow is imported lazily)."""
    if "source" not in _classes:
        import tensorflow as tf
        from tensorflow.python.data.ops import dataset_ops
        from tensorflow.python.ops import gen_dataset_ops

        class _SeekingTFRecordDataset(dataset_ops.DatasetSource):
            """The records of one uncompressed TFRecord file from byte ``offset`` (a record's start)."""

            def __init__(self, filename, offset, buffer_size):
                self._name = None
                variant = gen_dataset_ops.tf_record_dataset_v2(
                    tf.reshape(tf.convert_to_tensor(filename, tf.string), [1]), tf.constant("", tf.string),
                    tf.convert_to_tensor(buffer_size, tf.int64),
                    tf.reshape(tf.convert_to_tensor(offset, tf.int64), [1]),
                    metadata=self._metadata.SerializeToString())
                super().__init__(variant)

            @property
            def element_spec(self):
                return tf.TensorSpec([], tf.string)

        _classes["source"] = _SeekingTFRecordDataset
    return _classes["source"]


def _seek(path: str, offset: int, buffer_size: int):
    import tensorflow as tf

    source = _source_class()
    start = tf.data.Dataset.from_tensors((tf.constant(path, tf.string), tf.constant(offset, tf.int64)))
    # (no autograph: converting this one-line function would cost more than the rest of the first element)
    return start.flat_map(tf.autograph.experimental.do_not_convert(lambda name, at: source(name, at, buffer_size)))


def records_at(path, offset, buffer_size: int):
    """The records of an uncompressed TFRecord file from byte ``offset`` (a record's start; ``path`` and
    ``offset`` may be tensors). Only inside a dataset function (``flat_map``, ...): see the module docstring;
    needs :func:`has_seek_op`."""
    return _source_class()(path, offset, buffer_size)


def _check_args(path, k, compression_type, buffer_size, records) -> tuple[str, str, int]:
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
    return path, ctype, buf


def records_from(path: str, k: int, *, compression_type: str = "", buffer_size: int | None = None,
                 records: int | None = None, sha256: str | None = None, index_dir: str | None = None):
    """A ``tf.data.Dataset`` of the records of the TFRecord file ``path`` from record ``k`` (0-based): the
    elements of ``TFRecordDataset(path, compression_type, buffer_size).skip(k)``, reached by a seek.

    ``records`` (the file's record count, from the manifest) and ``sha256`` (its digest, from the manifest)
    are optional: with them the index is cached under the shard's digest and a cache file of the wrong size
    is never read; ``k == records`` gives an empty dataset without touching the file, ``k > records`` is a
    ``ValueError``. ``index_dir``: where indexes are cached (default ``pipeline.resume.offsets.index_dir()``). The
    first call for a file computes its index (a walk over its record headers); later calls, in this process
    or another, read two or three of its entries.
    """
    path, ctype, buf = _check_args(path, k, compression_type, buffer_size, records)
    import tensorflow as tf

    def plain():
        return tf.data.TFRecordDataset(path, ctype, buf)

    if k == 0:
        return plain()
    if records is not None and k == records:
        return plain().take(0)
    if ctype:
        log.debug("%s: %s records cannot be entered by byte offset: skipping %d records", path, ctype, k)
        return plain().skip(k)
    if "://" in path:
        log.debug("%s: a remote file is not indexed: skipping %d records", path, k)
        return plain().skip(k)
    if not has_seek_op():
        log.debug("this TensorFlow has no TFRecordDatasetV2 op: skipping %d records of %s", k, path)
        return plain().skip(k)
    offset = offset_of(path, k, records=records, sha256=sha256, directory=index_dir)
    if offset is None:
        return plain().skip(k)
    log.debug("%s: entering record %d at byte %d", path, k, offset)
    return _seek(path, offset, buf)


def seek_pays(path: str, k: int, records: int | None, sha256: str | None = None) -> bool:
    """Whether entering the local file ``path`` at record ``k`` should seek by its record-offset index: the
    index is cached (under ``sha256`` when given), or more than ``SKIP_BELOW_BYTES`` precede record ``k``."""
    try:
        cached = has_cached_index(path, sha256=sha256)
        before = os.path.getsize(path) * k // records if records else os.path.getsize(path)
    except (OSError, ValueError):
        return True                              # let the seek report or fall back
    return cached or before >= SKIP_BELOW_BYTES
