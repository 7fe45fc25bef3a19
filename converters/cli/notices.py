"""One-time notices the CLI prints on stderr while a command runs (library code only logs)."""
from __future__ import annotations

import sys

__all__ = ["announce_compiles", "COMPILE_NOTICE"]

COMPILE_NOTICE = "tfpipe: compiling the parser (first run on this machine only)..."


def announce_compiles() -> None:
    """Print ``COMPILE_NOTICE`` once when this process starts compiling numba kernels (the first conversion
    on a machine compiles for seconds; later runs load them from numba's on-disk cache and print nothing)."""
    from ..util.jit import on_first_compile

    on_first_compile(_notice)


def _notice() -> None:
    print(COMPILE_NOTICE, file=sys.stderr, flush=True)
