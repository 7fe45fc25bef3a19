"""``tfpipe service dispatcher | worker | auto``: tf.data service servers from the command line. Each prints one
line when it serves (its address and mode) and one when it stops; SIGINT and SIGTERM stop it cleanly (exit 0);
a taken port or a dispatcher that does not answer within --timeout is one error line (exit 7). A server listens on
one address (--bind): this host only (127.0.0.1) unless asked; ``auto`` on the cluster's private address. Anyone
who reaches a server's port can run graphs on its host: docs/offload.md, trust model."""
from __future__ import annotations

import argparse

from converters.cli.types import duration_seconds
from sharding.groups import DEFAULT_SERVICE_PORT
from sharding.topology import SAGEMAKER_CONFIG_DIR

__all__ = ["register"]


def tcp_port(text: str) -> int:
    """A TCP port, 0..65535 (0: any free port, where a command allows it)."""
    try:
        v = int(text)
    except ValueError:
        v = -1
    if not 0 <= v <= 65535:
        raise argparse.ArgumentTypeError(f"expected a TCP port in [0, 65535], got {text!r}")
    return v


def host_address(text: str) -> tuple[str, str]:
    """``HOST=ADDRESS``: dial and advertise ADDRESS for the resource config's host name HOST."""
    host, sep, address = text.partition("=")
    if not sep or not host or not address:
        raise argparse.ArgumentTypeError(f"expected HOST=ADDRESS, got {text!r}")
    return host, address


def register(sub) -> None:
    p = sub.add_parser("service", help="run tf.data service servers: a dispatcher, a worker, or the roles of a "
                                       "SageMaker heterogeneous cluster")
    ssub = p.add_subparsers(dest="service_command", metavar="COMMAND")
    ssub.required = True

    d = ssub.add_parser("dispatcher", help="run a tf.data service dispatcher until SIGINT/SIGTERM")
    d.add_argument("--port", type=tcp_port, default=DEFAULT_SERVICE_PORT, metavar="P",
                   help=f"the port trainers and workers dial (default {DEFAULT_SERVICE_PORT}; 0: any free port)")
    _bind(d, "127.0.0.1: this host only")
    _work_dir(d)
    _worker_timeout(d)
    d.set_defaults(func=_dispatcher)

    w = ssub.add_parser("worker", help="run a tf.data service worker for a dispatcher until SIGINT/SIGTERM")
    w.add_argument("--dispatcher", required=True, metavar="HOST:P", help="the dispatcher's address (required)")
    w.add_argument("--port", type=tcp_port, default=0, metavar="Q", help="the worker's port (default 0: any free port)")
    w.add_argument("--address", metavar="HOST", help="the host name trainers reach this worker at (default: the --bind "
                                                    "address; this host's name with --bind 0.0.0.0)")
    _bind(w, "127.0.0.1: this host only")
    _timeout(w)
    w.set_defaults(func=_worker)

    a = ssub.add_parser("auto", help="on a SageMaker heterogeneous cluster: dispatcher and workers on the data "
                                     "group, nothing on the others; stop when the trainers are done")
    a.add_argument("--data-group", required=True, metavar="NAME",
                   help="the instance group that runs the servers (required)")
    a.add_argument("--config-dir", default=SAGEMAKER_CONFIG_DIR, metavar="DIR",
                   help=f"directory of resourceconfig.json (default {SAGEMAKER_CONFIG_DIR})")
    a.add_argument("--port", type=tcp_port, default=DEFAULT_SERVICE_PORT, metavar="P",
                   help=f"the dispatcher's port on the data group's first host (default {DEFAULT_SERVICE_PORT})")
    a.add_argument("--worker-port", type=tcp_port, default=0, metavar="Q",
                   help="each data host's worker port (default 0: any free port)")
    _work_dir(a)
    _worker_timeout(a)
    a.add_argument("--idle-timeout", type=duration_seconds, default=120.0, metavar="SECONDS",
                   help="stop a data host when its worker has had no task for this long after its first "
                        "(default 120)")
    a.add_argument("--host-address", type=host_address, action="append", default=[], metavar="HOST=ADDRESS",
                   help="dial and advertise ADDRESS for host HOST of the resource config (repeatable; default: "
                        "the host names)")
    _bind(a, "this host's private address: its --host-address, else the address of the resource config's "
             "network_interface_name, else its host name's")
    _timeout(a)
    a.set_defaults(func=_auto)


