"""Framed records as (bytes, lengths) arrays: pick or reorder some of them in one compiled pass."""
from __future__ import annotations

import numpy as np

from ..tfrecord.crc import copy_into
from ..util.jit import njit

__all__ = ["take_records", "offsets_of"]


@njit(cache=True, nogil=True)
def _take(src, offsets, lengths, order, out):
    pos = np.int64(0)
    for k in range(order.shape[0]):
        i = order[k]
        a = offsets[i]
        n = lengths[i]
        copy_into(out, pos, src, a, n)
        pos += n
    return pos


def offsets_of(lengths: np.ndarray) -> np.ndarray:
    """Start offset of each record in the concatenated bytes."""
    lengths = np.asarray(lengths, dtype=np.int64)
    out = np.zeros(lengths.shape[0], dtype=np.int64)
    if lengths.shape[0] > 1:
        np.cumsum(lengths[:-1], out=out[1:])
    return out


def take_records(data: np.ndarray, lengths: np.ndarray, order: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The records ``order`` (indices into the records of ``data``, any order, possibly a subset) as new
    concatenated bytes and their lengths."""
    data = np.frombuffer(data, dtype=np.uint8) if not isinstance(data, np.ndarray) else data.view(np.uint8)
    data = np.ascontiguousarray(data)
    lengths = np.asarray(lengths, dtype=np.int64)
    order = np.asarray(order, dtype=np.int64)
    if lengths.size and (lengths.min() < 0 or lengths.sum() > data.size):
        raise ValueError(f"the records' lengths must be 0 or more and add up to at most the data's {data.size} bytes")
    picked = lengths[order]
    out = np.empty(int(picked.sum()), dtype=np.uint8)
    if order.shape[0]:
        _take(data, offsets_of(lengths), lengths, order, out)
    return out, picked
