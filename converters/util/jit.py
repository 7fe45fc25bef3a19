"""numba's ``njit``, imported lazily so that modules defining kernels stay cheap to import, and a watch on
numba's compiler.

A kernel module imports ``njit`` from here; numba itself is imported the first time such a module is
imported (never by the CLI parser or the sharding planner).

The kernels are compiled once per machine and kept in numba's on-disk cache (``cache=True``); that first
compile takes seconds. When numba is first imported here a listener on numba's ``"numba:compile"`` event is
installed: the event fires only for a real compile (a kernel loaded from the cache fires none), and nested
compiles (a kernel compiling the helpers it calls) count once, as the outermost. A kernel found in the cache
is loaded without numba's refresh of its registries, which only a compile needs (``_load``).
``compile_seconds()`` is this process's time spent compiling so far; ``compiling()`` names the kernel being
compiled now; a callback given to ``on_next_compile`` runs once, when this process next starts a compile — the
CLI prints a notice from one, naming the kernel (library code only logs).

Processes that need the same uncached kernel at once (a conversion's workers, the ranks of a job, commands
started together on a fresh machine) compile it once: a cached kernel's compile holds an exclusive lock on a
file beside its cache entry (``<cache dir>/<file>.lock``, ``flock``); a process that finds the lock held waits
for it (its compile callbacks run then, as the wait is the compile's), then loads what the other process
saved. A lock that cannot be taken (a read-only cache directory, no ``flock``) is not waited for: that process
compiles on its own, as numba alone would.
"""
from __future__ import annotations

import logging
import os
import threading
import time
from typing import Callable

try:
    import fcntl
except ImportError:  # pragma: no cover - not POSIX: no cross-process lock, each process compiles
    fcntl = None

__all__ = ["njit", "intrinsic", "compile_seconds", "compiles", "compiling", "compile_waits", "on_next_compile"]

log = logging.getLogger(__name__)

_lock = threading.Lock()
_callbacks: list[Callable[[], None]] = []
_state = {"installed": False, "depth": 0, "started": 0.0, "seconds": 0.0, "compiles": 0, "what": "",
          "waits": 0, "waiting": ""}


def njit(*args, **kwargs):
    import numba

    _install()
    made = numba.njit(*args, **kwargs)
    if not kwargs.get("cache"):
        return made
    if args and callable(args[0]):  # njit(func, cache=True): the dispatcher itself
        return _share_compiles(made)
    return lambda func: _share_compiles(made(func))


def intrinsic(*args, **kwargs):
    """numba's ``extending.intrinsic`` (a function whose LLVM code the caller writes), imported lazily."""
    from numba.core.extending import intrinsic as _intrinsic

    _install()
    return _intrinsic(*args, **kwargs)


def compile_seconds() -> float:
    """Seconds this process has spent compiling kernels (0.0 when every kernel came from the cache)."""
    with _lock:
        extra = time.perf_counter() - _state["started"] if _state["depth"] else 0.0
        return _state["seconds"] + extra


def compiles() -> int:
    """How many (outermost) kernel compiles this process has run."""
    return _state["compiles"]


def compile_waits() -> int:
    """How many times this process has waited for another process's compile of a kernel it needed."""
    return _state["waits"]


def compiling() -> str:
    """The kernel whose (outermost) compile runs now, as ``module.name`` (or the one another process compiles
    while this one waits for it); "" when none."""
    with _lock:
        return _state["what"] if _state["depth"] else _state["waiting"]


def _dispatcher(ev):
    """The dispatcher a numba compile event is for (None when it names none)."""
    return (getattr(ev, "data", None) or {}).get("dispatcher")


def _func_name(func) -> str:
    """``module.name`` of a kernel's Python function ("a numba kernel" without one)."""
    if func is None:
        return "a numba kernel"
    return f"{getattr(func, '__module__', '?')}.{getattr(func, '__qualname__', getattr(func, '__name__', '?'))}"


def _kernel_name(ev) -> str:
    """``module.name`` of the function a numba compile event is for ("a numba kernel" when it names none)."""
    return _func_name(getattr(_dispatcher(ev), "py_func", None))


def on_next_compile(callback: Callable[[], None]) -> None:
    """Call ``callback()`` once, when this process next starts compiling a kernel (never, if every kernel it
    needs comes from the cache); the same callback registered twice runs once. An exception in a callback is
    logged, never raised into the compile."""
    with _lock:
        if callback not in _callbacks:  # (the CLI's main may run more than once in a process)
            _callbacks.append(callback)


def _call(callback: Callable[[], None]) -> None:
    try:
        callback()
    except Exception:  # a notice must never break a conversion
        log.debug("compile notice callback failed", exc_info=True)


def _install() -> None:
    """Register the compile listener once per process (numba already imported)."""
    if _state["installed"]:
        return
    with _lock:
        if _state["installed"]:
            return
        from numba.core import event

        class _CompileWatch(event.Listener):
            def on_start(self, ev):
                _started(_kernel_name(ev))

            def on_end(self, ev):
                _ended()
                if getattr(ev, "_exc_details", None) is not None:  # failed: nothing will be saved
                    cache = getattr(_dispatcher(ev), "_cache", None)
                    if isinstance(cache, _SharedCache):
                        cache.release()

        event.register("numba:compile", _CompileWatch())
        _state["installed"] = True


