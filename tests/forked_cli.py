"""The tfpipe CLI (``main(argv)``) in a forked child process that starts as a fresh ``python -c`` process running
the CLI would: its own working directory, stdin from /dev/null, stdout and stderr to files of its own (file
descriptors 1 and 2 too), Python's default SIGINT/SIGTERM handlers, warning filters, logging set-up and exception
hooks (not pytest's), no exit handler or forkserver of the test process, and the CLI's exit code
(``sys.exit(main(argv))``).

For tests that need several separate processes (simulated Processing instances that coordinate only through
storage) but not an interpreter start per process: a fork of the test process has tfpipe, boto3 and botocore's
parsed service models (``moto_s3.share_botocore_models``) already loaded, so a process costs milliseconds
instead of seconds of CPU. ``ForkedMain`` has the ``subprocess.Popen`` methods the tests use."""
from __future__ import annotations

import atexit
import os
import signal
import subprocess
import sys
import tempfile
import time

__all__ = ["ForkedMain"]


class ForkedMain:
    """``tfpipe ARGV`` in a forked child process, started at once (``new_session``: in a session of its own, as
    ``start_new_session=True`` does)."""

    def __init__(self, argv: list[str], *, cwd: str | os.PathLike | None = None, new_session: bool = False):
        self.args = list(argv)
        self.returncode: int | None = None
        self._out, self._err = tempfile.TemporaryFile(), tempfile.TemporaryFile()
        pid = os.fork()
        if pid == 0:  # the child: never returns into the test
            _child(self.args, cwd, self._out.fileno(), self._err.fileno(), new_session)
        self.pid = pid

    def poll(self) -> int | None:
        if self.returncode is None:
            done, status = os.waitpid(self.pid, os.WNOHANG)
            if done:
                self.returncode = os.waitstatus_to_exitcode(status)
        return self.returncode

    def wait(self, timeout: float | None = None) -> int:
        end = None if timeout is None else time.monotonic() + timeout
        while self.poll() is None:
            if end is not None and time.monotonic() > end:
                raise subprocess.TimeoutExpired(self.args, timeout)
            time.sleep(0.01)
        return self.returncode

    def communicate(self, timeout: float | None = None) -> tuple[str, str]:
        """Wait for the exit; return (stdout, stderr) as text."""
        self.wait(timeout)
        return self._read(self._out), self._read(self._err)

    @staticmethod
    def _read(f) -> str:
        f.seek(0)
        return f.read().decode("utf-8", "replace")

    def send_signal(self, sig: int) -> None:
        if self.poll() is None:
            os.kill(self.pid, sig)

    def terminate(self) -> None:
        self.send_signal(signal.SIGTERM)

    def kill(self) -> None:
        self.send_signal(signal.SIGKILL)


def _child(argv: list[str], cwd, out_fd: int, err_fd: int, new_session: bool) -> None:
    code = 1
    try:
        if new_session:
            os.setsid()
        if cwd is not None:
            os.chdir(cwd)
        null = os.open(os.devnull, os.O_RDONLY)
        os.dup2(null, 0)
        os.close(null)
        os.dup2(out_fd, 1)
        os.dup2(err_fd, 2)
        sys.stdin = sys.__stdin__ = open(0, closefd=False)
        sys.stdout = sys.__stdout__ = open(1, "w", closefd=False)  # block-buffered, as on a pipe
        sys.stderr = sys.__stderr__ = open(2, "w", closefd=False, buffering=1, errors="backslashreplace")
        sys.argv = ["-c", *argv]
        _fresh_process_state()
        from converters.cli.main import main

        code = main(argv)
    except SystemExit as exc:  # what the interpreter does with sys.exit(x)
        if exc.code is None or isinstance(exc.code, int):
            code = exc.code or 0
        else:
            print(exc.code, file=sys.stderr)
            code = 1
    except BaseException:  # noqa: BLE001 - an uncaught exception: its traceback, exit 1
        import traceback

        traceback.print_exc()
        code = 1
    finally:
        try:
            atexit._run_exitfuncs()  # only those the child registered (_fresh_process_state dropped the others)
            sys.stdout.flush()
            sys.stderr.flush()
        finally:
            os._exit(code & 0xFF)


def _fresh_process_state() -> None:
    """What a fresh interpreter has and the test process (pytest) changed: exit handlers, signal handlers,
    warning filters and display, logging handlers, exception hooks."""
    import logging
    import threading
    import warnings

    atexit._clear()
    signal.signal(signal.SIGINT, signal.default_int_handler)
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    warnings.filters[:] = [("default", None, DeprecationWarning, "__main__", 0),  # python3 -c's own filters
                           ("ignore", None, DeprecationWarning, None, 0),
                           ("ignore", None, PendingDeprecationWarning, None, 0),
                           ("ignore", None, ImportWarning, None, 0), ("ignore", None, ResourceWarning, None, 0)]
    warnings._filters_mutated()
    warnings._processoptions(sys.warnoptions)  # -W / PYTHONWARNINGS, as the interpreter applies them
    warnings.showwarning = warnings._showwarning_orig
    logging.disable(logging.NOTSET)
    root = logging.getLogger()
    for h in list(root.handlers):
        root.removeHandler(h)
    root.setLevel(logging.WARNING)
    sys.excepthook = sys.__excepthook__
    sys.unraisablehook = sys.__unraisablehook__
    threading.excepthook = threading.__excepthook__
    # no forkserver yet (the test process's is not this process's child: it cannot be waited for)
    from multiprocessing import forkserver

    forkserver._forkserver = fresh = forkserver.ForkServer()
    for name in ("ensure_running", "get_inherited_fds", "connect_to_new_process", "set_forkserver_preload"):
        setattr(forkserver, name, getattr(fresh, name))
