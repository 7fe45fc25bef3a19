"""How the ``tfpipe`` process ends once its command is done.

A command that loaded the compiled kernels (numba, LLVM) or TensorFlow spends about 0.2 s after its last line
tearing those modules down (measured: 0.19-0.21 s after a LibSVM conversion or a ``verify``, against 0.01 s
here), work that no file and no exit code depends on. :func:`leave` ends the process the way the interpreter
would, less that teardown: the ``atexit`` handlers run (logging's flush, finalizers of temporary files,
multiprocessing's clean-up of its children), stdout and stderr are flushed, and the process exits with the
command's code. While a thread that the interpreter would wait for (not a daemon) is still running, or under a
profiler or tracer (``python3 -m cProfile``, coverage, a debugger: they write their reports after the command
returns), it exits the ordinary way instead, so nothing in flight is cut short.
"""
from __future__ import annotations

import atexit
import os
import sys
import threading
from typing import NoReturn

__all__ = ["leave"]


def _waited_threads() -> list[threading.Thread]:
    main = threading.main_thread()
    return [t for t in threading.enumerate() if t is not main and not t.daemon and t.is_alive()]


def leave(code: int) -> NoReturn:
    """End this process with exit status ``code`` (see the module's docstring)."""
    run_exitfuncs = getattr(atexit, "_run_exitfuncs", None)
    if run_exitfuncs is None or _waited_threads() or sys.getprofile() is not None or sys.gettrace() is not None:
        raise SystemExit(code)
    try:
        run_exitfuncs()
    finally:
        for stream in (sys.stdout, sys.stderr):
            try:
                stream.flush()
            except (OSError, ValueError):  # a closed pipe or stream: nothing more can reach it
                pass
        os._exit(int(code or 0) & 0xFF)
