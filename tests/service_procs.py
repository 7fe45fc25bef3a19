"""Real ``tfpipe service ...`` processes for the tests: start one, wait for a line it prints, signal it, collect its
exit code and output; free ports; a tf.data pipeline read through a dispatcher; fixtures: an in-process dispatcher
with two workers (``service``), a port where no dispatcher listens (``listener``)."""
from __future__ import annotations

import os
import queue
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
START_TIMEOUT = 180.0  # seconds for a server to print its start line (TensorFlow's import on a busy host)


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Proc:
    """One ``tfpipe`` process; its stdout lines are read as they come, stderr collected. ``env``: variables
    set for it on top of this process's."""

    def __init__(self, *argv: str, env: dict[str, str] | None = None):
        env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]),
               **(env or {})}
        self.argv = argv
        self.started = time.monotonic()
        self.p = subprocess.Popen([sys.executable, "-m", "converters.cli", *argv], stdout=subprocess.PIPE,
                                  stderr=subprocess.PIPE, text=True, env=env, cwd=str(ROOT))
        self.lines: list[str] = []
        self._q: queue.Queue = queue.Queue()
        self._err: list[str] = []
        threading.Thread(target=self._pump, args=(self.p.stdout, self._q), daemon=True).start()
        threading.Thread(target=lambda: self._err.extend(self.p.stderr), daemon=True).start()

    @staticmethod
    def _pump(stream, q):
        for line in stream:
            q.put(line.rstrip("\n"))
        q.put(None)

    def wait_line(self, needle: str, timeout: float = START_TIMEOUT) -> str:
        """The first stdout line containing ``needle``; AssertionError (with the output) if none comes."""
        deadline = time.monotonic() + timeout
        while True:
            try:
                line = self._q.get(timeout=max(deadline - time.monotonic(), 0.01))
            except queue.Empty:
                line = None
            if line is None:  # stdout closed (the process ended) or the time is up
                try:
                    self.p.wait(10)
                except subprocess.TimeoutExpired:
                    pass
                raise AssertionError(f"{' '.join(self.argv)}: no line with {needle!r} (exit {self.p.returncode}); "
                                     f"stdout {self.lines}, stderr {self.stderr[-2000:]}")
            self.lines.append(line)
            if needle in line:
                return line

    def signal(self, sig: int = signal.SIGTERM) -> None:
        self.p.send_signal(sig)

    def finish(self, timeout: float = 60.0) -> int | None:
        """The exit code, or None if the process still runs after ``timeout`` seconds."""
        try:
            rc = self.p.wait(timeout)
        except subprocess.TimeoutExpired:
            rc = None
        while True:
            try:
                line = self._q.get(timeout=5)
            except queue.Empty:
                break
            if line is None:
                break
            self.lines.append(line)
        return rc

    @property
    def stderr(self) -> str:
        return "".join(self._err)

    def kill(self) -> None:
        if self.p.poll() is None:
            self.p.kill()
            self.p.wait(30)


def read_through(dispatcher: str, n: int, mode: str = "distributed_epoch", job_name: str | None = None) -> list[int]:
    """``range(n)`` read through the tf.data service at ``dispatcher`` (``grpc://HOST:P``), sorted. The iterator
    is gone on return (collected, even from a reference cycle): its client stops heart-beating, as a trainer
    process that ends does, so the job can finish and the workers see no tasks."""
    import gc

    import tensorflow as tf

    ds = tf.data.Dataset.range(n).apply(tf.data.experimental.service.distribute(mode, dispatcher, job_name=job_name))
    it = iter(ds)
    out = sorted(int(x) for x in it)
    del it, ds
    gc.collect()
    return out


@pytest.fixture(scope="module")
def service():
    """An in-process dispatcher with two workers started as ``tfpipe service worker`` starts them
    (``start_worker``: among else its 1 s heartbeat; stopping a worker waits for the next beat while holding the
    GIL, which at TensorFlow's default interval, 30 s, freezes the test process for up to half a minute): the
    dispatcher's ``grpc://`` address."""
    import tensorflow as tf

    from pipeline.service.servers import start_worker

    svc = tf.data.experimental.service
    dispatcher = svc.DispatchServer(svc.DispatcherConfig(port=0))
    addr = f"127.0.0.1:{dispatcher.target.rsplit(':', 1)[1]}"
    workers = [start_worker(addr) for _ in range(2)]
    yield f"grpc://{addr}"
    for w in workers:
        w.server._stop()
    dispatcher._stop()


@pytest.fixture
def listener():
    """A TCP port where something that is no dispatcher listens (accepts, never speaks HTTP/2)."""
    s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    s.bind(("127.0.0.1", 0))
    s.listen(8)
    yield s.getsockname()[1]
    s.close()
