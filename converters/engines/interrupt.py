"""A run that Ctrl-C or ``kill`` stops ends in one line, whatever the engine does with the signal.

An engine such as Beam runs steps in threads and worker processes and turns a ``KeyboardInterrupt`` raised
inside one into its own exception (``the Beam pipeline failed: KeyboardInterrupt``), logs tracebacks from
its threads and lets them print more. ``interruptible()`` notes the signals that arrive (SIGINT, SIGTERM),
silences every log record and thread traceback once one did (a thread's traceback in the block is held until
its end, and shown only if no signal came), and ``reraise()`` turns whatever the engine
raised into the signal's own exception again: ``KeyboardInterrupt`` for SIGINT; for SIGTERM what the
previous handler raises (the CLI's, exit 143), else ``SystemExit(143)``.

Python runs a signal's handler in the main thread, between two bytecodes. A signal that the kernel hands to
another thread (any of the engine's threads can take a process-directed signal) leaves a main thread that
waits on a lock (Beam's driver waiting for a bundle's future) asleep until that wait ends, and with the
workers still running it may not end: seen as a ``kill`` of the process group that hung a Beam conversion.
So the block also watches the signal wake-up fd in a thread of its own and sends the signal again to the main
thread itself, whose wait it interrupts: the handler runs there, as it would have had the kernel picked it.

Python cannot raise the handler's exception everywhere: inside a ctypes callback (numba's compiler calls
one for each object it emits, also when it sets up its runtime in a process) or a finalizer it is printed as
"Exception ignored ..." and dropped, and the run goes on. The block drops that report (after a signal, a
swallowed ``KeyboardInterrupt`` or ``SystemExit`` is the signal's own); the run then ends by the deadline below.
It does not raise the signal's exception again: right after such a callback the main thread is still inside
numba setting up a kernel, which that exception would cut short half-way.

An engine's own clean-up can still wait forever on a part that the signal stopped (seen: Beam's driver joining
the thread of a worker that is gone). So the first signal also starts a deadline: if the block has not ended
``grace`` seconds later, the ``on_stuck`` callbacks run (remove the temporary files, release the claim), the
line that ``set_exit_lines`` gave for the signal is written, and the process exits with the signal's code.
"""
from __future__ import annotations

import contextlib
import functools
import logging
import os
import select
import signal
import sys
import threading
from typing import Iterator, Mapping

__all__ = ["Interrupts", "interruptible", "set_exit_lines"]

_SIGNALS = (signal.SIGINT, signal.SIGTERM)
_EXIT_LINES: dict[int, str] = {}
DEFAULT_GRACE = 15.0  # seconds from the first signal to a forced exit; a clean-up takes 1-2 s on a busy host


def set_exit_lines(lines: Mapping[int, str]) -> None:
    """The line (per signal number) written to stderr when a stuck run is ended by its deadline: the command
    line's own words for the signal (the CLI sets them; a library caller gets none)."""
    _EXIT_LINES.clear()
    _EXIT_LINES.update({int(k): str(v) for k, v in lines.items()})


class Interrupts:
    """The signals received during an ``interruptible()`` block, in order."""

    def __init__(self, grace: float = DEFAULT_GRACE):
        self.received: list[int] = []
        self.previous: dict[int, object] = {}
        self.threads: set[int | None] = set()  # the threads alive when the first signal came
        self.on_signal: list = []  # called (no arguments) when the first signal comes, before it is raised
        self.on_stuck: list = []  # called (no arguments) when the block has not ended ``grace`` s after it
        self.grace = grace
        self._ended = False
        # the block's end and the deadline's forced exit: one of the two; reentrant, as the main thread's handler
        # (start_deadline) may run between two bytecodes of end()
        self._ending = threading.RLock()
        self._deadline: threading.Thread | None = None

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

    def start_deadline(self, signum: int) -> None:
        """From the first signal on: end the process ``grace`` seconds later unless the block has ended."""
        with self._ending:
            if self._deadline is not None or self._ended:
                return
            self._deadline = threading.Thread(target=self._expire, args=(signum,), name="tfpipe-signal-deadline",
                                              daemon=True)
        self._deadline.start()

    def end(self) -> None:
        """The block ended: no forced exit (waits if the deadline is already forcing one)."""
        with self._ending:
            self._ended = True

    def _expire(self, signum: int) -> None:
        threading.Event().wait(self.grace)
        self._ending.acquire()  # held until the process is gone: the block's end waits on it
        if self._ended:
            self._ending.release()
            return
        for fn in (*self.on_signal, *self.on_stuck):
            try:
                fn()
            except Exception:  # noqa: BLE001 - the exit goes on
                pass
        line = _EXIT_LINES.get(int(signum))
        try:
            sys.stdout.flush()
            if line:
                os.write(2, (line + "\n").encode())
        finally:
            os._exit(128 + int(signum))

    def _handler(self, signum, frame) -> None:
        first = not self.received
        self.start_deadline(signum)
        if first:
            self.threads = {t.ident for t in threading.enumerate()}
        self.received.append(signum)
        if first:
            for fn in self.on_signal:  # e.g. stop the engine's worker processes, which the clean-up waits for
                try:
                    fn()
                except Exception:  # noqa: BLE001 - stopping goes on
                    pass
            self.reraise()  # later signals: the run is already unwinding (kill -9 remains for a stuck clean-up)

    def _unraisable(self, unraisable, hook) -> None:
        """``sys.unraisablehook`` in the block: the signal's exception dropped where it was raised is not
        reported (the deadline ends the run); anything else is reported as usual."""
        if self.received and isinstance(unraisable.exc_value, (KeyboardInterrupt, SystemExit)):
            return
        hook(unraisable)


