"""This process's TCP connections to a tf.data service server, cut on request: what both watches do to a worker
that has stopped answering (``workerwatch`` in the dispatcher's process, ``clientwatch`` in a trainer's).

A frozen worker (stopped, not dead) keeps its connections open and its host's kernel acknowledges what is sent
to it, so a gRPC call to it that has no deadline waits forever: the dispatcher's assignment of a new job's task
to every registered worker (``ProcessTask``, made while a trainer waits for its next epoch's job) and a trainer's
request for an element. Shutting the socket down (``shutdown``: the descriptor stays its owner's to close) fails
the call as a dead worker's host would (a reset connection): gRPC reports it unavailable, and TensorFlow treats
the worker as gone for that call."""
from __future__ import annotations

import os
import socket

from .bindaddr import plain_ip
from .probe import split_address

__all__ = ["cut_connections"]


def _ips(host: str) -> set[str]:
    try:
        return {plain_ip(host)}
    except ValueError:
        pass
    try:
        return {plain_ip(i[4][0]) for i in socket.getaddrinfo(host, None, type=socket.SOCK_STREAM)}
    except (OSError, UnicodeError):
        return set()


def _same(ip: str, ips: set[str]) -> bool:
    return plain_ip(ip) in ips


def cut_connections(worker: str) -> int:
    """Shut down this process's TCP connections to ``worker`` (``HOST:PORT``); how many."""
    import psutil

    try:
        host, port = split_address(worker)
    except ValueError:
        return 0
    ips = _ips(host)
    cut = 0
    for c in psutil.Process().net_connections("tcp"):
        if c.fd < 0 or not c.raddr or c.raddr.port != port or not _same(c.raddr.ip, ips):
            continue
        try:
            s = socket.socket(fileno=os.dup(c.fd))
        except OSError:   # closed meanwhile
            continue
        try:
            peer = s.getpeername()
            if peer[1] == port and _same(peer[0], ips):   # still that connection (the fd was not reused)
                s.shutdown(socket.SHUT_RDWR)
                cut += 1
        except OSError:
            pass
        finally:
            s.close()   # our duplicate only
    return cut
