"""Shared by the pipeline tests: the same identifiable rows (label = row index) as an Example set and as a
columnar set (``bench.core.layoutsets``, which writes through ``encode_block`` and the shard writer until the
columnar converters are on every branch)."""
from __future__ import annotations

import numpy as np

from bench.core.layoutsets import write_columnar, write_examples
from converters.libsvm.options import libsvm_schema

FIELDS = 3


def indexed_columns(n: int, fields: int = FIELDS) -> dict[str, np.ndarray]:
    """Rows whose label is their index (as in ``pipeline_data.write_indexed_set``)."""
    idx = np.arange(n, dtype=np.int64)
    return {"label": idx.astype(np.float32), "ids": idx[:, None] + np.arange(fields, dtype=np.int64),
            "values": (idx[:, None] % 7 + np.arange(fields)).astype(np.float32) / 4}


def write_columnar_set(out, columns: dict[str, np.ndarray], *, block_rows: int = 16, shard_rows=None,
                       schema=None, compression=None):
    """``columns`` as a columnar set (blocks of ``block_rows``, ``shard_rows`` rows per shard); its Manifest."""
    schema = schema or libsvm_schema(columns["ids"].shape[1])
    return write_columnar(str(out), columns, schema, block_rows=block_rows, shard_rows=shard_rows,
                          compression=compression)


def write_example_set(out, columns: dict[str, np.ndarray], *, shard_rows=None, schema=None):
    """The same rows as an example-layout set (one tf.train.Example per row)."""
    schema = schema or libsvm_schema(columns["ids"].shape[1])
    return write_examples(str(out), columns, schema, shard_rows=shard_rows)
