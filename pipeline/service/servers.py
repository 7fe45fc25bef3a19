"""tf.data service servers as long-running processes: a dispatcher (fault tolerant with a work directory) that
gives up the tasks of a worker lost for longer than its worker timeout (``workerwatch``), a worker that checks
its dispatcher answers before it registers, and the loop that serves until SIGINT, SIGTERM or a stop condition,
then stops the servers. Each listens on one address (``bind``, default ``127.0.0.1``: this host only; ``bindaddr``),
and is refused if the kernel shows it listening anywhere else. Library code: the CLI (``service/cli.py``) prints."""
from __future__ import annotations

import logging
import os
import signal
import socket
import threading
import time
from dataclasses import dataclass
from typing import Callable

from converters.util.checks import as_int, as_real
from converters.util.errors import ServiceError

from .bindaddr import LOOPBACK, bound_to, is_wildcard, listen_addresses, resolve_bind
from .probe import check_port_free, dispatcher_version, split_address
from .workerwatch import DEFAULT_WORKER_TIMEOUT, WorkerWatch

__all__ = ["Dispatcher", "Worker", "start_dispatcher", "start_worker", "serve", "DEFAULT_WORKER_PORT",
           "DEFAULT_WORKER_TIMEOUT", "HEARTBEAT_MS", "host_port"]

log = logging.getLogger(__name__)

DEFAULT_WORKER_PORT = 0  # any free port: the worker tells the dispatcher where it listens
HEARTBEAT_MS = 1000      # a worker's heartbeat (TensorFlow's default: 30 s), well inside any worker timeout: the
                         # dispatcher's own "Lost worker" (worker_timeout_ms, set to ours) never names a live one


@dataclass(frozen=True)
class Dispatcher:
    """A started dispatcher: the server, the port it listens on, its work directory (None: not fault tolerant),
    the watch that gives up lost workers' tasks (None: lost workers are waited for), and the address it listens
    on (``0.0.0.0``: every interface)."""

    server: object
    port: int
    work_dir: str | None
    watch: WorkerWatch | None = None
    bind: str = LOOPBACK

    @property
    def fault_tolerant(self) -> bool:
        return self.work_dir is not None


@dataclass(frozen=True)
class Worker:
    """A started worker: the server, the address it gave the dispatcher, the dispatcher's address, and the
    address it listens on (``0.0.0.0``: every interface)."""

    server: object
    address: str
    dispatcher: str
    bind: str = LOOPBACK


def _tf_service():
    import tensorflow as tf

    return tf.data.experimental.service


def _first_line(exc: BaseException) -> str:
    text = getattr(exc, "message", None) or str(exc) or type(exc).__name__
    return text.strip().splitlines()[0]


def host_port(host: str, port: int | str) -> str:
    """``HOST:PORT``, an IPv6 address in brackets."""
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


def _where(bind: str) -> str:
    return "" if is_wildcard(bind) else f" (is {bind} an address of this host? see --bind)"


def _started(server, what: str, port: int, bind: str, stop: Callable[[], None]) -> None:
    """Refuse (stop, ``ServiceError``) a server the kernel shows listening anywhere but ``bind``."""
    if is_wildcard(bind):
        return
    where = listen_addresses(port)
    if where != [bind]:
        stop()
        raise ServiceError(f"{what} listened on {', '.join(where) or 'nothing'} at port {port}, not on {bind} only: "
                           "stopped; pass --bind 0.0.0.0 to listen on every interface (docs/offload.md, trust model)")


