"""util.workerpool: a pool's workers with a steady heap run their tasks as any others."""
import ctypes
import os

import pytest

from converters.util.workerpool import steady_heap, worker_pool

glibc = pytest.mark.skipif(not hasattr(ctypes.CDLL(None), "mallopt"), reason="not glibc (no mallopt)")


def _churn(nbytes: int, rounds: int) -> int:
    """Allocate, touch and free ``nbytes`` ``rounds`` times (as a task of a worker does); returns its pid."""
    for _ in range(rounds):
        b = bytearray(nbytes)
        b[::4096] = b"\x01" * len(b[::4096])
        del b
    return os.getpid()


@glibc
def test_steady_heap_is_accepted_by_the_c_library():
    assert steady_heap(64 << 20) is True


@glibc
def test_workers_with_a_steady_heap_run_their_tasks():
    with worker_pool(2, heap_bytes=64 << 20) as pool:
        pids = set(pool.map(_churn, [8 << 20] * 6, [3] * 6))
    assert pids and os.getpid() not in pids
