"""Small generated data sets: Criteo-like LibSVM text and ready-made shard sets (samples, tests, benchmarks),
and sparse LibSVM text like the LIBSVM collection's (rows of any length, optionally with ``qid:``).

Criteo-like lines have ``field_size`` fields (13 numeric + the rest categorical for 39); ids are global
(each field owns a disjoint id range, so ids in a line are strictly increasing) and one-based.
"""
from __future__ import annotations

import os

import numpy as np

from .options import libsvm_schema

__all__ = ["criteo_arrays", "criteo_lines", "write_criteo_libsvm", "write_criteo_shards", "sparse_lines",
           "write_sparse_libsvm"]

NUMERIC_FIELDS = 13
CATEGORY_CARDINALITY = 10_000


def criteo_arrays(n: int, *, field_size: int = 39, seed: int = 0) -> dict[str, np.ndarray]:
    """Labels (0/1), zero-based ids [n, field_size] and values [n, field_size] (float32)."""
    rng = np.random.default_rng(seed)
    num = min(NUMERIC_FIELDS, field_size)
    ids = np.empty((n, field_size), dtype=np.int64)
    values = np.empty((n, field_size), dtype=np.float32)
    ids[:, :num] = np.arange(num)
    values[:, :num] = np.round(rng.exponential(0.05, (n, num)), 6).astype(np.float32)
    cat = field_size - num
    if cat:
        offsets = num + np.arange(cat, dtype=np.int64) * CATEGORY_CARDINALITY
        ids[:, num:] = offsets + rng.zipf(1.3, (n, cat)).clip(max=CATEGORY_CARDINALITY) - 1
        values[:, num:] = 1.0
    label = (rng.random(n) < 0.25).astype(np.float32)
    return {"label": label, "ids": ids, "values": values}


def criteo_lines(n: int, *, field_size: int = 39, seed: int = 0) -> bytes:
    """``n`` LibSVM lines (one-based ids, '\\n'-terminated) as bytes."""
    a = criteo_arrays(n, field_size=field_size, seed=seed)
    out = []
    num = min(NUMERIC_FIELDS, field_size)
    for i in range(n):
        parts = [str(int(a["label"][i]))]
        ids = a["ids"][i] + 1
        vals = a["values"][i]
        for j in range(field_size):
            v = vals[j]
            parts.append(f"{ids[j]}:{float(v):.6g}" if j < num else f"{ids[j]}:1")
        out.append(" ".join(parts))
    return ("\n".join(out) + "\n").encode("ascii")


def write_criteo_libsvm(path: str | os.PathLike, n: int, *, field_size: int = 39, seed: int = 0,
                        block: int = 50_000) -> int:
    """Write ``n`` Criteo-like lines to ``path`` (in blocks; bounded memory). Returns bytes written."""
    written = 0
    with open(path, "wb") as f:
        for start in range(0, n, block):
            data = criteo_lines(min(block, n - start), field_size=field_size, seed=seed + start)
            f.write(data)
            written += len(data)
    return written


def write_criteo_shards(out: str, n: int, *, field_size: int = 39, seed: int = 0, shard_bytes: int = 16 << 20,
                        compression: str | None = None, overwrite: bool = False, block: int = 100_000):
    """Write ``n`` Criteo-like records straight to a shard set (no text step). Returns the Manifest."""
    from ..shardset.manifest import InputStats
    from ..shardset.options import ShardOutputOptions
    from ..shardset.writer import ShardSetWriter
    from ..tfrecord.examples import serialize_batch

    schema = libsvm_schema(field_size)
    stats = InputStats(f"synthetic:criteo(seed={seed})")
    output = ShardOutputOptions(shard_size=shard_bytes, compression=compression)
    with ShardSetWriter(out, output, overwrite=overwrite) as w:
        for start in range(0, n, block):
            m = min(block, n - start)
            framed, lengths = serialize_batch(schema, criteo_arrays(m, field_size=field_size, seed=seed + start))
            w.write(framed, lengths)
            stats.records_read += m
            stats.records_written += m
        return w.finish(schema=schema, inputs=[stats], kind="libsvm",
                        options={"synthetic": True, "field_size": field_size, "seed": seed})


def sparse_lines(n: int, *, seed: int = 0, max_nonzeros: int = 150, max_index: int = 200_000, qid: bool = False
                 ) -> bytes:
    """``n`` sparse LibSVM lines (one-based, sorted unique ids up to ``max_index``; 0 to ``max_nonzeros``
    pairs per line; tf-idf-like values with 6 significant digits, some integers; labels +1/-1; with ``qid``
    a ``qid:N`` per line, ~20 lines per query) as bytes."""
    rng = np.random.default_rng(seed)
    counts = rng.integers(0, max_nonzeros + 1, n)
    out = []
    for i in range(n):
        ids = np.unique(rng.integers(1, max_index + 1, counts[i]))
        vals = rng.random(ids.size)
        ints = rng.random(ids.size) < 0.2
        parts = ["+1" if rng.random() < 0.5 else "-1"]
        if qid:
            parts.append(f"qid:{seed * 1_000_000 + i // 20}")
        parts += [f"{j}:1" if b else f"{j}:{v:.6g}" for j, v, b in zip(ids.tolist(), vals.tolist(), ints.tolist())]
        out.append(" ".join(parts))
    return ("\n".join(out) + "\n").encode("ascii")


def write_sparse_libsvm(path: str | os.PathLike, n: int, *, seed: int = 0, max_nonzeros: int = 150,
                        max_index: int = 200_000, qid: bool = False, block: int = 20_000) -> int:
    """Write ``n`` sparse lines (see ``sparse_lines``) to ``path`` in blocks. Returns bytes written."""
    written = 0
    with open(path, "wb") as f:
        for start in range(0, n, block):
            data = sparse_lines(min(block, n - start), seed=seed + start, max_nonzeros=max_nonzeros,
                                max_index=max_index, qid=qid)
            f.write(data)
            written += len(data)
    return written
