"""The ``--index-base auto`` scanners (numba): the smallest index in a block, and whether a block holds an
index 0 at all, at memory-scan speed. ``block.min_index`` / ``block.has_zero_index`` wrap them."""
from __future__ import annotations

import numpy as np

from ..util.jit import njit
from .kernel import _is_delim, _is_ws

__all__ = ["min_index_kernel", "has_zero_index_kernel"]


@njit(cache=True, nogil=True)
def min_index_kernel(buf):
    """Smallest index (>= 0) among feature tokens ``[+-]digits:...`` outside comments; -1 if none."""
    n = buf.shape[0]
    best = np.int64(-1)
    q = 0
    while q < n:
        # label (first token of the line)
        while q < n and _is_ws(buf[q]):
            q += 1
        tok = 0
        while q < n:
            while q < n and _is_ws(buf[q]):
                q += 1
            if q >= n or buf[q] == 10 or buf[q] == 35:
                break
            if tok > 0:
                j = q
                if buf[j] == 43 or buf[j] == 45:
                    j += 1
                v = np.int64(0)
                nd = 0
                while j < n and 48 <= buf[j] <= 57:
                    if nd < 18:
                        v = v * 10 + (buf[j] - 48)
                    nd += 1
                    j += 1
                if 0 < nd <= 18 and j < n and buf[j] == 58 and (best < 0 or v < best):
                    best = v
                    if best == 0:
                        return 0
                q = j
            while q < n and not _is_delim(buf[q]):
                q += 1
            tok += 1
        while q < n and buf[q] != 10:  # rest of the line (a comment)
            q += 1
        q += 1
    return best


@njit(cache=True, nogil=True)
def _zero_index_at(buf, i):
    """Whether the ':' at ``i`` (after a '0') ends an index-0 token that follows a label, outside a comment."""
    j = i - 1
    while j >= 0 and buf[j] == 48:
        j -= 1
    if j >= 0 and (buf[j] == 43 or buf[j] == 45):
        j -= 1
    if j >= 0 and not (_is_ws(buf[j]) or buf[j] == 10):
        return False
    # the token starts at j + 1: an index only if a label precedes it on its line, outside a comment
    ls = j
    while ls >= 0 and buf[ls] != 10:
        ls -= 1
    seen = False
    for k in range(ls + 1, j + 1):
        if buf[k] == 35:
            return False
        if not _is_ws(buf[k]):
            seen = True
    return seen


@njit(cache=True, nogil=True)
def has_zero_index_kernel(buf):
    """True if some feature token (not a label, not in a comment) has index 0 (``0:``, ``00:``, ``+0:``).

    64 bytes at a time, a branch-free count of the ``'0:'`` whose byte before the '0' is at most '0' (a
    whitespace, sign or '0': what an index-0 token needs) runs at ~3 GB/s (the loop vectorizes; measured 2.5-3x
    the byte-by-byte scan); only a 64-byte run with such a candidate is looked at closely."""
    n = buf.shape[0]
    runs = max(0, (n - 2) // 64)
    for r in range(runs):
        base = 2 + r * 64
        c = 0
        for j in range(64):
            k = base + j
            c += (buf[k] == 58) & (buf[k - 1] == 48) & (buf[k - 2] <= 48)
        if c:
            for k in range(base, base + 64):
                if buf[k] == 58 and buf[k - 1] == 48 and _zero_index_at(buf, k):
                    return True
    for k in range(2 + runs * 64, n):
        if buf[k] == 58 and buf[k - 1] == 48 and _zero_index_at(buf, k):
            return True
    return False
