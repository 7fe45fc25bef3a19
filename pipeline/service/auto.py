"""``tfpipe service auto`` on a SageMaker heterogeneous cluster: every host reads ``resourceconfig.json`` and knows
its role. On the data group, the first host (as SageMaker lists the group) runs the dispatcher and a worker, the
other hosts a worker each; on any other group (the GPU hosts) nothing runs: trainers dial the dispatcher at
``sharding.service_address(...)``.

When to stop (the data hosts must exit for the job to end): each data host watches its own worker. Once the worker
has had tasks, and then has none for ``idle_timeout`` seconds, the host stops (a host without the dispatcher counts
its tasks as none while the dispatcher does not answer: it may have stopped first). The dispatcher's host also
reads its dispatcher's journal (``journal``): a task created there counts even when it came and went between two
looks at the worker, as a short job's task can. A worker's tasks end when the
trainers' job ends (read to its end) or is garbage collected after its clients left (released, or crashed and timed
out); the dispatcher here collects a job within 1.25 ``idle_timeout`` seconds after its last client left. No extra
ports, no messages from the trainer: a trainer that finishes, fails or is stopped all look the same. Before the
first task a host waits as long as it takes (a trainer's start can be slow), with one exception: a host without the
dispatcher whose dispatcher answered once and then has not answered for ``idle_timeout`` seconds stops too (its
worker came up after the trainers' last job had its tasks, so it never gets one, and the dispatcher's host has
stopped). SIGINT/SIGTERM stop it at any time."""
from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Callable, Mapping

from converters.util.checks import as_real
from converters.util.errors import ServiceError, TfpipeError
from sharding.groups import InstanceGroups

from .probe import dispatcher_version

__all__ = ["AutoPlan", "plan_auto", "IdleWatch", "stop_rule", "ROLES", "DEFAULT_IDLE_TIMEOUT"]

ROLES = ("dispatcher+worker", "worker", "none")
DEFAULT_IDLE_TIMEOUT = 120.0  # seconds without tasks, after the first, before a data host stops


@dataclass(frozen=True)
class AutoPlan:
    """One host's role: ``dispatcher+worker`` (the data group's first host), ``worker`` (the other data hosts)
    or ``none`` (any other group). ``dispatcher`` is ``HOST:PORT`` to dial; ``worker_host`` the name this
    host's worker gives the dispatcher (None for ``none``)."""

    role: str
    host: str
    group: str
    data_group: str
    dispatcher: str
    worker_host: str | None = None

    def __post_init__(self):
        if self.role not in ROLES:
            raise ValueError(f"role must be one of {', '.join(ROLES)}, got {self.role!r}")
        if (self.worker_host is None) != (self.role == "none"):
            raise ValueError(f"role {self.role!r} and worker_host {self.worker_host!r} disagree")


def plan_auto(groups: InstanceGroups, data_group: str, port: int, *,
              addresses: Mapping[str, str] | None = None) -> AutoPlan:
    """This host's role in ``groups`` (pure). ``addresses`` maps host names to the addresses to dial and
    advertise instead (tests run every "host" on 127.0.0.1)."""
    from sharding.groups import service_address

    addresses = dict(addresses or {})
    if groups.current_host is None or groups.current_group is None:
        raise TfpipeError("the resource config names no current host: cannot tell this host's role "
                          f"(groups {', '.join(groups.names)})")
    data_hosts = groups.hosts_of(data_group)
    dispatcher = service_address(groups, data_group, port, addresses=addresses)[len("grpc://"):]
    host = groups.current_host
    if groups.current_group != data_group:
        role = "none"
    else:
        role = "dispatcher+worker" if host == data_hosts[0] else "worker"
    return AutoPlan(role, host, groups.current_group, data_group, dispatcher,
                    None if role == "none" else addresses.get(host, host))


@dataclass
class IdleWatch:
    """The stop rule of a data host, fed the worker's task count with the time of each look (pure).

    ``observe(tasks, now)`` returns None to keep serving, or the reason to stop: the worker had tasks and then
    none (or no dispatcher) for ``idle_timeout`` seconds, or it never had one and the dispatcher has been gone
    (after answering) for ``idle_timeout`` seconds. ``created``: tasks the dispatcher created since the last look
    (its journal, where this host has it), seen or not in ``tasks``."""

    idle_timeout: float
    jobs_seen: bool = False
    idle_since: float | None = None
    _peak: int = field(default=0, repr=False)

    def __post_init__(self):
        self.idle_timeout = as_real(self.idle_timeout, "idle_timeout", above=0)

    def observe(self, tasks: int, now: float, *, dispatcher_gone: bool = False, created: int = 0) -> str | None:
        """``dispatcher_gone``: the dispatcher answered before and does not now. The worker's tasks count as
        none (they wait for a word that will not come), and before any task the clock runs as well."""
        if tasks > 0 or created > 0:
            self.jobs_seen = True
            self._peak = max(self._peak, tasks, 1)
            if not dispatcher_gone:
                if tasks > 0:
                    self.idle_since = None
                    return None
                self.idle_since = now   # its tasks came and went since the last look
        if not self.jobs_seen and not dispatcher_gone:
            self.idle_since = None
            return None
        if self.idle_since is None:
            self.idle_since = now
        if now - self.idle_since < self.idle_timeout:
            return None
        if not self.jobs_seen:
            return (f"the dispatcher has not answered for {self.idle_timeout:g} s and this worker never had a task: "
                    "the trainers are done")
        return (f"no tasks for {self.idle_timeout:g} s after serving (at most {self._peak} task(s) at once): "
                "the trainers are done")


def stop_rule(worker_server, idle_timeout: float, dispatcher: str | None = None, *, check_every: float = 5.0,
              journal: str | None = None, clock: Callable[[], float] = time.monotonic):
    """A ``serve(stop_when=...)`` callable: the ``IdleWatch`` over ``worker_server``'s task count. With
    ``dispatcher`` (a host without the dispatcher), the dispatcher is looked at every ``check_every`` seconds
    while the worker holds tasks or has had none yet; once it has answered (or the worker has had tasks), a
    look it does not answer counts it gone. Tasks count as none while it is gone: a worker whose dispatcher
    stopped first never hears that its finished tasks may go, and must not wait for that forever; nor must a
    worker that came up too late for the trainers' last job and never gets a task. A dispatcher that has never
    answered is not gone (it may still be starting). ``journal``: the work directory of the dispatcher on this
    host; every task it creates from now on counts, however short (``JournalTasks``)."""
    from .journal import JournalTasks

    watch = IdleWatch(idle_timeout)
    created = JournalTasks(journal) if journal is not None else None
    state = {"looked": float("-inf"), "gone": False, "answered": False}

    def stop_when() -> str | None:
        tasks, now = worker_server._num_tasks(), clock()
        if ((tasks or not watch.jobs_seen) and dispatcher is not None
                and now - state["looked"] >= check_every):
            state["looked"] = now
            try:
                dispatcher_version(dispatcher, min(check_every, 2.0))
                state["gone"], state["answered"] = False, True
            except ServiceError:   # a worker that has had tasks heard from the dispatcher: it answered
                state["gone"] = state["answered"] or watch.jobs_seen or tasks > 0
        return watch.observe(tasks, now, dispatcher_gone=state["gone"], created=created.new() if created else 0)
    return stop_when
