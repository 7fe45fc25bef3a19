"""Shared by the S3 and Processing tests (the ``moto_endpoint``, ``s3`` and ``proxy`` fixtures live in
conftest.py): fake AWS settings, a listing helper and a fault-injecting proxy in front of moto."""
from __future__ import annotations

import collections
import http.client
import inspect
import socket
import struct
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

FAKE_AWS = {"AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing", "AWS_SESSION_TOKEN": "testing",
            "AWS_DEFAULT_REGION": "us-east-1"}


def share_botocore_models() -> None:
    """Every botocore session of this process (tfpipe makes one per S3 client) shares one data loader, so
    botocore's service models (JSON files of megabytes) are parsed once per process instead of once per client
    (~0.5 s each on a busy 2-core host: most of an S3 test's time). The models are the same files either way."""
    import functools

    import botocore.session

    if not hasattr(botocore.session.create_loader, "cache_info"):
        botocore.session.create_loader = functools.lru_cache(maxsize=None)(botocore.session.create_loader)


def keys(s3, prefix=""):
    """Every key in the test bucket under ``prefix``, sorted."""
    out = []
    for page in s3.client.get_paginator("list_objects_v2").paginate(Bucket=s3.bucket, Prefix=prefix):
        out += [o["Key"] for o in page.get("Contents", [])]
    return sorted(out)


class FaultProxy:
    """HTTP proxy on 127.0.0.1: ``rule(method, path, n)`` (``rule(method, path, n, headers)`` when it takes
    the request's headers too) returns None (forward), ``"reset"`` (close the connection with a TCP RST), or
    ``(status, code)`` (answer with an S3 error document)."""

    def __init__(self, upstream: str, rule):
        self.upstream_port = int(upstream.rsplit(":", 1)[1])
        self.rule = rule
        self.with_headers = "headers" in inspect.signature(rule).parameters
        self.injected = collections.Counter()
        self.seen = 0
        self._lock = threading.Lock()
        proxy = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args):
                pass

            def _body(self) -> bytes:
                if "chunked" in self.headers.get("Transfer-Encoding", "").lower():
                    data = b""
                    while True:
                        size = int(self.rfile.readline().split(b";")[0].strip(), 16)
                        if size == 0:
                            while self.rfile.readline() not in (b"\r\n", b"\n", b""):
                                pass
                            return data
                        data += self.rfile.read(size)
                        self.rfile.readline()
                n = int(self.headers.get("Content-Length") or 0)
                return self.rfile.read(n) if n else b""

            def _handle(self):
                body = self._body()
                with proxy._lock:
                    proxy.seen += 1
                    extra = {"headers": dict(self.headers)} if proxy.with_headers else {}
                    action = proxy.rule(self.command, self.path, proxy.seen, **extra)
                    if action is not None:
                        proxy.injected[action if action == "reset" else action[1]] += 1
                if action == "reset":
                    self.connection.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
                    self.close_connection = True
                    self.connection.close()
                    return
                if action is not None:
                    status, code = action
                    doc = (f"<?xml version='1.0' encoding='UTF-8'?><Error><Code>{code}</Code>"
                           f"<Message>injected {code}</Message><RequestId>x</RequestId></Error>").encode()
                    self.send_response(status)
                    self.send_header("Content-Type", "application/xml")
                    self.send_header("Content-Length", str(len(doc) if self.command != "HEAD" else 0))
                    self.end_headers()
                    if self.command != "HEAD":
                        self.wfile.write(doc)
                    return
                conn = http.client.HTTPConnection("127.0.0.1", proxy.upstream_port, timeout=60)
                headers = {k: v for k, v in self.headers.items()
                           if k.lower() not in ("expect", "transfer-encoding", "connection", "content-length")}
                headers["Content-Length"] = str(len(body))
                conn.request(self.command, self.path, body=body, headers=headers)
                resp = conn.getresponse()
                data = resp.read()
                self.send_response(resp.status, resp.reason)
                for k, v in resp.getheaders():
                    if k.lower() not in ("transfer-encoding", "connection", "date", "server", "content-length"):
                        self.send_header(k, v)
                length = resp.getheader("Content-Length") if self.command == "HEAD" else str(len(data))
                self.send_header("Content-Length", length or "0")
                self.end_headers()
                if self.command != "HEAD":
                    self.wfile.write(data)
                conn.close()

            do_GET = do_PUT = do_POST = do_DELETE = do_HEAD = _handle

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"

    def close(self):
        self.server.shutdown()
        self.server.server_close()
