"""One-time notices the CLI prints on stderr while a command runs (library code only logs)."""
from __future__ import annotations

import sys

__all__ = ["announce_compiles", "compile_notice", "COMPILE_NOTICE"]

# what: the kernel numba compiles (``module.name``); printed only when a compile really starts
COMPILE_NOTICE = ("tfpipe: compiling {what} (numba; once per machine for each kernel: later commands load it from "
                  "numba's cache; seconds to a minute)...")


def compile_notice(what: str) -> str:
    """The notice for a compile of ``what``."""
    return COMPILE_NOTICE.format(what=what)


def announce_compiles() -> None:
    """Print the compile notice on stderr once, when this command starts compiling a numba kernel, before the
    wait, naming that kernel. numba reports a compile only when the kernel is not in its on-disk cache: a
    command whose kernels an earlier command compiled (with the same tfpipe and numba) prints nothing. Printed
    whether stderr is a terminal or not: a run whose output is captured (a log, a notebook, a CI job) would
    otherwise sit silent for half a minute."""
    from ..util.jit import on_next_compile

    on_next_compile(_notice)


def _notice() -> None:
    from ..util.jit import compiling

    print(compile_notice(compiling() or "a numba kernel"), file=sys.stderr, flush=True)