def _bind(p, default: str) -> None:
    p.add_argument("--bind", metavar="ADDRESS",
                   help=f"the address to listen on (default {default}); 0.0.0.0: every interface. No authentication: "
                        "anyone who reaches the port can run graphs on this host (docs/offload.md, trust model)")


def _work_dir(p) -> None:
    p.add_argument("--work-dir", metavar="DIR",
                   help="journal the dispatcher's state here: fault tolerant, a restart with the same --work-dir "
                        "and --port keeps its jobs (default: none, not fault tolerant)")


def _worker_timeout(p) -> None:
    from .workerwatch import DEFAULT_WORKER_TIMEOUT

    p.add_argument("--worker-timeout", type=duration_seconds, default=DEFAULT_WORKER_TIMEOUT, metavar="SECONDS",
                   help="give up the tasks of a worker that has not answered for this long, so that trainers go "
                        f"on without it (default {DEFAULT_WORKER_TIMEOUT:g}; its unsent records are lost, "
                        "docs/offload.md)")


def _timeout(p) -> None:
    p.add_argument("--timeout", type=duration_seconds, default=60.0, metavar="SECONDS",
                   help="how long to wait for the dispatcher to answer (default 60)")


def _say(line: str) -> None:
    print(line, flush=True)


def _listening(server) -> str:
    from .bindaddr import is_wildcard

    if is_wildcard(server.bind):
        return "listening on every interface, no authentication"
    return f"listening on {server.bind} only"


def _mode(dispatcher, *, private: bool = False) -> str:
    """``private``: its work directory is a temporary one of ``auto`` (for its stop rule), removed when it stops."""
    lost = f"; lost workers given up after {dispatcher.watch.worker_timeout:g} s" if dispatcher.watch else ""
    if dispatcher.fault_tolerant and not private:
        return f"fault tolerant, work dir {dispatcher.work_dir}{lost}"
    return f"not fault tolerant: no --work-dir, a restart loses its jobs{lost}"


def _dispatcher(args: argparse.Namespace) -> int:
    import socket

    from .servers import serve, start_dispatcher

    from .bindaddr import LOOPBACK, is_wildcard
    from .servers import host_port

    d = start_dispatcher(args.port, args.work_dir, worker_timeout=args.worker_timeout, bind=args.bind or LOOPBACK)
    host = socket.gethostname() if is_wildcard(d.bind) else d.bind
    reason = serve([d], ready=lambda: _say(f"dispatcher serving grpc://{host_port(host, d.port)} ({_listening(d)}; "
                                           f"{_mode(d)})"))
    _say(f"dispatcher stopped ({reason})")
    return 0


def _worker(args: argparse.Namespace) -> int:
    from .servers import serve, start_worker

    from .bindaddr import LOOPBACK

    w = start_worker(args.dispatcher, port=args.port, address=args.address, timeout=args.timeout,
                     bind=args.bind or LOOPBACK)
    reason = serve([w], ready=lambda: _say(f"worker serving {w.address} for dispatcher grpc://{w.dispatcher} "
                                           f"({_listening(w)})"))
    _say(f"worker stopped ({reason})")
    return 0


