"""Rows -> the target's columns: numeric transform, categorical ids (vocabulary lookup or Keras ``Hashing``
bins), DeepFM's global ids or DLRM's per-column ids (a compact form pass 1 keeps, ``expand``ed when a shard is
written), and seeded negative downsampling."""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .rows import Rows

__all__ = ["Tables", "numeric_values", "hash_bins", "encode", "id_offsets", "expand", "keep_mask"]


@dataclass(frozen=True)
class Tables:
    """Per categorical column its table size (``V + 1`` with a vocabulary, ``N`` with ``--hash-buckets N``), and
    per numeric column the min/max the ``minmax`` transform uses."""

    sizes: tuple[int, ...]
    mins: tuple[float, ...] = ()
    maxs: tuple[float, ...] = ()

    def offsets(self, numeric: int) -> np.ndarray:
        """DeepFM: the first global id of each categorical column (``numeric + sum of earlier table sizes``)."""
        return numeric + np.concatenate([[0], np.cumsum(self.sizes, dtype=np.int64)[:-1]]).astype(np.int64)

    def feature_size(self, numeric: int) -> int:
        return int(numeric + sum(self.sizes))


def numeric_values(rows: Rows, mode: str, tables: Tables) -> np.ndarray:
    """float32 (n, numeric): missing or negative -> 0, then log1p (float64), or min-max scaling."""
    v = np.where(rows.missing | (rows.nums < 0), 0, rows.nums).astype(np.float64)
    if mode == "log1p":
        return np.log1p(v).astype(np.float32)
    lo = np.asarray(tables.mins, np.float64)
    span = np.asarray(tables.maxs, np.float64) - lo
    safe = np.where(span > 0, span, 1.0)
    return np.where(span > 0, (v - lo) / safe, 0.0).astype(np.float32)


def hash_bins(column: np.ndarray, buckets: int) -> np.ndarray:
    """``tf.keras.layers.Hashing(num_bins=buckets)`` of the values (``tf.strings.to_hash_bucket_fast``:
    FarmHash Fingerprint64 mod N), the empty string included; a value's trailing NUL bytes are not part of it
    (``column`` is fixed-width bytes), as in the vocabularies."""
    import tensorflow as tf

    return tf.strings.to_hash_bucket_fast(tf.constant(column), buckets).numpy().astype(np.int64)


def encode(rows: Rows, mode: str, tables: Tables, sparse: np.ndarray) -> dict[str, np.ndarray]:
    """The rows in their compact form, what pass 1 keeps: ``label`` float32, ``dense`` float32 (n, numeric), and
    ``sparse`` as given: (n, categorical) ids in the target's numbering (each column's ids plus its
    ``id_offsets``: DeepFM's global ids, DLRM's per-column ids). ``expand`` makes the target's columns."""
    return {"label": rows.labels.astype(np.float32), "dense": numeric_values(rows, mode, tables), "sparse": sparse}


def id_offsets(target: str, tables: Tables, numeric: int) -> np.ndarray:
    """What each categorical column adds to its ids in the target: DeepFM its first global id, DLRM nothing."""
    if target == "deepfm":
        return tables.offsets(numeric)
    return np.zeros(len(tables.sizes), np.int64)


def expand(compact: dict[str, np.ndarray], target: str) -> dict[str, np.ndarray]:
    """The target's columns of rows in compact form: DLRM ``dense``/``sparse``/``label`` (a side without
    columns left out); DeepFM ``ids`` (0..numeric - 1, then the global ids) and ``values`` (the numeric
    values, then 1.0 for every categorical field) and ``label``."""
    label, dense, sparse = compact["label"], compact["dense"], compact["sparse"]
    if target == "dlrm":
        return ({"label": label} | ({"dense": dense} if dense.shape[1] else {})
                | ({"sparse": sparse.astype(np.int64, copy=False)} if sparse.shape[1] else {}))
    n, k = dense.shape
    gid = np.empty((n, k + sparse.shape[1]), np.int64)
    gid[:, :k] = np.arange(k, dtype=np.int64)
    gid[:, k:] = sparse
    values = np.ones((n, k + sparse.shape[1]), np.float32)
    values[:, :k] = dense
    return {"label": label, "ids": gid, "values": values}


_M1, _M2 = np.uint64(0xBF58476D1CE4E5B9), np.uint64(0x94D049BB133111EB)


def _mix(x: np.ndarray) -> np.ndarray:
    with np.errstate(over="ignore"):
        x = x + np.uint64(0x9E3779B97F4A7C15)
        x = (x ^ (x >> np.uint64(30))) * _M1
        x = (x ^ (x >> np.uint64(27))) * _M2
        return x ^ (x >> np.uint64(31))


def keep_mask(labels: np.ndarray, lines: np.ndarray, file_index: int, seed: int, rate: float) -> np.ndarray:
    """Rows kept by ``--negative-rate``: every positive; a negative when the splitmix64 hash of (seed, the
    input's position, its line) falls below ``rate`` — the same rows on every engine."""
    if rate >= 1.0:
        return np.ones(labels.size, np.bool_)
    with np.errstate(over="ignore"):
        key = _mix(np.uint64(seed) ^ _mix(np.full(lines.size, file_index, np.uint64))) ^ lines.astype(np.uint64)
        u = (_mix(key) >> np.uint64(11)).astype(np.float64) * (1.0 / (1 << 53))
    return (labels != 0) | (u < rate)
