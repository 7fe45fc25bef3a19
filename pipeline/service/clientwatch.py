"""The trainer's side of a frozen worker: a watch in the trainer's process that drops its connections to a worker
that has not answered for ``service_worker_timeout`` seconds.

Why: a frozen worker (stopped, not dead: SIGSTOP, a hung host, a paused VM) keeps its TCP connections open, and
the kernel acknowledges what the trainer sends, so TensorFlow's client waits on its request for an element
forever (it sets no deadline): the dispatcher giving the worker's tasks up (``workerwatch``) does not reach a
request already sent. A dead worker's connections are reset by its host, the request fails and the client goes on
without the task. The watch makes a frozen worker look the same: it shuts down this process's sockets connected
to the worker (``shutdown``, the socket stays TensorFlow's to close), the request fails, and TensorFlow's client
treats the worker as gone (it retries it, and stops once the dispatcher has given its task up). A worker that
answers again is connected to again. One watch per dispatcher and timeout in a process, started by
``pipeline.graph.service``; it looks like ``WorkerWatch`` (the dispatcher's worker list, a ``GetWorkerTasks``
to each worker) and lives as long as the process."""
from __future__ import annotations

import logging
import threading

from converters.util.errors import ServiceError

from .connections import cut_connections
from .workerwatch import WorkerWatch

__all__ = ["ClientWatch", "client_watch"]

log = logging.getLogger(__name__)

_watches: dict[tuple[str, float], "ClientWatch"] = {}
_lock = threading.Lock()


class ClientWatch(WorkerWatch):
    """``WorkerWatch`` whose step for a silent worker is :func:`cut_connections` in this process."""

    def give_up(self, worker: str, silent: float) -> list[int]:
        try:
            cut = cut_connections(worker)
        except (OSError, ServiceError) as exc:
            log.warning("worker %s does not answer, but this trainer's connections to it could not be cut: %s",
                        worker, exc)
            return []
        if cut:
            log.warning("worker %s has not answered for %.0f s: %d connection(s) of this trainer to it cut, as "
                        "for a lost worker (docs/offload.md)", worker, silent, cut)
        return [cut] if cut else []


def client_watch(dispatcher: str, worker_timeout: float) -> ClientWatch:
    """The running watch of this process for ``dispatcher`` (``HOST:PORT``) and ``worker_timeout``."""
    key = (dispatcher, float(worker_timeout))
    with _lock:
        watch = _watches.get(key)
        if watch is None:
            watch = _watches[key] = ClientWatch(dispatcher, worker_timeout).start()
        return watch