def start_dispatcher(port: int, work_dir: str | None = None, *, job_gc_timeout: float | None = None,
                     worker_timeout: float | None = DEFAULT_WORKER_TIMEOUT, bind: str = LOOPBACK) -> Dispatcher:
    """Start a dispatcher on ``port`` of this host (0: any free port; ``Dispatcher.port`` says which). With
    ``work_dir`` it is fault tolerant: it journals its state there, and one restarted with the same directory
    (on the same port) keeps its datasets, jobs and workers. ``job_gc_timeout``: seconds a job without clients
    lives on (TensorFlow's default: 5 minutes); the dispatcher then looks for such jobs every quarter of it
    (TensorFlow's default: every 10 minutes, whatever the timeout), so one is collected within 1.25 times it.
    ``worker_timeout``: seconds a registered worker may not answer before its tasks are given up, so that
    trainers go on without it (``workerwatch``; None: wait for it to come back at its address, TensorFlow's own
    behaviour). ``bind``: the address it listens on (an IP address or host name; ``0.0.0.0``: every interface,
    anyone who reaches the port can use it: docs/offload.md)."""
    bind = resolve_bind(bind)
    port = as_int(port, "port", minimum=0, maximum=65535, must="a TCP port in [0, 65535] (0: any free port)")
    if port:
        check_port_free(port, "dispatcher")
    if work_dir is not None:
        work_dir = os.path.abspath(work_dir)
        try:
            os.makedirs(work_dir, exist_ok=True)
        except OSError as exc:
            raise ServiceError(f"dispatcher: cannot use work directory {work_dir}: {exc.strerror}") from None
    extra = {}
    if job_gc_timeout is not None:
        extra["job_gc_timeout_ms"] = int(as_real(job_gc_timeout, "job_gc_timeout", above=0) * 1000)
        extra["job_gc_check_interval_ms"] = max(1, extra["job_gc_timeout_ms"] // 4)
    if worker_timeout is not None:
        worker_timeout = as_real(worker_timeout, "worker_timeout", above=0)
        extra["worker_timeout_ms"] = max(1, int(worker_timeout * 1000))   # TensorFlow only logs "Lost worker"
    service = _tf_service()
    config = service.DispatcherConfig(port=port, work_dir=work_dir, fault_tolerant_mode=work_dir is not None, **extra)
    try:
        with bound_to(bind):
            server = service.DispatchServer(config)
    except ServiceError:
        raise
    except Exception as exc:  # TensorFlow's own errors (a journal it cannot read, a bind it refuses)
        raise ServiceError(f"dispatcher on {host_port(bind, port)} did not start: {_first_line(exc)}{_where(bind)}"
                           ) from None
    port = int(server.target.rpartition(":")[2])  # the port chosen when port=0
    _started(server, "dispatcher", port, bind, server._stop)
    watch = None
    if worker_timeout is not None:
        watch = WorkerWatch(host_port(LOOPBACK if is_wildcard(bind) else bind, port), worker_timeout).start()
    log.info("dispatcher started on %s (work dir %s, worker timeout %s s)", host_port(bind, port), work_dir,
             worker_timeout)
    return Dispatcher(server, port, work_dir, watch, bind)


def start_worker(dispatcher: str, *, port: int = DEFAULT_WORKER_PORT, address: str | None = None,
                 timeout: float = 60.0, bind: str = LOOPBACK) -> Worker:
    """Start a worker that serves the dispatcher at ``dispatcher`` (``HOST:PORT`` or ``grpc://HOST:PORT``).

    ``port``: the worker's port (0: any free one); ``bind``: the address it listens on (default ``127.0.0.1``;
    ``0.0.0.0``: every interface); ``address``: the host name trainers reach this worker at (default: the
    ``bind`` address, or this host's name when it listens on every interface; TensorFlow's own default,
    ``localhost``, is wrong for every other host). The dispatcher must answer within ``timeout`` seconds, else
    ``ServiceError``."""
    bind = resolve_bind(bind)
    port = as_int(port, "port", minimum=0, maximum=65535, must="a TCP port in [0, 65535] (0: any free port)")
    timeout = as_real(timeout, "timeout", above=0)
    host, dport = split_address(dispatcher)
    if port:
        check_port_free(port, "worker")
    dispatcher_version(f"{host}:{dport}", timeout)  # before TensorFlow's endless registration retries
    address = address or (socket.gethostname() if is_wildcard(bind) else bind)
    service = _tf_service()
    config = service.WorkerConfig(dispatcher_address=host_port(host, dport),
                                  worker_address=host_port(address, "%port%"), port=port,
                                  heartbeat_interval_ms=HEARTBEAT_MS)
    try:
        with bound_to(bind):
            server = service.WorkerServer(config)
    except ServiceError:
        raise
    except Exception as exc:
        raise ServiceError(f"worker on {host_port(bind, port)} did not start: {_first_line(exc)}{_where(bind)}"
                           ) from None
    bound = int(server._address.rpartition(":")[2])  # the port chosen when port=0
    _started(server, "worker", bound, bind, server._stop)
    log.info("worker %s registered with %s, listening on %s", host_port(address, bound), host_port(host, dport),
             host_port(bind, bound))
    return Worker(server, host_port(address, bound), host_port(host, dport), bind)


def serve(servers: list, *, stop_when: Callable[[], str | None] | None = None, ready: Callable[[], None] | None = None,
          poll: float = 0.5) -> str:
    """Serve until SIGINT or SIGTERM arrives (returns ``"SIGINT"`` / ``"SIGTERM"``) or ``stop_when()`` returns a
    reason (returned), checked every ``poll`` seconds; then stop ``servers`` (workers first: list them so) and
    restore the signal handlers. ``ready()`` is called once the signals are caught (announce the servers there:
    a signal sent on that announcement then stops them cleanly)."""
    got: list[str] = []
    wake = threading.Event()

    def handler(signum, frame):
        got.append(signal.Signals(signum).name)
        wake.set()

    previous = {}
    if threading.current_thread() is threading.main_thread():
        for sig in (signal.SIGINT, signal.SIGTERM):
            previous[sig] = signal.signal(sig, handler)
    try:
        if ready is not None:
            ready()
        reason = None
        while reason is None:
            wake.wait(poll)
            if got:
                reason = got[0]
            elif stop_when is not None:
                reason = stop_when()
    finally:
        for sig, old in previous.items():
            signal.signal(sig, old)
    for s in servers:
        started = time.monotonic()
        if getattr(s, "watch", None) is not None:
            s.watch.stop()
        try:
            s.server.stop()
        except Exception as exc:  # stopping is best effort: the process ends next
            log.warning("stopping %s: %s", type(s).__name__.lower(), _first_line(exc))
        log.debug("%s stopped in %.3f s", type(s).__name__.lower(), time.monotonic() - started)
    return reason
