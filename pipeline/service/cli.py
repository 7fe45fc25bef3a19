"""``tfpipe service dispatcher | worker | auto``: tf.data service servers from the command line. Each prints one
line when it serves (its address and mode) and one when it stops; SIGINT and SIGTERM stop it cleanly (exit 0);
a taken port or a dispatcher that does not answer within --timeout is one error line (exit 7)."""
from __future__ import annotations

import argparse

from converters.cli.types import positive_float
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
    _work_dir(d)
    _worker_timeout(d)
    d.set_defaults(func=_dispatcher)

    w = ssub.add_parser("worker", help="run a tf.data service worker for a dispatcher until SIGINT/SIGTERM")
    w.add_argument("--dispatcher", required=True, metavar="HOST:P", help="the dispatcher's address (required)")
    w.add_argument("--port", type=tcp_port, default=0, metavar="Q", help="the worker's port (default 0: any free port)")
    w.add_argument("--address", metavar="HOST", help="the host name trainers reach this worker at (default: this "
                                                    "host's name)")
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
    a.add_argument("--idle-timeout", type=positive_float, default=120.0, metavar="SECONDS",
                   help="stop a data host when its worker has had no task for this long after its first "
                        "(default 120)")
    a.add_argument("--host-address", type=host_address, action="append", default=[], metavar="HOST=ADDRESS",
                   help="dial and advertise ADDRESS for host HOST of the resource config (repeatable; default: "
                        "the host names)")
    _timeout(a)
    a.set_defaults(func=_auto)


def _work_dir(p) -> None:
    p.add_argument("--work-dir", metavar="DIR",
                   help="journal the dispatcher's state here: fault tolerant, a restart with the same --work-dir "
                        "and --port keeps its jobs (default: none, not fault tolerant)")


def _worker_timeout(p) -> None:
    from .workerwatch import DEFAULT_WORKER_TIMEOUT

    p.add_argument("--worker-timeout", type=positive_float, default=DEFAULT_WORKER_TIMEOUT, metavar="SECONDS",
                   help="give up the tasks of a worker that has not answered for this long, so that trainers go "
                        f"on without it (default {DEFAULT_WORKER_TIMEOUT:g}; its unsent records are lost, "
                        "docs/offload.md)")


def _timeout(p) -> None:
    p.add_argument("--timeout", type=positive_float, default=60.0, metavar="SECONDS",
                   help="how long to wait for the dispatcher to answer (default 60)")


def _say(line: str) -> None:
    print(line, flush=True)


def _mode(dispatcher) -> str:
    lost = f"; lost workers given up after {dispatcher.watch.worker_timeout:g} s" if dispatcher.watch else ""
    if dispatcher.fault_tolerant:
        return f"fault tolerant, work dir {dispatcher.work_dir}{lost}"
    return f"not fault tolerant: no --work-dir, a restart loses its jobs{lost}"


def _dispatcher(args: argparse.Namespace) -> int:
    import socket

    from .servers import serve, start_dispatcher

    d = start_dispatcher(args.port, args.work_dir, worker_timeout=args.worker_timeout)
    reason = serve([d], ready=lambda: _say(f"dispatcher serving grpc://{socket.gethostname()}:{d.port} ({_mode(d)})"))
    _say(f"dispatcher stopped ({reason})")
    return 0


def _worker(args: argparse.Namespace) -> int:
    from .servers import serve, start_worker

    w = start_worker(args.dispatcher, port=args.port, address=args.address, timeout=args.timeout)
    reason = serve([w], ready=lambda: _say(f"worker serving {w.address} for dispatcher grpc://{w.dispatcher}"))
    _say(f"worker stopped ({reason})")
    return 0


def _auto(args: argparse.Namespace) -> int:
    import os

    from converters.util.errors import TfpipeError
    from sharding.topology import Topology

    from .auto import plan_auto, stop_rule
    from .servers import serve, start_dispatcher, start_worker

    if args.port == 0:
        raise ValueError("--port 0: the data group's dispatcher needs a fixed port that every host knows")
    path = os.path.join(args.config_dir, "resourceconfig.json")
    if not os.path.isfile(path):
        raise TfpipeError(f"{path}: no resource config (not on SageMaker? pass --config-dir)")
    topo = Topology.from_env({}, config_dir=args.config_dir, processing_config_dir=None)
    if topo.instance_groups is None:
        raise TfpipeError(f"{path} has no instance_groups: not a heterogeneous cluster (run 'tfpipe service "
                          "dispatcher' and 'tfpipe service worker' yourself)")
    plan = plan_auto(topo.instance_groups, args.data_group, args.port, addresses=dict(args.host_address))
    where = f"{plan.host} ({plan.group})"
    if plan.role == "none":
        _say(f"auto: {where}: not the data group, nothing to run here; trainers dial grpc://{plan.dispatcher}")
        return 0
    servers = []
    if plan.role == "dispatcher+worker":
        d = start_dispatcher(args.port, args.work_dir, job_gc_timeout=args.idle_timeout,
                             worker_timeout=args.worker_timeout)
        servers.append(d)
    w = start_worker(plan.dispatcher, port=args.worker_port, address=plan.worker_host, timeout=args.timeout)
    servers.insert(0, w)
    running = f"dispatcher grpc://{plan.dispatcher} ({_mode(d)}) + " if len(servers) == 2 else ""
    line = (f"auto: {where}: {running}worker {w.address} for dispatcher grpc://{plan.dispatcher}; stops "
            f"{args.idle_timeout:g} s after its last task")
    watch_dispatcher = None if plan.role == "dispatcher+worker" else plan.dispatcher
    reason = serve(servers, stop_when=stop_rule(w.server, args.idle_timeout, watch_dispatcher),
                   ready=lambda: _say(line))
    _say(f"auto: {where}: stopped ({reason})")
    return 0
