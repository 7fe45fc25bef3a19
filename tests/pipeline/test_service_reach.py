"""Reaching a tf.data service from the trainer (pipeline/spec/serviceopts.py, pipeline/graph/service.py):
``service=`` takes ASCII ports and bounded host names only, and a dispatcher that does not answer ends
``build_dataset`` with one error naming its address after ``service_timeout`` seconds, not a hang."""
from __future__ import annotations

import socket
import time

import pytest
from pipeline_data import write_indexed_set
from service_procs import listener  # noqa: F401 (a fixture)

from converters.util.errors import ServiceError
from pipeline import PipelineSpec, build_dataset
from pipeline.spec.serviceopts import ServiceOptions, parse_service

tf = pytest.importorskip("tensorflow")


@pytest.mark.parametrize("service", [
    "grpc://host:\u0665\u0660\u0665\u0660",          # Arabic-Indic digits: int() reads them as 5050
    "grpc://host:\uff15\uff10\uff15\uff10",          # full-width digits
    "grpc://" + "a" * 100_000 + ":5050",             # a host name far past DNS's 253 characters
    "grpc://" + "a" * 254 + ":5050",
    "grpc://h\u00e9te:5050",                        # a non-ASCII host name
    "grpc://host:0005050",                           # more than 5 digits
    "grpc://host:0", "grpc://host:65536", "grpc://host:", "grpc://:5050", "host:5050",
])
def test_service_refuses_what_cannot_be_dialed(service):
    with pytest.raises(ValueError, match="service must be 'grpc://HOST:PORT'") as exc:
        ServiceOptions(service=service)
    assert len(str(exc.value)) < 600                 # a huge value is shown cut


@pytest.mark.parametrize("service, expected", [
    ("grpc://algo-2:5050", ("algo-2", 5050)), ("grpc://" + "a" * 253 + ":1", ("a" * 253, 1)),
    ("grpc://[::1]:65535", ("::1", 65535)), ("grpc://10.0.0.5:05050", ("10.0.0.5", 5050)),
])
def test_service_accepts(service, expected):
    assert parse_service(service) == expected


@pytest.mark.parametrize("name", ["service_timeout", "service_worker_timeout"])
@pytest.mark.parametrize("value", [0, -1, float("nan"), float("inf"), 1e18, True, "5"])
def test_service_timeouts_refused(name, value):
    with pytest.raises(ValueError, match=f"{name} must be a number of seconds in"):
        ServiceOptions(service="grpc://h:1", **{name: value})


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    out = tmp_path_factory.mktemp("reach") / "set"
    write_indexed_set(out, 64, shard_bytes=1 << 10)
    return out


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.mark.parametrize("target", ["no dispatcher running", "not a dispatcher"])
def test_missing_dispatcher_fails_after_service_timeout_naming_it(data, target, listener):
    port = listener if target == "not a dispatcher" else _closed_port()
    elapsed = {}
    for timeout in (1.0, 4.0):
        spec = PipelineSpec.from_manifest(data, 8, service=f"grpc://127.0.0.1:{port}", service_timeout=timeout)
        started = time.monotonic()
        with pytest.raises(ServiceError) as exc:
            build_dataset(spec)
        elapsed[timeout] = time.monotonic() - started
        assert str(exc.value) == (f"no tf.data service dispatcher answered at 127.0.0.1:{port} within {timeout:g} s "
                                  f"(is it started, and is the address right? service='grpc://127.0.0.1:{port}', see "
                                  "service_timeout)")
    # each waited its own timeout, then gave up: the longer one by about the difference, not forever
    assert elapsed[1.0] >= 1.0 and elapsed[4.0] >= 4.0
    assert elapsed[4.0] - elapsed[1.0] < 3.0 + 10.0, elapsed


@pytest.mark.parametrize("target", ["no dispatcher running", "not a dispatcher"])
def test_waiting_for_the_dispatcher_says_so_until_it_gives_up(data, target, listener, monkeypatch, caplog):
    """While ``build_dataset`` waits for a dispatcher, a warning every ``WAIT_NOTICE_SECONDS`` (30 s; 0.5 s here)
    names the address and says when it gives up; the give-up is the same one error as without notices."""
    import datetime
    import logging
    import re

    from pipeline.graph import service

    assert service.WAIT_NOTICE_SECONDS == 30.0
    monkeypatch.setattr(service, "WAIT_NOTICE_SECONDS", 0.5)
    port = listener if target == "not a dispatcher" else _closed_port()
    spec = PipelineSpec.from_manifest(data, 8, service=f"grpc://127.0.0.1:{port}", service_timeout=2.2)
    caplog.set_level(logging.WARNING, logger="pipeline.graph.service")
    started, started_wall = time.monotonic(), time.time()
    with pytest.raises(ServiceError) as exc:
        build_dataset(spec)
    ended, elapsed = time.time(), time.monotonic() - started
    assert str(exc.value) == (f"no tf.data service dispatcher answered at 127.0.0.1:{port} within 2.2 s (is it "
                              f"started, and is the address right? service='grpc://127.0.0.1:{port}', see "
                              "service_timeout)")
    notices = [(r.created, r.getMessage()) for r in caplog.records if "waiting for" in r.getMessage()]
    assert 3 <= len(notices) <= 4 and elapsed >= 2.2, (elapsed, notices)
    pattern = (rf"waiting for the tf\.data service dispatcher at 127\.0\.0\.1:{port} \(service='grpc://127\.0\.0\.1:"
               rf"{port}'\): no answer for (\d+) s; it is given up at (\d{{4}}-\d\d-\d\d \d\d:\d\d:\d\d) UTC "
               rf"\(service_timeout=2\.2 s\)")
    for _, text in notices:
        m = re.fullmatch(pattern, text)
        assert m, text
        until = datetime.datetime.strptime(m.group(2), "%Y-%m-%d %H:%M:%S").replace(tzinfo=datetime.timezone.utc)
        assert abs(until.timestamp() - ended) < 2.0                # the give-up time it names is when it gave up
    times = [started_wall] + [when for when, _ in notices]
    assert all(b - a >= 0.45 for a, b in zip(times, times[1:])), times   # one notice per interval, not a burst
