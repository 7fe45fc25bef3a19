"""A small TCP proxy on 127.0.0.1 that plays a network link in front of a local S3 server (moto): a shared
bandwidth limit on the bytes coming back (the download direction), and injected faults for the first requests
— ``503 SlowDown`` answers, or connections reset in the middle of a response. Used by ``tfpipe bench stream``
and the streaming tests; standard library only.
"""
from __future__ import annotations

import socket
import struct
import threading
import time

__all__ = ["Link", "TokenBucket"]

_CHUNK = 16 << 10
_SLOWDOWN = (b"HTTP/1.1 503 Slow Down\r\nContent-Type: application/xml\r\nConnection: close\r\n"
             b"Content-Length: %d\r\n\r\n%s")
_SLOWDOWN_BODY = (b"<?xml version=\"1.0\" encoding=\"UTF-8\"?><Error><Code>SlowDown</Code>"
                  b"<Message>Please reduce your request rate.</Message></Error>")


class TokenBucket:
    """``rate`` bytes per second shared by every connection (None: unlimited), with a small burst."""

    def __init__(self, rate: float | None, burst: int = 64 << 10):
        self.rate, self.burst = rate, burst
        self._lock = threading.Lock()
        self._tokens, self._t = float(burst), time.monotonic()

    def take(self, n: int) -> None:
        if not self.rate:
            return
        with self._lock:
            now = time.monotonic()
            self._tokens = min(self.burst, self._tokens + (now - self._t) * self.rate)
            self._t = now
            self._tokens -= n
            wait = -self._tokens / self.rate if self._tokens < 0 else 0.0
        if wait > 0:
            time.sleep(wait)


class Link:
    """``with Link(upstream_port, rate=25 << 20) as link: ... link.endpoint``. ``arm(slowdown=N, resets=N)``
    makes the next N GET requests answer 503 SlowDown, then the next N have their connection reset after
    ``reset_after`` bytes of the response."""

    def __init__(self, upstream_port: int, rate: float | None = None, *, reset_after: int = 64 << 10):
        self.upstream = ("127.0.0.1", int(upstream_port))
        self.bucket = TokenBucket(rate)
        self.reset_after = reset_after
        self._lock = threading.Lock()
        self._slowdown = self._resets = 0
        self.injected = {"slowdown": 0, "reset": 0}
        self.bytes_down = 0
        self._server = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self._server.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self._server.bind(("127.0.0.1", 0))
        self._server.listen(64)
        self.port = self._server.getsockname()[1]
        self.endpoint = f"http://127.0.0.1:{self.port}"
        self._closed = threading.Event()
        threading.Thread(target=self._accept, daemon=True, name="netlink-accept").start()

    def __enter__(self) -> "Link":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def close(self) -> None:
        self._closed.set()
        try:
            self._server.close()
        except OSError:
            pass

    def arm(self, *, slowdown: int = 0, resets: int = 0) -> None:
        with self._lock:
            self._slowdown, self._resets = slowdown, resets

    def _accept(self) -> None:
        while not self._closed.is_set():
            try:
                client, _ = self._server.accept()
            except OSError:
                return
            threading.Thread(target=self._serve, args=(client,), daemon=True, name="netlink-conn").start()

    def _fault(self, head: bytes) -> str | None:
        if not head.startswith(b"GET "):
            return None
        with self._lock:
            if self._slowdown:
                self._slowdown -= 1
                self.injected["slowdown"] += 1
                return "slowdown"
            if self._resets:
                self._resets -= 1
                self.injected["reset"] += 1
                return "reset"
        return None

    def _serve(self, client: socket.socket) -> None:
        try:
            upstream = socket.create_connection(self.upstream)
        except OSError:
            client.close()
            return
        state = {"reset": False, "sent": 0, "cut_at": None}
        up = threading.Thread(target=self._pump_up, args=(client, upstream, state), daemon=True)
        up.start()
        self._pump_down(upstream, client, state)

    def _pump_up(self, client: socket.socket, upstream: socket.socket, state: dict) -> None:
        """Requests, client -> server; a request picked for a fault is answered (or cut) here."""
        try:
            while True:
                data = client.recv(_CHUNK)
                if not data:
                    break
                fault = self._fault(data)
                if fault == "slowdown":
                    client.sendall(_SLOWDOWN % (len(_SLOWDOWN_BODY), _SLOWDOWN_BODY))
                    break
                if fault == "reset":
                    state["reset"] = True
                    state["cut_at"] = state["sent"] + self.reset_after
                upstream.sendall(data)
        except OSError:
            pass
        finally:
            _close(upstream)
            if not state["reset"]:
                _close(client)

    def _pump_down(self, upstream: socket.socket, client: socket.socket, state: dict) -> None:
        """Responses, server -> client, through the bandwidth limit; a reset cuts the connection mid-body (the
        client's read fails at once with ECONNRESET)."""
        try:
            while True:
                data = upstream.recv(_CHUNK)
                if not data:
                    break
                self.bucket.take(len(data))
                cut = state["cut_at"]
                if cut is not None and state["sent"] + len(data) > cut:
                    client.sendall(data[:max(0, cut - state["sent"])])
                    client.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
                    # wake _pump_up's recv on this socket: while a thread is blocked in it, close() leaves
                    # the socket open, and the client would see a stalled read (its read timeout), not a reset
                    client.shutdown(socket.SHUT_RD)
                    break
                client.sendall(data)
                state["sent"] += len(data)
                self.bytes_down += len(data)
        except OSError:
            pass
        finally:
            _close(client)
            _close(upstream)


def _close(sock: socket.socket) -> None:
    try:
        sock.close()
    except OSError:
        pass


def serve(rates: list[float]) -> None:
    """Run a moto S3 server and one Link per rate (bytes/s, 0 = unlimited) in this process; print
    ``{"moto": port, "links": [port, ...]}`` on one line, then serve until stdin closes."""
    import json
    import logging
    import sys

    from moto.server import ThreadedMotoServer

    logging.getLogger("werkzeug").setLevel(logging.ERROR)
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    port = server.get_host_and_port()[1]
    links = [Link(port, r or None) for r in rates]
    print(json.dumps({"moto": port, "links": [ln.port for ln in links]}), flush=True)
    try:
        sys.stdin.read()
    finally:
        for ln in links:
            ln.close()
        server.stop()


if __name__ == "__main__":  # python -m bench.infra.netlink RATE [RATE ...]: S3 and its links in a process of their own
    import sys as _sys

    serve([float(a) for a in _sys.argv[1:]])
