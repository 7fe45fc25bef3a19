"""Keyed pseudo-random permutations of record indices (pure, vectorized).

``record_keys(seed, indices, purpose)`` maps each global record index to a 64-bit key with a bijective mixer
(the splitmix64 finalizer; every step is invertible on 64-bit integers), offset by a seed-derived constant.
Distinct indices therefore get distinct keys: sorting records by key is a total order, the same whatever
order the records arrive in or however they are bucketed, and a different seed (or purpose) gives an
unrelated order. Shuffling sorts by key; balancing keeps, per label, the records with the smallest keys.
"""
from __future__ import annotations

import numpy as np

__all__ = ["record_keys", "mix64", "PURPOSES"]

_C1 = np.uint64(0xBF58476D1CE4E5B9)
_C2 = np.uint64(0x94D049BB133111EB)
PURPOSES = {"shuffle": 0x5348554646, "balance": 0x42414C414E43}  # independent streams for one seed


def mix64(x: np.ndarray) -> np.ndarray:
    """The splitmix64 finalizer on uint64 values: a bijection of the 64-bit integers."""
    z = np.asarray(x, dtype=np.uint64).copy()
    with np.errstate(over="ignore"):
        z ^= z >> np.uint64(30)
        z *= _C1
        z ^= z >> np.uint64(27)
        z *= _C2
        z ^= z >> np.uint64(31)
    return z


def _offset(seed: int, purpose: str) -> np.uint64:
    if isinstance(seed, bool) or not isinstance(seed, (int, np.integer)) or seed < 0:
        raise ValueError(f"seed must be a non-negative integer, got {seed!r}")
    if purpose not in PURPOSES:
        raise ValueError(f"purpose must be one of {sorted(PURPOSES)}, got {purpose!r}")
    base = (int(seed) & 0xFFFFFFFFFFFFFFFF) ^ (PURPOSES[purpose] << 20)
    return mix64(np.array([base & 0xFFFFFFFFFFFFFFFF], dtype=np.uint64))[0]


def record_keys(seed: int, indices: np.ndarray, purpose: str = "shuffle") -> np.ndarray:
    """uint64 keys of the global record ``indices`` for ``seed`` (distinct indices -> distinct keys)."""
    idx = np.asarray(indices, dtype=np.uint64)
    with np.errstate(over="ignore"):
        return mix64(idx + _offset(seed, purpose))
