"""``records_from(path, k)``: the records of one TFRecord file from record ``k``, entered at its byte offset
where ``pipeline.resume.seek`` finds one, else read through (``skip``): byte for byte the elements of
``TFRecordDataset(path).skip(k)`` either way.

The seeking source is TensorFlow's ``TFRecordDatasetV2`` op, whose ``byte_offsets`` input seeks. It is wrapped
in a one-element ``flat_map``: TensorFlow serializes a dataset made at the top level when it builds an
iterator, and ``TFRecordDatasetV2``'s serialization leaves out the ``byte_offsets`` input (the iterator then
fails to build); built inside a function, the op's node keeps its four inputs.
"""
from __future__ import annotations

from ..resume.seek import check_entry, entry_offset

__all__ = ["records_from", "records_at"]

_classes: dict[str, type] = {}


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
    needs ``pipeline.resume.seek.has_seek_op``."""
    return _source_class()(path, offset, buffer_size)


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
    path, k, ctype, buf = check_entry(path, k, compression_type, buffer_size, records)
    import tensorflow as tf

    def plain():
        return tf.data.TFRecordDataset(path, ctype, buf)

    if k == 0:
        return plain()
    if records is not None and k == records:
        return plain().take(0)
    offset = entry_offset(path, k, compressed=bool(ctype), records=records, sha256=sha256, index_dir=index_dir)
    return plain().skip(k) if offset is None else _seek(path, offset, buf)
