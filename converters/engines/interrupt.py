"""A run that Ctrl-C or ``kill`` stops ends in one line, whatever the engine does with the signal.

An engine such as Beam runs steps in threads and worker processes and turns a ``KeyboardInterrupt`` raised
inside one into its own exception (``the Beam pipeline failed: KeyboardInterrupt``), logs tracebacks from
its threads and lets them print more. ``interruptible()`` notes the signals that arrive (SIGINT, SIGTERM),
silences every log record and thread traceback once one did (a thread's traceback in the block is held until
its end, and shown only if no signal came), and ``reraise()`` turns whatever the engine
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
        self.threads: set[int | None] = set()  # the threads alive when the first signal came
        self.on_signal: list = []  # called (no arguments) when the first signal comes, before it is raised

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
        if first:
            self.threads = {t.ident for t in threading.enumerate()}
        self.received.append(signum)
        if first:
            for fn in self.on_signal:  # e.g. stop the engine's worker processes, which the clean-up waits for
                try:
                    fn()
                except Exception:  # noqa: BLE001 - stopping goes on
                    pass
        if first:  # later signals: the run is already unwinding (kill -9 remains for a stuck clean-up)
            self.reraise()


class _Silenced(logging.Filter):
    """After a signal: inside the block every record is dropped; after it (the engine's threads may still log
    while the run unwinds) only those of other threads and of the engine's own loggers."""

    def __init__(self, interrupts: Interrupts):
        super().__init__()
        self.interrupts = interrupts
        self.inside = True

    def filter(self, record: logging.LogRecord) -> bool:
        if not self.interrupts:
            return True
        if self.inside:
            return False
        return record.threadName == "MainThread" and not record.name.startswith(("apache_beam", "grpc", "absl"))


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

    held = []  # a thread's uncaught exception in the block: shown at its end unless a signal came (a worker
    #            killed by the same Ctrl-C can end its thread before the main thread sees the signal)

    def thread_hook(args):  # after a signal: quiet for the engine's threads (those that ran in the block)
        if quiet.inside:
            if not got:
                held.append(args)
            return
        if got and (args.thread is None or args.thread.ident in got.threads):
            return
        hook(args)

    threading.excepthook = thread_hook
    for s in got.previous:
        signal.signal(s, got._handler)
    try:
        yield got
    finally:
        for s, prev in got.previous.items():
            signal.signal(s, prev)
        threading.excepthook = hook if not got else thread_hook
        if got:
            got.threads |= {t.ident for t in threading.enumerate()}
        quiet.inside = False
        if not got:
            for h in handlers:
                h.removeFilter(quiet)
            for args in held:
                hook(args)
        # after a signal the filter stays: the engine's threads may still log while the process exits
