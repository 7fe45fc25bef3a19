"""One-time notices the CLI prints on stderr while a command runs (library code only logs)."""
from __future__ import annotations

import sys

__all__ = ["announce_compiles", "COMPILE_NOTICE"]

COMPILE_NOTICE = "tfpipe: compiling the parser (first run on this machine only)..."


def announce_compiles() -> None:
    """Print ``COMPILE_NOTICE`` once when this command starts compiling numba kernels (the first conversion
    on a machine compiles for seconds; later runs load them from numba's on-disk cache and print nothing).
    Like the progress bars, only on a terminal: a script that reads stderr gets only its errors and warnings
    (``-v`` logs the compile there)."""
    from ..util.jit import on_next_compile

    on_next_compile(_notice)


def _notice() -> None:
    isatty = getattr(sys.stderr, "isatty", None)
    if isatty is not None and isatty():
        print(COMPILE_NOTICE, file=sys.stderr, flush=True)
