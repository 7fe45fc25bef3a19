"""Ctrl-C ends a test run within seconds, with ``-n`` (pytest-xdist) too; hooks imported by ``conftest.py``.

Ctrl-C sends SIGINT to the terminal's process group: the controller and its workers. Three things kept a run
going: a test that catches the ``KeyboardInterrupt`` (the CLI's ``main()`` called in-process returns 130, a
product's own signal handler) lets its worker go on to the next test; xdist's controller then waits 10 s for
its workers before it kills them, and the worker waits 5 s more before it interrupts itself; a second Ctrl-C
during that wait raised out of xdist's clean-up (``PluggyTeardownRaisedWarning``), and the controller exited
leaving its workers (and what they had started in sessions of their own) running.

A SIGINT that arrives while Python runs a garbage-collector callback (hypothesis installs one) raises there, where
the ``KeyboardInterrupt`` is reported as unraisable and lost: the run goes on as if there had been no Ctrl-C.

So, in every pytest process: a SIGINT is noted, and raised as usual until pytest has caught one (a lost one does
not count), and no test starts after one; and in the controller of an interrupted run: its workers get
``WORKER_GRACE`` seconds to end, further Ctrl-Cs do not interrupt the clean-up, every process the run started
that is still alive then (workers, their children, children in sessions of their own) is killed, and the
controller itself exits within ``EXIT_GRACE`` seconds of that (past it, a watchdog prints where its threads
waited and ends it with the interrupted run's exit code)."""
from __future__ import annotations

import os
import signal
import time

import pytest

__all__ = ["WORKER_GRACE", "EXIT_GRACE", "descendants", "pytest_configure", "pytest_keyboard_interrupt",
           "pytest_runtest_protocol", "pytest_sessionfinish"]

WORKER_GRACE = 2.0   # seconds the workers of an interrupted xdist run get to end by themselves
EXIT_GRACE = 5 * WORKER_GRACE   # seconds an interrupted controller gets, after its clean-up, to report and exit

_interrupted: list[float] = []   # monotonic times of the SIGINTs this process received (its own handler)
_caught: list[float] = []        # monotonic times pytest caught a KeyboardInterrupt in this process


def _note_sigint(signum, frame):
    """A SIGINT raises until pytest has caught a ``KeyboardInterrupt`` (one raised in a garbage-collector callback
    is lost, so the next Ctrl-C must raise again); one during the clean-up that the caught one started does not
    abandon that clean-up, which ends within seconds (``WORKER_GRACE``); a Ctrl-C long after it raises again."""
    now = time.monotonic()
    _interrupted.append(now)
    if not _caught or now - _caught[0] > 5 * WORKER_GRACE:
        raise KeyboardInterrupt


@pytest.hookimpl(tryfirst=True)
def pytest_keyboard_interrupt(excinfo):
    """pytest caught a ``KeyboardInterrupt``: the clean-up it starts is not interrupted by the next Ctrl-C."""
    _caught.append(time.monotonic())


def pytest_configure(config):
    """Note SIGINT in this process (controller, worker or a plain run); Python's own handler does only the raise.
    A run started with SIGINT ignored (a shell's background job, ``nohup``) gets the handler too: an ignored
    SIGINT is inherited across ``exec``, and the tests' child processes must take a Ctrl-C as a user's would."""
    if signal.getsignal(signal.SIGINT) in (signal.default_int_handler, signal.SIG_IGN):
        signal.signal(signal.SIGINT, _note_sigint)


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_protocol(item, nextitem):
    """No test starts in a process that was interrupted, even when the test that was running swallowed it."""
    if _interrupted:
        raise KeyboardInterrupt


def _stat(pid: int) -> tuple[int, int] | None:
    """(parent pid, start time) of a live process, None if gone or a zombie."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return None
    return None if fields[0] == "Z" else (int(fields[1]), int(fields[19]))


def descendants(root: int) -> dict[int, int]:
    """Every live process below ``root`` (children in sessions of their own too): pid -> start time."""
    stats = {int(p): s for p in os.listdir("/proc") if p.isdigit() and (s := _stat(int(p))) is not None}
    found: dict[int, int] = {}
    todo = [root]
    while todo:
        parent = todo.pop()
        for pid, (ppid, started) in stats.items():
            if ppid == parent and pid not in found:
                found[pid] = started
                todo.append(pid)
    return found


@pytest.hookimpl(hookwrapper=True, tryfirst=True)
def pytest_sessionfinish(session, exitstatus):
    """Around xdist's shutdown of its workers in an interrupted run: a short wait, then nothing of it left."""
    dsession = session.config.pluginmanager.getplugin("dsession")
    nodes = getattr(dsession, "nodemanager", None)
    if exitstatus != pytest.ExitCode.INTERRUPTED or nodes is None or not os.path.isdir("/proc"):
        yield
        return
    previous = signal.signal(signal.SIGINT, _note_quietly)   # a further Ctrl-C: the clean-up goes on
    tree: dict[int, int] = {}
    try:
        tree = descendants(os.getpid())
        nodes.EXIT_TIMEOUT = WORKER_GRACE
        yield
    finally:
        for pid, started in {**tree, **descendants(os.getpid())}.items():
            stat = _stat(pid)
            if stat is not None and stat[1] == started:
                try:
                    os.kill(pid, signal.SIGKILL)
                except OSError:
                    pass
        signal.signal(signal.SIGINT, previous)
        _exit_within(EXIT_GRACE)


def _exit_within(seconds: float) -> None:
    """The interrupted controller exits within ``seconds`` whatever holds it up after the clean-up (a thread
    or exit handler that waits on something): past them, a watchdog writes where each thread was, then ends
    the process with the interrupted run's exit code."""
    import faulthandler
    import sys
    import threading

    deadline = time.monotonic() + seconds

    def watch():
        while time.monotonic() < deadline:
            time.sleep(0.1)
        try:
            sys.stdout.flush()
            sys.stderr.write(f"\nthe interrupted run did not exit within {seconds:g} s of its clean-up; "
                             "its threads:\n")
            sys.stderr.flush()
            faulthandler.dump_traceback(file=sys.stderr, all_threads=True)
        finally:
            os._exit(int(pytest.ExitCode.INTERRUPTED))

    threading.Thread(target=watch, name="ctrl-c-exit-watchdog", daemon=True).start()


def _note_quietly(signum, frame):
    _interrupted.append(time.monotonic())
