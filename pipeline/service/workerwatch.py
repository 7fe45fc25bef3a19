"""The dispatcher's side of a lost worker: a watch that asks every registered worker for its tasks and, once one
has not answered for ``worker_timeout`` seconds, reports that worker's tasks finished to the dispatcher.

Why: TensorFlow's dispatcher (2.21) never gives up on a worker under ``ShardingPolicy.DYNAMIC``. Its
``worker_timeout_ms`` only logs "Lost worker" (and moves snapshot streams); the dead worker's task stays in the
iteration, the iteration finishes only when every task has, and the trainer's client waits for that, so a
worker that never comes back hangs every trainer reading a job it had a task in. A finished task is what the
client waits for: once the dead worker's tasks are finished, the iteration finishes when the live workers'
tasks do, and each trainer's epoch ends (short by the records the dead worker held; ``pipeline.graph.service``
makes the steps up from its spare epoch). Jobs started later get a task on every registered worker, the dead
one too: the watch finishes those as they appear, while the worker stays unreachable. The dispatcher hands each
new task to its worker with a call that has no deadline, which a frozen worker (stopped, not dead) never
answers, holding the new job's start: each look at a silent worker also cuts this process's connections to it
(``connections``), so run the watch in the dispatcher's process to cover frozen workers.

How, with the dispatcher's own RPCs (the requests a worker sends): ``WorkerHeartbeat`` in the lost worker's name
with no current tasks returns the tasks the dispatcher holds for it; ``WorkerUpdate`` marks each one completed.
Only addresses the dispatcher already lists are spoken for (a heartbeat for an unknown one would register it).
A worker that answers again is left alone; its tasks already finished stay finished (their unread records are
lost), the rest it serves as before. Runs anywhere that reaches the dispatcher and the workers;
``start_dispatcher`` starts one beside its dispatcher (``serve`` stops it)."""
from __future__ import annotations

import logging
import threading
import time
from dataclasses import dataclass, field
from typing import Callable

from converters.util.checks import as_real
from converters.util.errors import ServiceError
from converters.util.protowire import field as pb_field

from .connections import cut_connections
from .probe import WORKER_SERVICE, call, dispatcher_workers, fields, split_address

__all__ = ["WorkerWatch", "DEFAULT_WORKER_TIMEOUT", "lost_worker_tasks", "finish_tasks"]

log = logging.getLogger(__name__)

DEFAULT_WORKER_TIMEOUT = 30.0   # seconds a worker may not answer before its tasks are given up (docs/offload.md)


def lost_worker_tasks(dispatcher: str, worker: str, timeout: float) -> list[int]:
    """The ids of the tasks ``dispatcher`` holds for ``worker`` (a registered address): a heartbeat in its name
    that says it runs none (``WorkerHeartbeatRequest``: worker_address = 1, current_tasks = 2; the answer's
    ``new_tasks`` = 1 are ``TaskDef``s, task_id = 4)."""
    answer = call(dispatcher, "WorkerHeartbeat", timeout, pb_field(1, worker.encode()))
    ids = []
    for number, wire, value in fields(answer):
        if number == 1 and wire == 2:
            ids += [v for n, w, v in fields(value) if n == 4 and w == 0]
    return ids


def finish_tasks(dispatcher: str, worker: str, task_ids: list[int], timeout: float) -> None:
    """Report ``task_ids`` of ``worker`` completed (``WorkerUpdateRequest``: worker_address = 1, updates = 2 of
    ``TaskProgress``: task_id = 1, completed = 2)."""
    if task_ids:
        updates = b"".join(pb_field(2, pb_field(1, t) + pb_field(2, 1)) for t in task_ids)
        call(dispatcher, "WorkerUpdate", timeout, pb_field(1, worker.encode()) + updates)


def _answers(worker: str, timeout: float) -> bool:
    try:
        call(worker, "GetWorkerTasks", timeout, service=WORKER_SERVICE, wait=False)
        return True
    except (ServiceError, ValueError):
        return False


