"""A run that Ctrl-C or ``kill`` stops ends in one line, whatever the engine does with the signal.

An engine such as Beam runs steps in threads and worker processes and turns a ``KeyboardInterrupt`` raised
inside one into its own exception (``the Beam pipeline failed: KeyboardInterrupt``), logs tracebacks from
its threads and lets them print more. ``interruptible()`` notes the signals that arrive (SIGINT, SIGTERM),
silences every log record and thread traceback once one did, and ``reraise()`` turns whatever the engine
raised into the signal's own exception again: ``KeyboardInterrupt`` for SIGINT; for SIGTERM what the
previous handler raises (the CLI's, exit 143), else ``SystemExit(143)``.
"""
from __future__ import annotations

import contextlib
import logging
import signal
import threading
from typing import Iterator

__all__ = ["Interrupts", "interruptible"]

_SIGNALS = (signal.SIGINT, signal.SIGTERM)


class Interrupts:
    """The signals received during an ``interruptible()`` block, in order."""

    def __init__(self):
        self.received: list[int] = []
        self.previous: dict[int, object] = {}

    def __bool__(self) -> bool:
        return bool(self.received)

    def reraise(self) -> None:
        """Raise the first signal's own exception (call only when one arrived)."""
        signum = self.received[0]
        if signum == signal.SIGINT:
            raise KeyboardInterrupt
        prev = self.previous.get(signum)
        if callable(prev):
            prev(signum, None)  # the CLI's handler raises its own exception
        raise SystemExit(128 + signum)

    def _handler(self, signum, frame) -> None:
        first = not self.received
        self.received.append(signum)
        if first:  # later signals: the run is already unwinding (kill -9 remains for a stuck clean-up)
            self.reraise()


class _Silenced(logging.Filter):
    def __init__(self, interrupts: Interrupts):
        super().__init__()
        self.interrupts = interrupts

    def filter(self, record: logging.LogRecord) -> bool:
        return not self.interrupts


@contextlib.contextmanager
def interruptible() -> Iterator[Interrupts]:
    """Note SIGINT/SIGTERM during the block (main thread only; elsewhere the block runs as is)."""
    got = Interrupts()
    if threading.current_thread() is not threading.main_thread():
        yield got
        return
    got.previous = {s: h for s in _SIGNALS if (h := signal.getsignal(s)) != signal.SIG_IGN}
    quiet = _Silenced(got)
    handlers = list(logging.getLogger().handlers)
    for h in handlers:
        h.addFilter(quiet)
    hook = threading.excepthook

    def thread_hook(args):
        if not got:
            hook(args)

    threading.excepthook = thread_hook
    for s in got.previous:
        signal.signal(s, got._handler)
    try:
        yield got
    finally:
        for s, prev in got.previous.items():
            signal.signal(s, prev)
        threading.excepthook = hook
        if not got:
            for h in handlers:
                h.removeFilter(quiet)
        # after a signal the filter stays: the engine's threads may still log while the process exits
