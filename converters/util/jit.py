"""numba's ``njit``, imported lazily so that modules defining kernels stay cheap to import, and a watch on
numba's compiler.

A kernel module imports ``njit`` from here; numba itself is imported the first time such a module is
imported (never by the CLI parser or the sharding planner).

The kernels are compiled once per machine and kept in numba's on-disk cache (``cache=True``); that first
compile takes seconds. When numba is first imported here a listener on numba's ``"numba:compile"`` event is
installed: the event fires only for a real compile (a kernel loaded from the cache fires none), and nested
compiles (a kernel compiling the helpers it calls) count once, as the outermost. ``compile_seconds()`` is
this process's time spent compiling so far; ``compiling()`` names the kernel being compiled now; a callback
given to ``on_next_compile`` runs once, when this process next starts a compile — the CLI prints a notice from
one, naming the kernel (library code only logs).
"""
from __future__ import annotations

import logging
import threading
import time
from typing import Callable

__all__ = ["njit", "intrinsic", "compile_seconds", "compiles", "compiling", "on_next_compile"]

log = logging.getLogger(__name__)

_lock = threading.Lock()
_callbacks: list[Callable[[], None]] = []
_state = {"installed": False, "depth": 0, "started": 0.0, "seconds": 0.0, "compiles": 0, "what": ""}


def njit(*args, **kwargs):
    import numba

    _install()
    return numba.njit(*args, **kwargs)


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


def compiling() -> str:
    """The kernel whose (outermost) compile runs now, as ``module.name``; "" when none does."""
    with _lock:
        return _state["what"] if _state["depth"] else ""


def _kernel_name(ev) -> str:
    """``module.name`` of the function a numba compile event is for ("a numba kernel" when it names none)."""
    func = getattr((getattr(ev, "data", None) or {}).get("dispatcher"), "py_func", None)
    if func is None:
        return "a numba kernel"
    return f"{getattr(func, '__module__', '?')}.{getattr(func, '__qualname__', getattr(func, '__name__', '?'))}"


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