def _started(what: str = "a numba kernel") -> None:
    with _lock:
        _state["depth"] += 1
        if _state["depth"] > 1:
            return
        _state["started"], _state["what"] = time.perf_counter(), what
        first = _state["compiles"] == 0
        _state["compiles"] += 1
        callbacks = list(_callbacks)
        _callbacks.clear()
    if first:
        log.info("compiling %s (numba: its first use on this machine; later runs load it from numba's cache)", what)
    for cb in callbacks:
        _call(cb)


def _ended() -> None:
    with _lock:
        _state["depth"] = max(0, _state["depth"] - 1)
        if _state["depth"] == 0:
            _state["seconds"] += time.perf_counter() - _state["started"]


# -- one compile per kernel across processes ---------------------------------------------------------------

_held: dict[str, int] = {}   # lock path -> fd of each compile lock this process holds


def _share_compiles(dispatcher):
    """``dispatcher`` with its on-disk cache behind a compile lock (unchanged if numba's cache object is not
    the one this knows)."""
    cache = getattr(dispatcher, "_cache", None)
    if cache is None or not all(hasattr(cache, a) for a in ("load_overload", "save_overload", "cache_path")):
        return dispatcher
    dispatcher._cache = _SharedCache(cache, getattr(dispatcher, "py_func", None))
    return dispatcher


class _SharedCache:
    """numba's cache of one kernel, whose misses are compiled by one process at a time: a miss takes the
    kernel's lock (waiting for a process that holds it, then loading again), and keeps it until the compile's
    result is saved, or the compile ends without one."""

    def __init__(self, cache, func):
        self._cache = cache
        self._what = _func_name(func)
        impl = getattr(cache, "_impl", None)
        base = getattr(impl, "filename_base", None) or self._what
        self._lock_path = os.path.join(cache.cache_path, f"{base}.lock")

    def load_overload(self, sig, target_context):
        cres = _load(self._cache, sig, target_context)
        if cres is not None or self._lock_path in _held:  # a hit, or this process compiles it already
            return cres
        fd = _open_lock(self._lock_path)
        if fd is None:
            return None
        try:
            if not _try_lock(fd):
                _waiting(self._what)
                try:
                    fcntl.flock(fd, fcntl.LOCK_EX)
                finally:
                    _waited()
                cres = _load(self._cache, sig, target_context)
                if cres is not None:
                    log.info("%s: loaded what another process compiled", self._what)
                    os.close(fd)
                    return cres
        except BaseException:
            os.close(fd)
            raise
        _held[self._lock_path] = fd
        return None

    def save_overload(self, sig, data):
        try:
            self._cache.save_overload(sig, data)
        finally:
            self.release()

    def release(self) -> None:
        fd = _held.pop(self._lock_path, None)
        if fd is not None:
            os.close(fd)  # closing the only descriptor of the open file releases its flock

    def __getattr__(self, name):  # enable, disable, flush, cache_path, ... from numba's cache
        return getattr(self._cache, name)


def _load(cache, sig, target_context):
    """numba's ``cache.load_overload(sig, target_context)`` without its refresh of the target context: that
    refresh imports and installs the lowering and typing registries of every numba module (about 0.4 CPU-s of
    the first load in a process, measured here), which a compile needs (numba's compiler refreshes the context
    itself) and a kernel loaded from the cache does not; the runtime (NRT) the loaded kernels allocate with is
    initialized, as the refresh would. A cache without these parts of numba's is loaded the ordinary way."""
    load = getattr(cache, "_load_overload", None)
    guard = getattr(cache, "_guard_against_spurious_io_errors", None)
    try:
        from numba.core.runtime import rtsys
    except ImportError:  # pragma: no cover - a numba without it
        rtsys = None
    if load is None or guard is None or rtsys is None:
        return cache.load_overload(sig, target_context)
    rtsys.initialize(target_context)
    with guard():
        return load(sig, target_context)
    return None  # pragma: no cover - numba's guard swallowed an I/O error: a miss, as numba's own load


def _open_lock(path: str) -> int | None:
    if fcntl is None:
        return None
    try:
        os.makedirs(os.path.dirname(path), exist_ok=True)
        return os.open(path, os.O_RDWR | os.O_CREAT | getattr(os, "O_CLOEXEC", 0), 0o666)
    except OSError:
        return None


def _try_lock(fd: int) -> bool:
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        return True
    except BlockingIOError:
        return False
    except OSError:  # a file system without flock: compile without the lock
        return True


def _waiting(what: str) -> None:
    """This process waits for another one's compile of ``what``: the callbacks of a compile run now."""
    with _lock:
        _state["waits"] += 1
        _state["waiting"] = what
        callbacks = list(_callbacks)
        _callbacks.clear()
    log.info("waiting for another process compiling %s (numba)", what)
    for cb in callbacks:
        _call(cb)


def _waited() -> None:
    with _lock:
        _state["waiting"] = ""
