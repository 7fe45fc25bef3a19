"""Checks around a tf.data service server, before and after it starts: is a TCP port free on this host, does a
dispatcher answer at an address (its version, its registered workers), within a deadline.

TensorFlow's own ``WorkerServer`` retries an unreachable dispatcher forever while holding the interpreter, so a
worker asks the dispatcher first, through ``grpc`` (a TensorFlow dependency) with a deadline: a dispatcher
that does not answer becomes one ``ServiceError`` line instead of a hang."""
from __future__ import annotations

import errno
import socket

from converters.util.errors import ServiceError

__all__ = ["split_address", "check_port_free", "dispatcher_version", "dispatcher_workers", "call", "fields",
           "no_answer", "NoAnswer", "SERVICE", "WORKER_SERVICE"]

SERVICE = "/tensorflow.data.DispatcherService/"
WORKER_SERVICE = "/tensorflow.data.WorkerService/"
# a call that waits for its server dials again at most this often (gRPC's own backoff grows to 120 s: a worker
# started with its dispatcher, as on a cluster where every host starts at once, would see it up to 2 minutes late)
RECONNECT_MS = 1000
_CHANNEL_OPTIONS = [("grpc.initial_reconnect_backoff_ms", RECONNECT_MS), ("grpc.max_reconnect_backoff_ms", RECONNECT_MS)]


def split_address(address: str) -> tuple[str, int]:
    """``(host, port)`` of ``HOST:PORT`` or ``grpc://HOST:PORT``; anything else is a ``ValueError`` naming it."""
    text = address[len("grpc://"):] if address.startswith("grpc://") else address
    host, sep, port = text.rpartition(":")
    if (not sep or not host or len(host) > 255 or not host.isascii() or not port.isascii() or not port.isdigit()
            or len(port) > 5 or not 1 <= int(port) <= 65535):
        shown = address if len(address) <= 300 else f"{address[:80]}...({len(address)} characters)"
        raise ValueError(f"expected a dispatcher address HOST:PORT (or grpc://HOST:PORT; an ASCII host name of at most "
                         f"253 characters, an ASCII port 1-65535), got {shown!r}")
    return host.strip("[]"), int(port)


class NoAnswer(ServiceError):
    """No tf.data service dispatcher answered at an address within the deadline."""


def no_answer(address: str, timeout: float, hint: str) -> NoAnswer:
    """The error of a dispatcher at ``address`` that has not answered within ``timeout`` seconds."""
    host, port = split_address(address)
    return NoAnswer(f"no tf.data service dispatcher answered at {host}:{port} within {timeout:g} s (is it started, "
                    f"and is the address right? {hint})")


def check_port_free(port: int, what: str) -> None:
    """Raise ``ServiceError`` if a server already listens on TCP ``port`` of this host.

    gRPC servers bind with ``SO_REUSEPORT``, so a second dispatcher on a taken port would start and silently
    share the port with the first; a plain bind (``SO_REUSEADDR`` only, so that a restarted server's old
    connections in TIME_WAIT do not count) tells the truth first."""
    for family, host in ((socket.AF_INET6, "::"), (socket.AF_INET, "0.0.0.0")):
        try:
            s = socket.socket(family, socket.SOCK_STREAM)
        except OSError:  # no IPv6 on this host
            continue
        try:
            s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            s.bind((host, port))
            s.listen(1)
        except OSError as exc:
            if exc.errno in (errno.EADDRINUSE, errno.EACCES):
                reason = "is taken (another server listens on it)" if exc.errno == errno.EADDRINUSE else \
                    "needs privileges this process does not have"
                raise ServiceError(f"{what}: port {port} {reason}; pick another with --port") from None
            if exc.errno != errno.EADDRNOTAVAIL:
                raise
        finally:
            s.close()
        return


def call(address: str, method: str, timeout: float, request: bytes = b"", *, service: str = SERVICE,
         wait: bool = True, hint: str = "see --timeout") -> bytes:
    """One gRPC call of a tf.data service server, raw protobuf bytes in and out, within ``timeout`` seconds
    (``wait``: wait for the server to come up until then, dialing again every ``RECONNECT_MS``; else a refused
    connection fails at once); ``ServiceError`` when it does not answer."""
    import grpc

    host, port = split_address(address)
    target = f"[{host}]:{port}" if ":" in host else f"{host}:{port}"
    with grpc.insecure_channel(target, options=_CHANNEL_OPTIONS) as channel:
        rpc = channel.unary_unary(service + method)
        try:
            return rpc(request, timeout=timeout, wait_for_ready=wait)
        except grpc.RpcError as exc:
            code = exc.code()
            if service != SERVICE:
                raise ServiceError(f"{host}:{port} did not answer {method}: {code.name}") from None
            if code == grpc.StatusCode.DEADLINE_EXCEEDED:
                raise no_answer(address, timeout, hint) from None
            raise ServiceError(f"{host}:{port} is not a tf.data service dispatcher: {code.name}: "
                               f"{exc.details()}") from None


def fields(buf: bytes):
    """(field number, wire type, value) of one protobuf message: the few fields read here."""
    i = 0
    while i < len(buf):
        key, i = _varint(buf, i)
        number, wire = key >> 3, key & 7
        if wire == 0:
            value, i = _varint(buf, i)
        elif wire == 2:
            n, i = _varint(buf, i)
            value, i = buf[i:i + n], i + n
        elif wire in (1, 5):
            n = 8 if wire == 1 else 4
            value, i = buf[i:i + n], i + n
        else:
            raise ServiceError(f"unexpected protobuf wire type {wire} in a dispatcher's answer")
        yield number, wire, value


def _varint(buf: bytes, i: int) -> tuple[int, int]:
    value = shift = 0
    while True:
        if i >= len(buf):
            raise ServiceError("truncated protobuf in a dispatcher's answer")
        b = buf[i]
        value |= (b & 0x7F) << shift
        i += 1
        if b < 0x80:
            return value, i
        shift += 7


def dispatcher_version(address: str, timeout: float, hint: str = "see --timeout") -> int:
    """The data-service protocol version of the dispatcher at ``address``, waiting up to ``timeout`` seconds
    for it to come up; ``ServiceError`` when none answers (its message ends on ``hint``)."""
    version = 0
    for number, wire, value in fields(call(address, "GetVersion", timeout, hint=hint)):
        if number == 1 and wire == 0:
            version = value
    return version


def dispatcher_workers(address: str, timeout: float) -> list[str]:
    """The addresses of the workers registered with the dispatcher at ``address`` (sorted)."""
    workers = []
    for number, wire, value in fields(call(address, "GetWorkers", timeout)):
        if number == 1 and wire == 2:
            workers += [v.decode() for n, w, v in fields(value) if n == 1 and w == 2]
    return sorted(workers)
