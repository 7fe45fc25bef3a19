"""numba's ``njit``, imported lazily so that modules defining kernels stay cheap to import.

A kernel module imports ``njit`` from here; numba itself is imported the first time such a module is
imported (never by the CLI parser or the sharding planner).
"""
from __future__ import annotations

__all__ = ["njit"]


def njit(*args, **kwargs):
    import numba

    return numba.njit(*args, **kwargs)
