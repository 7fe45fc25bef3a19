"""How far a shuffled read moves rows: for an epoch's order (the row indices in the order read), the mean
displacement ``mean |position - index|`` and the rank correlation (Spearman) of position and index: 1 for the
order as stored, about 0 for a full random permutation. Pure NumPy."""
from __future__ import annotations

import numpy as np

__all__ = ["mix", "read_order"]


def mix(order) -> dict:
    """``{"rows", "mean_displacement", "rank_correlation"}`` of ``order`` (a permutation of 0..n-1)."""
    a = np.asarray(order, dtype=np.int64)
    n = len(a)
    if n < 2 or not np.array_equal(np.sort(a), np.arange(n)):
        raise ValueError(f"order must be a permutation of 0..n-1 with n >= 2, got {n} values")
    pos = np.arange(n, dtype=np.float64)
    d = np.abs(pos - a)
    # Spearman on a permutation: ranks are the values themselves
    rho = 1.0 - 6.0 * float(np.sum((pos - a) ** 2)) / (n * (n * n - 1.0))
    return {"rows": n, "mean_displacement": float(d.mean()), "rank_correlation": rho}


def read_order(dataset) -> list[int]:
    """Row indices of a dataset of ``(features, label)`` batches whose label is the row's index."""
    out: list[int] = []
    for _, label in dataset:
        out.extend(int(x) for x in label.numpy())
    return out
