"""Shared by the pipeline tests until the columnar converters land: a columnar shard set written from NumPy
columns with ``encode_block`` and the shard writer (``converters.shardset.writer``), rows counted per shard."""
from __future__ import annotations

import dataclasses

import numpy as np

from converters.libsvm.options import libsvm_schema
from converters.shardset.manifest import InputStats
from converters.shardset.options import ShardOutputOptions
from converters.shardset.writer import ShardSetWriter
from converters.tfrecord.columnar import ValueRange, encode_block, stored_for
from converters.tfrecord.crc import frame_payloads
from converters.tfrecord.examples import serialize_batch
from converters.tfrecord.layout import RecordLayout

FIELDS = 3


def indexed_columns(n: int, fields: int = FIELDS) -> dict[str, np.ndarray]:
    """Rows whose label is their index (as in ``pipeline_data.write_indexed_set``)."""
    idx = np.arange(n, dtype=np.int64)
    return {"label": idx.astype(np.float32), "ids": idx[:, None] + np.arange(fields, dtype=np.int64),
            "values": (idx[:, None] % 7 + np.arange(fields)).astype(np.float32) / 4}


def layout_for(columns: dict[str, np.ndarray], schema, block_rows: int) -> RecordLayout:
    stored = {f.name: stored_for(f.dtype, ValueRange().add(columns[f.name])) for f in schema.features}
    return RecordLayout("columnar", block_rows, tuple(stored.items()))


def write_columnar_set(out, columns: dict[str, np.ndarray], *, block_rows: int = 16, shard_rows=None,
                       schema=None, compression=None):
    """``columns`` (every feature of ``schema``, default a LibSVM schema of their width) as a columnar set:
    ``shard_rows`` rows per shard (one int, or a list of counts; default one shard), blocks of ``block_rows``
    (each shard's last block shorter). Returns the Manifest."""
    n = len(columns["label"])
    schema = schema or libsvm_schema(columns["ids"].shape[1])
    layout = layout_for(columns, schema, block_rows)
    if shard_rows is None:
        counts = [n]
    elif isinstance(shard_rows, int):
        counts = [min(shard_rows, n - s) for s in range(0, n, shard_rows)]
    else:
        counts = list(shard_rows)
    with ShardSetWriter(str(out), ShardOutputOptions(shard_size=1 << 40, compression=compression)) as w:
        start = 0
        for rows in counts:
            blocks = [encode_block({k: v[s:min(s + block_rows, start + rows)] for k, v in columns.items()},
                                   schema, layout) for s in range(start, start + rows, block_rows)]
            offsets = np.concatenate([[0], np.cumsum([len(b) for b in blocks])])
            framed, lengths = frame_payloads(np.frombuffer(b"".join(blocks), np.uint8), offsets)
            w.write(framed, lengths)
            w.close_shard()
            start += rows
        w._done = [(tmp, rows, nbytes, sha) for (tmp, _, nbytes, sha), rows in zip(w._done, counts)]
        w.records = n   # records count rows; the writer's manifest gets the layout
        w.manifest = lambda shards, **kw: dataclasses.replace(ShardSetWriter.manifest(w, shards, **kw),
                                                              layout=layout)
        return w.finish(schema=schema, inputs=[InputStats("synthetic:columnar", n, n)], kind="libsvm",
                        options={"indexed": True})


def write_example_set(out, columns: dict[str, np.ndarray], *, shard_rows=None, schema=None):
    """The same rows as an example-layout set (one tf.train.Example per row)."""
    n = len(columns["label"])
    schema = schema or libsvm_schema(columns["ids"].shape[1])
    counts = [n] if shard_rows is None else [min(shard_rows, n - s) for s in range(0, n, shard_rows)]
    with ShardSetWriter(str(out), ShardOutputOptions(shard_size=1 << 40)) as w:
        start = 0
        for rows in counts:
            framed, lengths = serialize_batch(schema, {k: v[start:start + rows] for k, v in columns.items()})
            w.write(framed, lengths)
            w.close_shard()
            start += rows
        return w.finish(schema=schema, inputs=[InputStats("synthetic:example", n, n)], kind="libsvm",
                        options={"indexed": True})