@contextlib.contextmanager
def _watch_wakeups(interrupts: Interrupts) -> Iterator[None]:
    """Make sure the main thread handles SIGINT or SIGTERM soon, whichever thread the kernel gave it to: the
    C-level handler writes the signal's number to the wake-up fd, this thread reads it and, until the main
    thread's handler has run, sends it to the main thread (``pthread_kill``). Main thread only; a wake-up fd
    already in use (e.g. an asyncio loop's) is left alone and the block runs without."""
    try:
        r, w = os.pipe()
    except OSError:
        yield
        return
    stop_r, stop_w = os.pipe()
    os.set_blocking(w, False)
    try:
        old = signal.set_wakeup_fd(w, warn_on_full_buffer=False)
    except ValueError:
        old = None
    if old not in (-1, None):  # someone else's: give it back, do without
        signal.set_wakeup_fd(old)
        old = None
    watching = old is not None

    main = threading.main_thread().ident

    def watch():
        while True:
            ready, _, _ = select.select([r, stop_r], [], [])
            if stop_r in ready:
                return
            data = os.read(r, 512)
            sigs = [b for b in data if b in (int(signal.SIGINT), int(signal.SIGTERM))]
            if sigs:
                interrupts.start_deadline(sigs[0])  # even if the handler's exception is swallowed somewhere
            if sigs and not interrupts.received:  # not handled yet: the main thread may be asleep in a wait
                signal.pthread_kill(main, sigs[0])  # its wait returns EINTR, the handler runs (once: a flag)
                select.select([stop_r], [], [], 0.2)  # its own echo on the wake-up fd comes next: pace it

    thread = threading.Thread(target=watch, name="tfpipe-signal-watch", daemon=True) if watching else None
    if thread is not None:
        thread.start()
    try:
        yield
    finally:
        if watching:
            signal.set_wakeup_fd(-1)
        os.write(stop_w, b"x")
        if thread is not None:
            thread.join()
        for fd in (r, w, stop_r, stop_w):
            os.close(fd)


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
def interruptible(grace: float = DEFAULT_GRACE) -> Iterator[Interrupts]:
    """Note SIGINT/SIGTERM during the block (main thread only; elsewhere the block runs as is); a block still
    running ``grace`` seconds after the first signal ends the process (``Interrupts.on_stuck``)."""
    got = Interrupts(grace)
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
    unraisable_hook = sys.unraisablehook
    sys.unraisablehook = functools.partial(got._unraisable, hook=unraisable_hook)
    for s in got.previous:
        signal.signal(s, got._handler)
    try:
        with _watch_wakeups(got):
            yield got
    finally:
        got.end()
        for s, prev in got.previous.items():
            signal.signal(s, prev)
        threading.excepthook = hook if not got else thread_hook
        if not got:  # after a signal the hook stays: a finalizer may still drop the signal's exception
            sys.unraisablehook = unraisable_hook
        if got:
            got.threads |= {t.ident for t in threading.enumerate()}
        quiet.inside = False
        if not got:
            for h in handlers:
                h.removeFilter(quiet)
            for args in held:
                hook(args)
        # after a signal the filter stays: the engine's threads may still log while the process exits