@dataclass
class WorkerWatch:
    """Looks at the workers of ``dispatcher`` (``HOST:PORT``) every ``poll`` seconds (default: a quarter of
    ``worker_timeout``, 0.25-5 s) and finishes the tasks of any that has not answered for ``worker_timeout``
    seconds (``give_up``). ``check()`` is one look (tests call it); ``start()`` looks in a daemon thread until
    ``stop()``. ``given_up`` counts what was given up per worker address (tasks here)."""

    dispatcher: str
    worker_timeout: float = DEFAULT_WORKER_TIMEOUT
    poll: float | None = None
    clock: Callable[[], float] = time.monotonic
    given_up: dict = field(default_factory=dict)
    _seen: dict = field(default_factory=dict, repr=False)     # address -> when it last answered (or was first seen)
    _stop: threading.Event = field(default_factory=threading.Event, repr=False)
    _thread: threading.Thread | None = field(default=None, repr=False)

    def __post_init__(self):
        split_address(self.dispatcher)
        self.worker_timeout = as_real(self.worker_timeout, "worker_timeout", above=0)
        if self.poll is None:
            self.poll = min(5.0, max(0.25, self.worker_timeout / 4))
        self.poll = as_real(self.poll, "poll", above=0)

    @property
    def rpc_timeout(self) -> float:
        return min(2.0, self.poll)

    def check(self) -> dict[str, list[int]]:
        """One look: the tasks finished now, per lost worker."""
        done: dict[str, list[int]] = {}
        try:
            workers = dispatcher_workers(self.dispatcher, self.rpc_timeout)
        except ServiceError:   # the dispatcher is restarting or gone: nothing to decide now
            return done
        now = self.clock()
        for w in workers:
            if _answers(w, self.rpc_timeout):
                if self._seen.get(w, now) < now - self.worker_timeout:
                    log.info("worker %s answers again", w)
                self._seen[w] = self.clock()
                continue
            since = self._seen.setdefault(w, now)
            if now - since < self.worker_timeout:
                continue
            given = self.give_up(w, now - since)
            if given:
                done[w] = given
                self.given_up[w] = self.given_up.get(w, 0) + len(given)
        return done

    def give_up(self, worker: str, silent: float) -> list[int]:
        """What a look does about ``worker``, silent for ``silent`` seconds: finish its tasks (their ids)."""
        try:
            tasks = lost_worker_tasks(self.dispatcher, worker, self.rpc_timeout)
            finish_tasks(self.dispatcher, worker, tasks, self.rpc_timeout)
        except ServiceError as exc:
            log.warning("worker %s lost, but its tasks could not be finished now: %s", worker, exc)
            return []
        if tasks:
            log.warning("worker %s has not answered for %.0f s: its %d task(s) %s finished without it (the "
                        "records it held are lost; docs/offload.md)", worker, silent, len(tasks), tasks)
        self._cut(worker)
        return tasks

    def _cut(self, worker: str) -> None:
        """Fail the calls this process (the dispatcher's, when the watch runs beside it) has open to a silent
        worker: the dispatcher assigns each new job's task to every registered worker with a call that has no
        deadline, so a frozen worker would hold every trainer's next epoch at its start (``connections``)."""
        try:
            cut = cut_connections(worker)
        except OSError as exc:
            log.warning("worker %s does not answer, but this process's connections to it could not be cut: %s",
                        worker, exc)
            return
        if cut:
            log.info("worker %s does not answer: %d connection(s) of this process to it cut", worker, cut)

    def start(self) -> "WorkerWatch":
        if self._thread is None:
            self._thread = threading.Thread(target=self._run, name=f"tfpipe-{type(self).__name__}", daemon=True)
            self._thread.start()
        return self

    def _run(self) -> None:
        while not self._stop.wait(self.poll):
            try:
                self.check()
            except Exception as exc:   # a watch that dies would bring the hang back: log and look again
                log.warning("worker watch: %s", exc)

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(self.poll + 2 * self.rpc_timeout + 1)
