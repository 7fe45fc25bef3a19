"""The same rows in both record layouts, for ``tfpipe bench layout`` and the pipeline tests: an Example set and a
columnar set (``converters.tfrecord.columnar.encode_block`` blocks through the shard writer and its commit
path), ``shard_rows`` rows per shard in both. Until ``tfpipe convert --layout columnar`` / ``tfpipe reshard
--layout`` are on every branch, this is how a bench or a test gets a columnar set of known rows."""
from __future__ import annotations

import dataclasses
import os

import numpy as np

from converters.tfrecord.layout import DEFAULT_BLOCK_ROWS

__all__ = ["write_layout_sets", "write_columnar", "write_examples", "columns_layout"]


def columns_layout(columns: dict[str, np.ndarray], schema, block_rows: int):
    """The columnar layout of ``columns``: each feature's narrowest exact stored type (``stored_for``)."""
    from converters.tfrecord.columnar import ValueRange, stored_for
    from converters.tfrecord.layout import COLUMNAR, RecordLayout

    stored = {f.name: stored_for(f.dtype, ValueRange().add(columns[f.name])) for f in schema.features}
    return RecordLayout(COLUMNAR, block_rows, tuple(stored.items()))


def _counts(n: int, shard_rows) -> list[int]:
    if shard_rows is None:
        return [n]
    if isinstance(shard_rows, int):
        return [min(shard_rows, n - s) for s in range(0, n, shard_rows)]
    return list(shard_rows)


def write_columnar(out: str, columns: dict[str, np.ndarray], schema, *, block_rows: int = DEFAULT_BLOCK_ROWS, shard_rows=None,
                   compression: str | None = None, overwrite: bool = False):
    """``columns`` (one array per schema feature, rows first) as a columnar set; returns its Manifest."""
    from converters.shardset.commit import commit_set
    from converters.shardset.manifest import InputStats, Manifest, manifest_bytes
    from converters.shardset.options import ShardOutputOptions
    from converters.shardset.output import output_errors
    from converters.shardset.writer import ShardSetWriter
    from converters.tfrecord.columnar import encode_block
    from converters.tfrecord.crc import frame_payloads

    n = len(next(iter(columns.values())))
    layout = columns_layout(columns, schema, block_rows)
    counts = _counts(n, shard_rows)
    with ShardSetWriter(out, ShardOutputOptions(shard_size=1 << 50, compression=compression),
                        overwrite=overwrite) as w:
        start = 0
        for rows in counts:
            blocks = [encode_block({k: v[s:min(s + block_rows, start + rows)] for k, v in columns.items()},
                                   schema, layout) for s in range(start, start + rows, block_rows)]
            offsets = np.concatenate([[0], np.cumsum([len(b) for b in blocks])])
            framed, lengths = frame_payloads(np.frombuffer(b"".join(blocks), np.uint8), offsets)
            w.write(framed, lengths)
            w.close_shard()
            start += rows
        try:
            moves, shards = w.seal()
            shards = [dataclasses.replace(s, records=r) for s, r in zip(shards, counts)]   # records count rows
            manifest = Manifest(records=n, shards=tuple(shards), schema=schema, kind="libsvm", location=out,
                                inputs=(InputStats("synthetic:columnar", n, n),), options={"synthetic": True},
                                compression=w.compression, layout=layout)
            with output_errors(out):
                commit_set(w.storage, moves, manifest_bytes(manifest), run_id=w.run_id, where=out)
        except BaseException:
            w.abort()
            raise
        w.committed()
    return manifest


def write_examples(out: str, columns: dict[str, np.ndarray], schema, *, shard_rows=None, overwrite: bool = False):
    """The same rows as an Example set (one ``tf.train.Example`` per row); returns its Manifest."""
    from converters.shardset.manifest import InputStats
    from converters.shardset.options import ShardOutputOptions
    from converters.shardset.writer import ShardSetWriter
    from converters.tfrecord.examples import serialize_batch

    n = len(next(iter(columns.values())))
    with ShardSetWriter(out, ShardOutputOptions(shard_size=1 << 50), overwrite=overwrite) as w:
        start = 0
        for rows in _counts(n, shard_rows):
            framed, lengths = serialize_batch(schema, {k: v[start:start + rows] for k, v in columns.items()})
            w.write(framed, lengths)
            w.close_shard()
            start += rows
        return w.finish(schema=schema, inputs=[InputStats("synthetic:example", n, n)], kind="libsvm",
                        options={"synthetic": True})


def write_layout_sets(root: str, columns: dict[str, np.ndarray], schema, *, block_rows: int = DEFAULT_BLOCK_ROWS,
                      shard_rows=None) -> tuple[str, str]:
    """``root/example`` and ``root/columnar``: the same rows in both layouts. Returns their paths."""
    ex, col = os.path.join(root, "example"), os.path.join(root, "columnar")
    write_examples(ex, columns, schema, shard_rows=shard_rows)
    write_columnar(col, columns, schema, block_rows=block_rows, shard_rows=shard_rows)
    return ex, col
