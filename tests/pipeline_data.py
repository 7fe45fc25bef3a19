"""Shared by the pipeline tests: small shard sets whose records are identifiable (label = record index)."""
from __future__ import annotations

import contextlib
import os

import numpy as np

from converters.libsvm.options import libsvm_schema
from converters.shardset.manifest import InputStats
from converters.shardset.options import ShardOutputOptions
from converters.shardset.writer import ShardSetWriter
from converters.tfrecord.examples import serialize_batch

FIELDS = 3


def write_indexed_set(out, n: int, *, shard_bytes: int = 8 << 10, compression=None):
    """``n`` records with label = float(index), ids = [index, index+1, index+2]; returns the Manifest."""
    schema = libsvm_schema(FIELDS)
    idx = np.arange(n, dtype=np.int64)
    arrays = {"label": idx.astype(np.float32), "ids": idx[:, None] + np.arange(FIELDS, dtype=np.int64),
              "values": np.ones((n, FIELDS), dtype=np.float32)}
    framed, lengths = serialize_batch(schema, arrays)
    stats = InputStats("synthetic:indexed", records_read=n, records_written=n)
    with ShardSetWriter(str(out), ShardOutputOptions(shard_size=shard_bytes, compression=compression)) as w:
        w.write(framed, lengths)
        return w.finish(schema=schema, inputs=[stats], kind="libsvm", options={"indexed": True})


def labels_of(dataset) -> list[int]:
    """Record indices (labels) in the order ``dataset`` yields them (keras output)."""
    out: list[int] = []
    for features, label in dataset:
        out.extend(int(x) for x in label.numpy())
    return out


def batches_of(dataset) -> list[list[int]]:
    return [[int(x) for x in label.numpy()] for _, label in dataset]


def cache_bytes(cache_dir: str) -> int:
    """Bytes of all regular files under ``cache_dir`` (what a disk-usage check sees, directories aside)."""
    total = 0
    for root, _, files in os.walk(cache_dir):
        for f in files:
            with contextlib.suppress(OSError):
                total += os.lstat(os.path.join(root, f)).st_size
    return total


def partial_files(cache_dir: str) -> list[str]:
    """Names of the stream cache's downloads in progress (or left by dead readers) in ``cache_dir``."""
    from pipeline.remote.streamcache import CACHE_SUBDIR, PART_PREFIX

    try:
        return sorted(n for n in os.listdir(os.path.join(cache_dir, CACHE_SUBDIR, "data")) if n.startswith(PART_PREFIX))
    except FileNotFoundError:
        return []
