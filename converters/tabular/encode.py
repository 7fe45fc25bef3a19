"""Rows -> the compact columns pass 1 (encoding) keeps: the numeric transform, Keras ``Hashing`` bins (the
``--hash-buckets`` id policy's ids), the columns' facts the passes share (``ColumnFacts``) and seeded negative
downsampling. The ids come from the id policy (``idpolicy``), the target's features from ``targets``."""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .rows import Rows

__all__ = ["NUMERIC", "ColumnFacts", "numeric_values", "hash_bins", "compact_columns", "keep_mask"]

NUMERIC = ("log1p", "minmax")  # the numeric transforms (``numeric_values``)


@dataclass(frozen=True)
class ColumnFacts:
    """What the pre-pass (counting) or the source set fixes about the columns: per categorical column its table
    size (``V + 1`` with a vocabulary, ``N`` with ``--hash-buckets N``), and per numeric column the min/max the
    ``minmax`` transform uses."""

    sizes: tuple[int, ...]
    mins: tuple[float, ...] = ()
    maxs: tuple[float, ...] = ()

    def feature_size(self, numeric: int) -> int:
        return int(numeric + sum(self.sizes))


def numeric_values(rows: Rows, mode: str, facts: ColumnFacts) -> np.ndarray:
    """float32 (n, numeric): missing or negative -> 0, then log1p (float64), or min-max scaling."""
    v = np.where(rows.missing | (rows.nums < 0), 0, rows.nums).astype(np.float64)
    if mode == "log1p":
        return np.log1p(v).astype(np.float32)
    lo = np.asarray(facts.mins, np.float64)
    span = np.asarray(facts.maxs, np.float64) - lo
    safe = np.where(span > 0, span, 1.0)
    return np.where(span > 0, (v - lo) / safe, 0.0).astype(np.float32)


def hash_bins(column: np.ndarray, buckets: int) -> np.ndarray:
    """``tf.keras.layers.Hashing(num_bins=buckets)`` of the values (``tf.strings.to_hash_bucket_fast``:
    FarmHash Fingerprint64 mod N), the empty string included; a value's trailing NUL bytes are not part of it
    (``column`` is fixed-width bytes), as in the vocabularies."""
    import tensorflow as tf

    return tf.strings.to_hash_bucket_fast(tf.constant(column), buckets).numpy().astype(np.int64)


def compact_columns(rows: Rows, mode: str, facts: ColumnFacts, sparse: np.ndarray) -> dict[str, np.ndarray]:
    """The rows in their compact form, what pass 1 keeps: ``label`` float32, ``dense`` float32 (n, numeric), and
    ``sparse`` as given: (n, categorical) ids in the target's numbering (each column's ids plus the target's
    ``offsets``). The target's ``expand`` makes its features of them."""
    return {"label": rows.labels.astype(np.float32), "dense": numeric_values(rows, mode, facts), "sparse": sparse}


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