def _auto(args: argparse.Namespace) -> int:
    import os
    import shutil
    import tempfile

    from converters.util.errors import TfpipeError
    from sharding.topology import Topology

    from .auto import plan_auto, stop_rule
    from .servers import serve, start_dispatcher, start_worker

    if args.port == 0:
        raise ValueError("--port 0: the data group's dispatcher needs a fixed port that every host knows")
    path = os.path.join(args.config_dir, "resourceconfig.json")
    interface = _resource_config(path).get("network_interface_name")
    topo = Topology.from_env({}, config_dir=args.config_dir, processing_config_dir=None)
    if topo.instance_groups is None:
        raise TfpipeError(f"{path} has no instance_groups: not a heterogeneous cluster (run 'tfpipe service "
                          "dispatcher' and 'tfpipe service worker' yourself)")
    plan = plan_auto(topo.instance_groups, args.data_group, args.port, addresses=dict(args.host_address))
    where = f"{plan.host} ({plan.group})"
    if plan.role == "none":
        _say(f"auto: {where}: not the data group, nothing to run here; trainers dial grpc://{plan.dispatcher}")
        return 0
    bind = args.bind or auto_bind(plan.worker_host, plan.host in dict(args.host_address), interface)
    servers, journal = [], None
    try:
        if plan.role == "dispatcher+worker":
            # the stop rule reads the dispatcher's journal: without --work-dir, one in a private directory
            journal = args.work_dir or tempfile.mkdtemp(prefix="tfpipe-dispatcher-")
            d = start_dispatcher(args.port, journal, job_gc_timeout=args.idle_timeout,
                                 worker_timeout=args.worker_timeout, bind=bind)
            servers.append(d)
        w = start_worker(plan.dispatcher, port=args.worker_port, address=plan.worker_host, timeout=args.timeout,
                         bind=bind)
        servers.insert(0, w)
        running = (f"dispatcher grpc://{plan.dispatcher} ({_mode(d, private=not args.work_dir)}) + "
                   if len(servers) == 2 else "")
        line = (f"auto: {where}: {running}worker {w.address} for dispatcher grpc://{plan.dispatcher} "
                f"({_listening(w)}); stops {args.idle_timeout:g} s after its last task")
        watch_dispatcher = None if plan.role == "dispatcher+worker" else plan.dispatcher
        reason = serve(servers, stop_when=stop_rule(w.server, args.idle_timeout, watch_dispatcher, journal=journal),
                       ready=lambda: _say(line))
    finally:
        if journal is not None and not args.work_dir:
            shutil.rmtree(journal, ignore_errors=True)
    _say(f"auto: {where}: stopped ({reason})")
    return 0


def _resource_config(path: str) -> dict:
    """The resource config at ``path`` as a JSON object, read as tfpipe reads its own small JSON files
    (``converters.util.safe_json``: a regular file, at most 1 MiB, nested at most 32 levels); one
    ``TfpipeError`` line for a missing one or one that cannot be read safely."""
    from converters.util.errors import TfpipeError
    from converters.util.safe_json import read_bounded_json

    try:
        value = read_bounded_json(path)
    except FileNotFoundError:
        raise TfpipeError(f"{path}: no resource config (not on SageMaker? pass --config-dir)") from None
    except OSError as exc:
        raise TfpipeError(f"cannot read {path}: {exc.strerror}") from None
    if not isinstance(value, dict):
        raise TfpipeError(f"{path} must be a JSON object")
    return value


def auto_bind(advertised: str, given: bool, interface: object) -> str:
    """The address a data host of ``service auto`` listens on: the one it advertises when given
    (``--host-address``), else the IPv4 address of the resource config's ``network_interface_name``, else the
    address its host name resolves to. Never every interface."""
    from .bindaddr import interface_address, is_wildcard, resolve_bind

    found = None if given or not isinstance(interface, str) else interface_address(interface)
    address = found or resolve_bind(advertised, f"auto: the address of {advertised}")
    if is_wildcard(address):
        from converters.util.errors import ServiceError

        raise ServiceError(f"auto: {advertised} names every interface ({address}); pass --bind ADDRESS")
    return address
