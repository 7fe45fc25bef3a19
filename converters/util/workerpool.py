"""Local worker processes that end with their parent: the one way a conversion starts a pool of processes.

* ``start_method()``: ``fork`` (workers start warm: modules imported and compiled kernels loaded before the
  pool starts are theirs at no cost) unless this process runs other threads or has TensorFlow loaded (forking
  a multi-threaded process can deadlock the child): then ``forkserver`` (or ``spawn`` where there is no fork).
* ``worker_pool(workers)``: a ``ProcessPoolExecutor`` whose workers never outlive the run. Each asks the kernel
  to kill it when its parent dies (``PR_SET_PDEATHSIG`` on Linux: a main process killed with SIGKILL, as the
  OOM killer does, takes its pool along), exits at once if the main process is already gone by then, and
  watches besides (every second) that the main process lives and that it was not re-parented (elsewhere than
  Linux, or a parent that died before the signal was armed). Workers ignore Ctrl-C, which the main process
  handles, end quietly on SIGTERM, and read S3 inputs with the main process's S3 settings of now (a
  forkserver keeps the environment of when it started). ``heap_bytes`` gives each worker a steady heap.
* ``steady_heap(n)``: allocations of up to ``n`` bytes served from the heap and reused (glibc ``mallopt``).
* ``in_worker()``: whether this process is such a worker (the run's area refuses to re-create what a finished
  run removed from one: ``engines.area``).
"""
from __future__ import annotations

import os
import signal
import sys
import threading
import time

__all__ = ["start_method", "worker_pool", "in_worker", "steady_heap", "alive"]

_PR_SET_PDEATHSIG = 1
_S3_ENV = ("AWS_", "TFPIPE_S3_")  # the settings of s3:// inputs read in workers (endpoint, credentials, timeouts)
_IN_WORKER = False


def start_method() -> str:
    """``fork`` where it is safe (no other thread, no TensorFlow), else ``forkserver`` (or ``spawn``)."""
    import multiprocessing as mp

    methods = mp.get_all_start_methods()
    if "fork" in methods and threading.active_count() == 1 and "tensorflow" not in sys.modules:
        return "fork"
    return "forkserver" if "forkserver" in methods else "spawn"


def worker_pool(workers: int, method: str | None = None, heap_bytes: int | None = None):
    """A ``ProcessPoolExecutor`` of ``workers`` processes started by ``method`` (default ``start_method()``)
    that die with this process. ``heap_bytes``: allocations up to this size are served from each worker's
    heap and reused task after task (``steady_heap``), for workers whose every task allocates the same
    buffers of a few MiB."""
    import multiprocessing as mp
    from concurrent.futures import ProcessPoolExecutor

    ctx = mp.get_context(method or start_method())
    s3_env = {k: v for k, v in os.environ.items() if k.startswith(_S3_ENV)}
    return ProcessPoolExecutor(max_workers=workers, mp_context=ctx, initializer=_init_worker,
                               initargs=(os.getpid(), ctx.get_start_method() != "forkserver", s3_env, heap_bytes))


_M_TRIM_THRESHOLD, _M_MMAP_THRESHOLD = -1, -3  # glibc's mallopt parameters


def steady_heap(heap_bytes: int) -> bool:
    """Serve allocations of up to ``heap_bytes`` from this process's heap and keep up to twice that freed
    there (glibc ``mallopt``), instead of mapping fresh zeroed pages for each large array and unmapping them
    when it is freed. Measured on the LibSVM workers (4 MiB blocks: arrays of 4-9 MiB a task): a task took
    16-27 ms of CPU with fresh pages, 13 ms with its heap reused. False where the C library has no mallopt."""
    try:
        import ctypes

        libc = ctypes.CDLL(None)
        return bool(libc.mallopt(_M_MMAP_THRESHOLD, int(heap_bytes))
                    and libc.mallopt(_M_TRIM_THRESHOLD, 2 * int(heap_bytes)))
    except (OSError, AttributeError):  # pragma: no cover - not glibc
        return False


def in_worker() -> bool:
    """True in a process started by ``worker_pool``."""
    return _IN_WORKER


def _init_worker(parent_pid: int, direct: bool, s3_env: dict[str, str], heap_bytes: int | None = None) -> None:
    """Worker start-up: die with the parent (``direct``: the parent is the main process itself, not a
    forkserver), leave Ctrl-C to the main process, end quietly when the pool terminates it (a forked worker
    would otherwise inherit the CLI's SIGTERM handler), take the parent's S3 settings of now, and a steady heap
    of ``heap_bytes`` when given (``steady_heap``)."""
    global _IN_WORKER
    _IN_WORKER = True
    for k in [k for k in os.environ if k.startswith(_S3_ENV)]:
        del os.environ[k]
    os.environ.update(s3_env)
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    if heap_bytes:
        steady_heap(heap_bytes)
    if sys.platform.startswith("linux"):
        try:
            import ctypes

            ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
        except (OSError, AttributeError):  # pragma: no cover - no prctl: the watch below still runs
            pass
    ppid = os.getppid()
    if (direct and ppid != parent_pid) or not alive(parent_pid):  # it died before the death signal was armed
        os._exit(1)
    threading.Thread(target=_watch_parent, args=(parent_pid, ppid), name="tfpipe-parent-watch",
                     daemon=True).start()


def alive(pid: int) -> bool:
    """Whether a process ``pid`` exists (one of another user's counts)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _watch_parent(parent_pid: int, ppid: int, period: float = 1.0) -> None:
    """Exit when the run's main process is gone or this process was re-parented."""
    while True:
        time.sleep(period)
        if os.getppid() != ppid or not alive(parent_pid):
            os._exit(1)
