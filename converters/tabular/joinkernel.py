"""numba kernel of a vocabulary file's text: fixed-width values joined into lines (``join_lines``)."""
from __future__ import annotations

import numpy as np

from ..util.jit import njit

__all__ = ["join_lines"]


@njit(cache=True, nogil=True)
def join_lines(grid, lens):
    """The lines of fixed-width values joined: row ``i`` of ``grid`` (uint8, n x width) cut to ``lens[i] - 1``
    bytes, then a newline."""
    out = np.empty(lens.sum(), np.uint8)
    at = 0
    for i in range(grid.shape[0]):
        m = lens[i] - 1
        for q in range(m):
            out[at + q] = grid[i, q]
        out[at + m] = 10
        at += m + 1
    return out
