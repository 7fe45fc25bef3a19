"""The resumable order over a streamed remote set (``resumable=True`` with ``s3://...``,
``stream_cache_dir``, ``stream_cache_limit``): the same global order as a local copy of the set (``pipeline.graph.resumable``), its files fetched
through the host's stream cache (``pipeline.remote.stream``) in that order.

Each epoch's file order is planned by ``pipeline.graph.resumable`` and handed to ``ReadAhead.session(order, start)``,
so a resume fetches only the shards from its entry point on: the shards before it are never downloaded. The
shard entered in the middle is fetched whole (checked like every shard) and then entered at its record ``k``
by a seek when its record-offset index is cached (``tfpipe pipeline offsets`` on a copy, or an earlier
resume on this host: indexes are named by the shard's sha256) or many bytes precede ``k``
(``seek.seek_pays``), else read through (``skip``). The cache, its limit, its sharing by the host's ranks
and the leases are the stream's own: one file is read at a time (``width`` 1), ``read_ahead`` ahead.
"""
from __future__ import annotations

import contextlib

from ..spec.blocks import file_record_counts

__all__ = ["StreamedShards", "entry"]


def entry(path: str, k: int, records: int, sha256: str, compressed: bool) -> tuple[int, int]:
    """(byte offset, records to skip after it) to read the fetched shard ``path`` from its record ``k``."""
    from ..resume.seek import entry_offset, seek_pays

    if k <= 0 or compressed or not seek_pays(path, k, records, sha256):
        return 0, max(0, k)
    offset = entry_offset(path, k, compressed=False, records=records, sha256=sha256)
    return (0, k) if offset is None else (offset, 0)


class StreamedShards:
    """The files of a resumable streamed spec, fetched in a planned order through the host's stream cache."""

    def __init__(self, spec):
        from ..remote.stream import STREAMS, ReadAhead, check_cache_limit

        opts = spec.stream
        check_cache_limit(opts, [s.bytes for s in opts.shards], 1)
        self.spec = spec
        self.stream = ReadAhead(opts, width=1, seed=spec.seed, shuffle=False)
        self.stream.storage  # noqa: B018 - opened now (credentials, client), not on the first shard's clock
        STREAMS.add(self.stream)

    def _files(self, order, start, k):
        """Generator of (local path, ticket, byte offset, records to skip) for ``order[start:]``."""
        refs, counts = self.spec.stream.shards, file_record_counts(self.spec)     # records: a columnar set's blocks
        order, start, k = [int(i) for i in order], int(start), int(k)
        with contextlib.closing(self.stream.session(order=order, start=start)) as files:
            for n, (path, ticket) in enumerate(files):
                f = order[start + n]
                offset, skip = (entry(path.decode(), k, counts[f], refs[f].sha256, self.spec.compression == "gzip")
                                if n == 0 else (0, 0))
                yield path, ticket, offset, skip

    def records(self, order, start: int = 0, k: int = 0, chunk: int = 0):
        """The records of the files ``order[start:]`` (file numbers; a tensor is fine), the first from its
        record ``k``, each file fetched before TensorFlow opens it; with ``chunk``, in vectors of up to
        ``chunk`` records of one file each."""
        import tensorflow as tf

        from ..plan.readplan import DEFAULT_BUFFER_BYTES
        from ..resume.seek import has_seek_op
        from .seeksource import records_at
        from .streamsource import released_after

        ctype = "GZIP" if self.spec.compression == "gzip" else ""
        buf = self.spec.buffer_size or DEFAULT_BUFFER_BYTES
        seek = not ctype and has_seek_op()
        sig = (tf.TensorSpec([], tf.string), *(tf.TensorSpec([], tf.int64),) * 3)
        args = (tf.cast(order, tf.int64), tf.constant(start, tf.int64), tf.constant(k, tf.int64))
        files = tf.data.Dataset.from_generator(self._files, args=args, output_signature=sig)

        def per_file(path, ticket, offset, skip):
            recs = records_at(path, offset, buf) if seek else tf.data.TFRecordDataset(path, ctype, buf)
            recs = recs.skip(skip)
            return released_after(self.stream, recs.batch(chunk) if chunk else recs, ticket)

        return files.flat_map(tf.autograph.experimental.do_not_convert(per_file))

    def read_from(self, order: list[int], start: int):
        """The records of the epoch whose files come in ``order`` (Python ints), from its record ``start``."""
        from ..spec.blocks import locate

        j, k = locate([self.spec.file_records[f] for f in order], start)
        return self.records(order, j, k)
