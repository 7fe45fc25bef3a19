"""The CLI's compile notice in what a test reads from stderr: printed once per kernel and machine, by whichever
command compiles the kernel first, so by whichever test of a run gets there first (its order, its worker and
what the run has cached so far decide which)."""
from __future__ import annotations

from converters.cli.notices import COMPILE_NOTICE

__all__ = ["COMPILE_PREFIX", "without_compile_notices"]

COMPILE_PREFIX = COMPILE_NOTICE.split("{")[0]


def without_compile_notices(stderr: str) -> str:
    """``stderr`` without its compile notice lines (every other line kept as it is, newline included)."""
    return "".join(ln for ln in stderr.splitlines(keepends=True) if not ln.startswith(COMPILE_PREFIX))
