"""The one downloader (``converters.storage.download``) against a small S3-like HTTP server on 127.0.0.1 that
answers GETs slowly on purpose: a trickle of bytes, or nothing at all. Deadlines are short; every case is
bounded in time by an independent clock of the same run."""
from __future__ import annotations

import hashlib
import logging
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from converters.storage.download import RetryPolicy, fetch_verified, read_object
from converters.storage.s3 import S3Storage
from converters.util.errors import TfpipeError

BODY = bytes(range(256)) * 4  # 1 KiB


class _Slow(BaseHTTPRequestHandler):
    """GET: the headers of a 1 KiB object, then one byte every ``server.gap`` seconds; ``server.silent``: read
    the request and never answer."""

    def do_GET(self):  # noqa: N802 - http.server's name
        if self.server.silent:
            self.server.stop.wait(30)
            return
        self.send_response(200)
        self.send_header("Content-Length", str(len(BODY)))
        self.send_header("ETag", '"e1"')
        self.end_headers()
        for b in BODY:
            if self.server.stop.wait(self.server.gap):
                return
            try:
                self.wfile.write(bytes([b]))
                self.wfile.flush()
            except OSError:
                return

    def log_message(self, *args):
        pass


@pytest.fixture
def slow_server(monkeypatch):
    for k, v in {"AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing",
                 "AWS_DEFAULT_REGION": "us-east-1", "AWS_CONFIG_FILE": "/nonexistent",
                 "AWS_SHARED_CREDENTIALS_FILE": "/nonexistent"}.items():
        monkeypatch.setenv(k, v)
    servers = []

    def make(*, gap=0.5, silent=False):
        srv = ThreadingHTTPServer(("127.0.0.1", 0), _Slow)
        srv.daemon_threads = True
        srv.gap, srv.silent, srv.stop = gap, silent, threading.Event()
        threading.Thread(target=srv.serve_forever, daemon=True).start()
        servers.append(srv)
        return S3Storage("s3://bucket/set", endpoint_url=f"http://127.0.0.1:{srv.server_address[1]}",
                         max_attempts=1, connect_timeout=1, read_timeout=1)
    yield make
    for srv in servers:
        srv.stop.set()
        srv.shutdown()
        srv.server_close()


SHA = hashlib.sha256(BODY).hexdigest()


def test_a_trickling_endpoint_meets_the_request_and_shard_deadlines(slow_server, tmp_path, caplog):
    storage = slow_server(gap=0.5)  # 1 byte every 0.5 s: never a read timeout, never done
    policy = RetryPolicy(request_timeout=1.5, stall_timeout=5, shard_timeout=4, base_delay=0.05, max_delay=0.1)
    t = time.monotonic()
    with caplog.at_level(logging.WARNING), pytest.raises(TfpipeError, match=r"s3://bucket/set/x\.tfrecord: not "
                                                                            r"complete after \d+ s \(\d+ of 1024 "
                                                                            r"bytes; shard_timeout=4 s\)"):
        fetch_verified(storage, "x.tfrecord", str(tmp_path / "x"), len(BODY), SHA, policy=policy)
    took = time.monotonic() - t
    assert 4 <= took < 60, took   # not before the deadline; without it the trickle lasts 512 s (1,024 bytes, 0.5 s each)
    assert "request cut after" in caplog.text  # a log line while it waited, and the request was resumed


def test_a_silent_endpoint_fails_at_the_stall_deadline(slow_server, tmp_path):
    storage = slow_server(silent=True)
    policy = RetryPolicy(stall_timeout=3, base_delay=0.05, max_delay=0.1)
    t = time.monotonic()
    with pytest.raises(TfpipeError, match=r"x\.tfrecord: no byte arrived for \d+ s over \d+ attempt\(s\) "
                                          r"\(stall_timeout=3 s"):
        fetch_verified(storage, "x.tfrecord", str(tmp_path / "x"), len(BODY), SHA, policy=policy)
    assert time.monotonic() - t < 3 + 1 + 2  # the deadline, one read timeout, slack


def test_defaults_bound_a_silent_endpoint_under_a_minute():
    p = RetryPolicy()
    read_timeout = 10.0  # converters.storage.s3.DEFAULT_READ_TIMEOUT: one attempt past the stall deadline
    assert p.stall_timeout + read_timeout + p.max_delay < 60


def test_a_metadata_read_is_capped(slow_server):
    storage = slow_server(gap=0)
    with pytest.raises(TfpipeError, match=r"s3://bucket/set/index\.json: larger than 100 bytes"):
        read_object(storage, "index.json", cap=100)
    assert read_object(storage, "index.json") == BODY


@pytest.mark.parametrize("kw, match", [
    ({"attempts": 0}, "attempts must be a positive integer"),
    ({"request_timeout": 0}, "request_timeout must be a positive number"),
    ({"stall_timeout": float("inf")}, "stall_timeout must be a positive number"),
    ({"shard_timeout": True}, "shard_timeout must be a positive number"),
])
def test_policy_refuses_bad_values(kw, match):
    with pytest.raises(ValueError, match=match):
        RetryPolicy(**kw)

