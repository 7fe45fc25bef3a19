"""The same rows in both record layouts, for ``tfpipe bench layout`` and the pipeline tests: an Example set and a
columnar set (the converters' block encoder through the shard writer), ``shard_rows`` rows per shard in both:
how a bench or a test gets both layouts of the same known rows without converting text."""
from __future__ import annotations

import os

import numpy as np

from converters.tfrecord.layout import DEFAULT_BLOCK_ROWS

__all__ = ["write_layout_sets", "write_columnar", "write_examples", "columns_layout"]


def columns_layout(columns: dict[str, np.ndarray], schema, block_rows: int):
    """The columnar layout of ``columns``: each feature's narrowest exact stored type (``blocks.choose_layout``)."""
    from converters.shardset.blocks import choose_layout, column_ranges

    return choose_layout(schema, column_ranges(columns), block_rows)


def _counts(n: int, shard_rows) -> list[int]:
    if shard_rows is None:
        return [n]
    if isinstance(shard_rows, int):
        return [min(shard_rows, n - s) for s in range(0, n, shard_rows)]
    return list(shard_rows)


def write_columnar(out: str, columns: dict[str, np.ndarray], schema, *, block_rows: int = DEFAULT_BLOCK_ROWS, shard_rows=None,
                   compression: str | None = None, overwrite: bool = False):
    """``columns`` (one array per schema feature, rows first) as a columnar set, through the converters' block
    encoder (``shardset.blocks.Blocks``) and the shard writer; returns its Manifest."""
    from converters.shardset.blocks import Blocks
    from converters.shardset.manifest import InputStats
    from converters.shardset.options import ShardOutputOptions
    from converters.shardset.writer import ShardSetWriter

    n = len(next(iter(columns.values())))
    layout = columns_layout(columns, schema, block_rows)
    with ShardSetWriter(out, ShardOutputOptions(shard_size=1 << 50, compression=compression),
                        overwrite=overwrite) as w:
        start = 0
        for rows in _counts(n, shard_rows):
            blocks = Blocks(schema, layout)   # a fresh one per shard: every shard ends in its own short block
            part = {k: v[start:start + rows] for k, v in columns.items()}
            for framed, lengths, per_block in (*blocks.add(part), *blocks.finish()):
                w.write(framed, lengths, rows=per_block)
            w.close_shard()
            start += rows
        return w.finish(schema=schema, inputs=[InputStats("synthetic:columnar", n, n)], kind="libsvm",
                        options={"synthetic": True}, layout=layout)


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
