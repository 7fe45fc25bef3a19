"""One-time notices the CLI prints on stderr while a command runs (library code only logs)."""
from __future__ import annotations

import sys

__all__ = ["announce_compiles", "COMPILE_NOTICE"]

COMPILE_NOTICE = "tfpipe: compiling the parser (first run on this machine only, ~30 s)..."


def announce_compiles() -> None:
    """Print ``COMPILE_NOTICE`` on stderr once, when this command starts compiling numba kernels, before the
    wait (the first conversion on a machine compiles for tens of seconds; later runs load the kernels from
    numba's on-disk cache and print nothing). Printed whether stderr is a terminal or not: a run whose output
    is captured (a log, a notebook, a CI job) would otherwise sit silent for half a minute."""
    from ..util.jit import on_next_compile

    on_next_compile(_notice)


def _notice() -> None:
    print(COMPILE_NOTICE, file=sys.stderr, flush=True)
