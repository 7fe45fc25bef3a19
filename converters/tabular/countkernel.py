"""numba kernels of the pre-pass (counting): a block's categorical keys (``parsekernel.parse_block``'s, a value of at
most 8 bytes as a big-endian uint64) sorted (``radix_sort``) and counted (``count_sorted``), the keys of values
no vocabulary file can hold left out."""
from __future__ import annotations

import numpy as np

from ..util.jit import njit

__all__ = ["radix_sort", "count_sorted"]


@njit(cache=True, nogil=True)
def _servable_key(key):
    """Whether the value of a nonzero key (``parse_block``'s: at most 8 bytes, big-endian, zero-padded) can be a
    vocabulary file's line: ``vocab.servable``'s rule (no newline in it, no carriage return as its last byte) on
    the key's bytes, so that a block's keys are filtered in the same pass that counts them."""
    last = 0
    for q in range(8):
        b = (key >> np.uint64(56 - 8 * q)) & np.uint64(0xFF)
        if b == 10:
            return False
        if b != 0:
            last = b
    return last != 13


_DIGIT = 11  # bits a radix pass sorts by: 2,048 buckets, six passes cover 64 bits


@njit(cache=True, nogil=True)
def radix_sort(keys):
    """``keys`` (uint64) sorted ascending, a new array: least significant digit first, ``_DIGIT`` bits a pass,
    every pass's histogram from one read, a pass whose digit every key shares skipped. Linear: several times
    ``np.sort`` on a block's column of keys."""
    n = keys.size
    passes = (64 + _DIGIT - 1) // _DIGIT
    mask = np.uint64((1 << _DIGIT) - 1)
    hist = np.zeros((passes, 1 << _DIGIT), np.int64)
    for i in range(n):
        k = keys[i]
        for p in range(passes):
            hist[p, (k >> np.uint64(_DIGIT * p)) & mask] += 1
    src = keys.copy()
    dst = np.empty_like(src)
    for p in range(passes):
        at = 0
        shared = False
        for d in range(1 << _DIGIT):
            c = hist[p, d]
            shared = shared or c == n
            hist[p, d] = at
            at += c
        if shared:
            continue
        shift = np.uint64(_DIGIT * p)
        for i in range(n):
            k = src[i]
            d = (k >> shift) & mask
            dst[hist[p, d]] = k
            hist[p, d] += 1
        src, dst = dst, src
    return src


@njit(cache=True, nogil=True)
def count_sorted(keys):
    """The distinct keys of ascending ``keys`` and how many times each occurs, key 0 (the empty value) and keys
    of values no vocabulary file can hold (``_servable_key``) left out."""
    u = np.empty(keys.size, np.uint64)
    c = np.empty(keys.size, np.int64)
    m = 0
    i = 0
    while i < keys.size:
        j = i + 1
        while j < keys.size and keys[j] == keys[i]:
            j += 1
        if keys[i] != 0 and _servable_key(keys[i]):
            u[m] = keys[i]
            c[m] = j - i
            m += 1
        i = j
    return u[:m].copy(), c[:m].copy()
