"""How a Beam run stops on a signal: its worker processes quiet and stopped with the driver, and the state
sampler of the bundle the signal interrupted ended (``engines.beam`` runs the pipeline inside
``interrupt.interruptible``). Imported only by ``engines.beam``, after ``apache_beam``."""
from __future__ import annotations

import contextlib
import logging
import os
import sys
import threading

__all__ = ["quiet_workers", "stop_interrupted_sampler", "worker_argv"]

log = logging.getLogger(__name__)


@contextlib.contextmanager
def quiet_workers(interrupts):
    """Worker processes of ``direct_running_mode=multi_processing`` ignore SIGINT and SIGTERM (a Ctrl-C or a
    ``kill`` of the process group reaches them too: the driver alone stops the run, and ends them), die with
    the driver on Linux (``PR_SET_PDEATHSIG``: a driver killed with SIGKILL takes its workers along, silently)
    — both set by a small exec wrapper — and write nothing to the terminal (their errors come back through
    the runner). On a signal the driver kills them first (Beam's clean-up waits for them). No Python
    runs in the forked child (no ``preexec_fn``): after a fork from the threaded driver, importing or running
    at-fork hooks there could wait forever on a lock another thread held (seen: a run hanging at start, its
    second worker never exec'd). Scoped to Beam's module that starts them."""
    import subprocess
    import types

    from apache_beam.runners.portability import local_job_service

    started = []
    lock = threading.Lock()  # a worker starting while the signal's stop runs (another thread) is stopped too
    stopping = []

    def popen(args, *rest, **kwargs):
        if not log.isEnabledFor(logging.DEBUG):
            kwargs.setdefault("stderr", subprocess.DEVNULL)
        args, kwargs["shell"] = worker_argv(args, bool(kwargs.get("shell"))), False
        with lock:
            proc = subprocess.Popen(args, *rest, **kwargs)
            started.append(proc)
            if stopping or interrupts:  # started as (or after) the signal came: stopped as the others
                proc.kill()
        return proc

    def stop_workers():
        with lock:
            stopping.append(True)
            for proc in started:
                if proc.poll() is None:
                    proc.kill()

    interrupts.on_signal.append(stop_workers)

    real = local_job_service.subprocess
    shim = types.SimpleNamespace(**{k: getattr(subprocess, k) for k in dir(subprocess) if not k.startswith("__")})
    shim.Popen = popen
    local_job_service.subprocess = shim
    try:
        yield
    finally:
        local_job_service.subprocess = real


# Run as ``python -S -c _WORKER_WRAPPER DRIVER_PID ARGV...``: ignore SIGINT/SIGTERM and ask the kernel for
# SIGKILL when the parent dies (Linux), both kept across exec; give up if the driver is already gone; then
# become the worker.
_WORKER_WRAPPER = (
    "import os, signal, sys\n"
    "signal.signal(signal.SIGINT, signal.SIG_IGN)\n"
    "signal.signal(signal.SIGTERM, signal.SIG_IGN)\n"
    "try:\n"
    "    import ctypes\n"
    "    ctypes.CDLL(None).prctl(1, 9)\n"
    "except (ImportError, OSError, AttributeError):\n"
    "    pass\n"
    "if os.getppid() != int(sys.argv[1]):\n"
    "    os._exit(137)\n"
    "os.execvp(sys.argv[2], sys.argv[2:])\n")


def worker_argv(args, shell: bool) -> list[str]:
    """The argv that starts Beam's worker command ``args`` under the signal and exit-with-the-driver wrapper (a shell
    command line runs as ``/bin/sh -c "exec ..."``: the worker itself, not a shell around it, is the process
    to stop)."""
    if shell or isinstance(args, (str, bytes, os.PathLike)):
        cmd = os.fsdecode(args)
        argv = ["/bin/sh", "-c", f"exec {cmd}"] if shell else [cmd]
    else:
        argv = [os.fsdecode(a) for a in args]
    if os.name != "posix":
        return argv
    return [sys.executable, "-S", "-c", _WORKER_WRAPPER, str(os.getpid()), *argv]


def stop_interrupted_sampler() -> None:
    """Stop the state sampler of the bundle a signal interrupted in this thread, if Beam left it running.

    Beam's bundle processor starts a sampler thread (not a daemon) per bundle and stops it in a ``finally``
    only if the sampler says it started; ``StateSampler.start`` says so after the thread's start returned.
    A signal's exception raised in between (the thread's start waits for the new thread to run: a wide
    window on a loaded host) leaves a sampler thread that never ends, and the interpreter waits for it
    forever at exit (seen: a Ctrl-C'd conversion that printed its line and never exited). The sampler is
    the thread's current tracker until stopped."""
    from apache_beam.runners.worker import statesampler

    sampler = statesampler.get_current_tracker()
    if sampler is None or sampler.finished:
        return
    try:
        sampler.stop()  # finished: its thread's next wake-up (every 200 ms at most) ends it; joined
    except Exception:  # noqa: BLE001 - a sampler whose thread was never started has nothing to join
        statesampler.set_current_tracker(None)
