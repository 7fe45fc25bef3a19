"""The tf.data source of a streamed remote set (``pipeline.remote.stream.ReadAhead``): ``from_generator`` yields
``(path, ticket)`` — one Python call per shard — then ``flat_map`` (one file at a time) or a sequential
``interleave`` of ``TFRecordDataset`` (each file with its own prefetch, so they are read side by side); after a
file's last record a one-element tail calls ``release(ticket)`` (again once per shard), so a shard stays leased
exactly while TensorFlow may read it. Nothing runs in Python per record."""
from __future__ import annotations

from ..remote.stream import STREAMS, ReadAhead, check_cache_limit, open_width

__all__ = ["stream_source", "released_after"]


def released_after(stream, records, ticket):
    """``records`` (of one leased file; scalars or vectors of records) followed by nothing but the call of
    ``stream.release(ticket)`` once they have all been read: the lease lasts exactly while TensorFlow may read
    the file (one Python call per shard)."""
    import tensorflow as tf

    def release(t):
        stream.release(int(t.numpy()))
        return t

    spec = records.element_spec
    empty = tf.zeros([0 if d is None else d for d in spec.shape.as_list()], spec.dtype)
    tail = tf.data.Dataset.from_tensors(ticket).map(lambda t: tf.py_function(release, [t], tf.int64))
    return records.concatenate(tail.filter(lambda t: False).map(lambda t: empty))


def stream_source(spec, config, shuffle_files: bool):
    """The File-mode source of a streamed spec: records (``batched`` False) or per-file chunks of records
    (``batched`` True), like ``build._file_source``, over local paths handed out as shards become ready."""
    import tensorflow as tf

    opts = spec.stream
    width = open_width(config.read, config.parallelism)
    check_cache_limit(opts, [s.bytes for s in opts.shards], width)
    stream = ReadAhead(opts, width=width, seed=spec.seed, shuffle=shuffle_files)
    stream.storage  # noqa: B018 - opened now (credentials, client) rather than on the first shard's clock
    ctype = spec.compression_type
    batched = config.read == "interleave"
    chunk = config.chunk_records or spec.batch_size

    def per_file(path, ticket):
        recs = tf.data.TFRecordDataset(path, ctype, config.buffer_size)
        if batched:  # a prefetch per file: the cycle's files are read side by side
            recs = recs.batch(chunk).prefetch(1)
        return released_after(stream, recs, ticket)

    sig = (tf.TensorSpec([], tf.string), tf.TensorSpec([], tf.int64))
    paths = tf.data.Dataset.from_generator(stream.session, output_signature=sig)
    if width == 1:
        ds = paths.flat_map(per_file)
    else:
        # not a parallel interleave: that one pulls future paths while holding a lock the running files
        # need, and it would hold more than `width` files; a slot takes its next path only after its file ended
        ds = paths.interleave(per_file, cycle_length=width, block_length=1)
    STREAMS.add(stream)
    return ds, batched
