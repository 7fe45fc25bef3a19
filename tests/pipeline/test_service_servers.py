"""``tfpipe service dispatcher`` and ``tfpipe service worker`` as real processes (pipeline/service/servers.py,
probe.py, cli.py): one line on start, a real tf.data pipeline served through them, a clean exit 0 on SIGINT and
SIGTERM, a taken port and an unreachable dispatcher each one error line (exit 7), and a dispatcher restarted
with its --work-dir on its port that its worker registers with again."""
from __future__ import annotations

import re
import signal
import socket
import time

import pytest

from converters.cli import main
from pipeline.service.probe import check_port_free, dispatcher_workers, split_address
from service_procs import Proc, free_port, listener, read_through  # noqa: F401 (listener: a fixture)

pytestmark = pytest.mark.slow


@pytest.fixture
def procs():
    started: list[Proc] = []

    def start(*argv: str) -> Proc:
        p = Proc(*argv)
        started.append(p)
        return p
    yield start
    for p in started:
        p.kill()


def test_dispatcher_and_worker_serve_restart_and_stop_cleanly(procs, tmp_path):
    """One dispatcher (--work-dir) and its worker, started together (the worker waits for the dispatcher): each
    prints its line, a pipeline is read through them, a second dispatcher on the taken port is refused; the
    dispatcher stopped by SIGTERM and restarted with its --work-dir on its port keeps serving, and the running
    worker registers with it again; SIGINT and SIGTERM stop each cleanly (exit 0, its last line, no traceback)."""
    port, wd = free_port(), str(tmp_path / "wd")
    d = procs("service", "dispatcher", "--port", str(port), "--work-dir", wd, "--worker-timeout", "12")
    w = procs("service", "worker", "--dispatcher", f"localhost:{port}", "--address", "127.0.0.1", "--timeout", "600")
    line = d.wait_line("dispatcher serving")
    assert re.fullmatch(rf"dispatcher serving grpc://127\.0\.0\.1:{port} \(listening on 127\.0\.0\.1 only; fault "
                        rf"tolerant, work dir {wd}; lost workers given up after 12 s\)", line)
    second = procs("service", "dispatcher", "--port", str(port))   # the port is taken: refused, named
    line = w.wait_line("worker serving")
    address = re.fullmatch(rf"worker serving (127\.0\.0\.1:\d+) for dispatcher grpc://localhost:{port} \(listening "
                           rf"on 127\.0\.0\.1 only\)", line).group(1)
    assert dispatcher_workers(f"localhost:{port}", 30) == [address]
    assert read_through(f"grpc://localhost:{port}", 100, job_name="before") == list(range(100))
    assert second.finish(120) == 7
    assert f"port {port} is taken" in second.stderr and second.lines == []

    d.signal(signal.SIGTERM)
    assert d.finish() == 0 and d.lines[-1] == "dispatcher stopped (SIGTERM)"
    assert any(p.name.startswith("tf_data_dispatcher_journal") for p in (tmp_path / "wd").iterdir())
    again = procs("service", "dispatcher", "--port", str(port), "--work-dir", wd)
    assert f":{port} (listening on 127.0.0.1 only; fault tolerant, work dir {wd}; lost workers" in \
        again.wait_line("dispatcher serving")
    deadline = time.monotonic() + 120
    while dispatcher_workers(f"127.0.0.1:{port}", 30) != [address]:  # the running worker, not a new one
        assert time.monotonic() < deadline, "the worker did not register with the restarted dispatcher"
        time.sleep(0.5)
    assert w.p.poll() is None
    assert read_through(f"grpc://127.0.0.1:{port}", 50, job_name="after") == list(range(50))

    w.signal(signal.SIGINT)
    again.signal(signal.SIGTERM)
    assert w.finish() == 0 and w.lines[-1] == "worker stopped (SIGINT)"
    assert again.finish() == 0 and again.lines[-1] == "dispatcher stopped (SIGTERM)"
    assert "Traceback" not in w.stderr + d.stderr + again.stderr


@pytest.mark.parametrize("target", ["closed port", "not a dispatcher"])
def test_worker_without_a_dispatcher_fails_within_its_timeout(target, listener):
    port = listener if target == "not a dispatcher" else free_port()
    started = time.monotonic()
    baseline = Proc("service", "worker", "--dispatcher", "no-port-here")   # the same start, refused at once
    assert baseline.finish(120) == 2 and "expected a dispatcher address HOST:PORT" in baseline.stderr
    base = time.monotonic() - started

    started = time.monotonic()
    w = Proc("service", "worker", "--dispatcher", f"127.0.0.1:{port}", "--timeout", "3")
    rc = w.finish(120)
    elapsed = time.monotonic() - started
    assert rc == 7, w.stderr
    assert w.stderr.strip().splitlines() == [
        f"tfpipe: error: no tf.data service dispatcher answered at 127.0.0.1:{port} within 3 s (is it started, and is "
        "the address right? see --timeout)"]
    assert 3 <= elapsed < base + 3 + 30, (elapsed, base)   # waited its timeout, then gave up (no endless retries)


def test_worker_on_a_taken_port_is_refused(listener):
    w = Proc("service", "worker", "--dispatcher", "127.0.0.1:1", "--port", str(listener))
    assert w.finish(120) == 7
    assert w.stderr.strip() == f"tfpipe: error: worker: port {listener} is taken (another server listens on it); " \
                               "pick another with --port"


def test_check_port_free_sees_a_listener_and_a_free_port(listener):
    from converters.util.errors import ServiceError

    with pytest.raises(ServiceError, match=f"dispatcher: port {listener} is taken"):
        check_port_free(listener, "dispatcher")
    check_port_free(free_port(), "dispatcher")


def test_a_dispatcher_that_comes_up_late_is_seen_within_a_redial():
    """A worker asks for its dispatcher before TensorFlow's registration (``dispatcher_version``, waiting up to
    its --timeout); a dispatcher that comes up 10.5 s later (a host still importing TensorFlow) is seen within
    one redial (``RECONNECT_MS``), not after gRPC's growing backoff (its attempts near 9.3 and 15.8 s would see
    it 5 s late)."""
    import threading

    import tensorflow as tf

    from pipeline.service.probe import RECONNECT_MS, dispatcher_version

    port, delay, up = free_port(), 10.5, {}

    def start():
        time.sleep(delay)
        up["at"] = time.monotonic()   # the earliest it can answer
        up["server"] = tf.data.experimental.service.DispatchServer(
            tf.data.experimental.service.DispatcherConfig(port=port))

    starter = threading.Thread(target=start, daemon=True)
    starter.start()
    try:
        assert dispatcher_version(f"127.0.0.1:{port}", 120) > 0
        seen = time.monotonic()
        asked = time.monotonic()
        dispatcher_version(f"127.0.0.1:{port}", 120)   # this run's clock: one answer of a dispatcher that is up
        answer = time.monotonic() - asked
        assert seen - up["at"] < 1.25 * RECONNECT_MS / 1000 + 3 * answer + 1.5, (seen - up["at"], answer)
    finally:
        starter.join(60)
        if "server" in up:
            up["server"]._stop()


@pytest.mark.parametrize("address, expected", [
    ("algo-2:5050", ("algo-2", 5050)), ("grpc://10.0.0.3:6000", ("10.0.0.3", 6000)), ("[::1]:7", ("::1", 7)),
    ("algo-2", None), ("algo-2:", None), (":5050", None), ("algo-2:70000", None), ("grpc://algo-2:x", None),
    ("algo-2:\u0665\u0660\u0665\u0660", None), ("algo-2:\uff15\uff10", None), ("h" * 256 + ":5050", None),
    ("algo-2:000005050", None),
])
def test_split_address(address, expected):
    if expected is None:
        with pytest.raises(ValueError, match="expected a dispatcher address HOST:PORT"):
            split_address(address)
    else:
        assert split_address(address) == expected


@pytest.mark.parametrize("argv, code, message", [
    (["service", "worker"], 64, "--dispatcher"),
    (["service", "dispatcher", "--port", "70000"], 64, "expected a TCP port in [0, 65535], got '70000'"),
    (["service", "worker", "--dispatcher", "h:1", "--timeout", "0"], 64, "expected a number of seconds from 0 (excluded) to 604800"),
    (["service", "auto", "--data-group", "data_group", "--port", "0"], 2, "--port 0"),
    (["service", "auto", "--data-group", "g", "--host-address", "algo-2"], 64, "expected HOST=ADDRESS"),
    (["service", "worker", "--dispatcher", "h:\u0665\u0660\u0665\u0660"], 2, "an ASCII port 1-65535"),
    (["service", "worker", "--dispatcher", "h" * 100_000 + ":5050"], 2, "(100005 characters)"),
])
def test_usage(argv, code, message, capsys):
    try:
        rc = main(argv)
    except SystemExit as exc:  # the parser refuses the command line
        rc = exc.code
    assert rc == code and message in capsys.readouterr().err


def _listening(pid: int) -> set[str]:
    """The addresses process ``pid`` listens on (``::ffff:a.b.c.d`` read as ``a.b.c.d``), from the kernel."""
    import ipaddress

    import psutil

    out = set()
    for c in psutil.Process(pid).net_connections("tcp"):
        if c.status == psutil.CONN_LISTEN:
            ip = ipaddress.ip_address(c.laddr.ip)
            out.add(str(ip.ipv4_mapped if ip.version == 6 and ip.ipv4_mapped else ip))
    return out


def _outside_address() -> str | None:
    """A non-loopback IPv4 address of this host, or None."""
    import psutil

    for addrs in psutil.net_if_addrs().values():
        for a in addrs:
            if a.family == socket.AF_INET and not a.address.startswith("127."):
                return a.address
    return None


def _connects(address: str, port: int) -> bool:
    try:
        with socket.create_connection((address, port), timeout=5):
            return True
    except OSError:
        return False


def test_servers_listen_on_loopback_unless_asked(procs):
    """Without --bind, a dispatcher and its worker listen on 127.0.0.1 only (the kernel's view of their
    processes), and this host's other address is refused; --bind ADDRESS listens there only; --bind 0.0.0.0
    on every interface. The dispatcher without --work-dir says it is not fault tolerant, prints the port it
    took for --port 0, and stops on SIGINT. The servers start together (the worker waits for its dispatcher)."""
    outside = _outside_address()
    d = procs("service", "dispatcher", "--port", "0")
    everywhere = procs("service", "dispatcher", "--port", "0", "--bind", "0.0.0.0")
    one = procs("service", "dispatcher", "--port", "0", "--bind", outside) if outside else None
    line = d.wait_line("dispatcher serving")
    assert re.fullmatch(r"dispatcher serving grpc://127\.0\.0\.1:\d+ \(listening on 127\.0\.0\.1 only; not fault "
                        r"tolerant: no --work-dir, a restart loses its jobs; lost workers given up after 30 s\)", line)
    assert not line.split(" (")[0].endswith(":0")  # the real port
    port = int(re.search(r":(\d+) \(", line).group(1))
    w = procs("service", "worker", "--dispatcher", f"127.0.0.1:{port}")
    line = w.wait_line("worker serving")
    worker_port = int(re.fullmatch(r"worker serving 127\.0\.0\.1:(\d+) for dispatcher \S+ \(listening on 127\.0\.0\.1 "
                                   r"only\)", line).group(1))
    assert _listening(d.p.pid) == {"127.0.0.1"} and _listening(w.p.pid) == {"127.0.0.1"}
    assert _connects("127.0.0.1", port) and _connects("127.0.0.1", worker_port)
    if outside:
        assert not _connects(outside, port) and not _connects(outside, worker_port)
    assert read_through(f"grpc://127.0.0.1:{port}", 20) == list(range(20))

    line = everywhere.wait_line("dispatcher serving")
    assert "(listening on every interface, no authentication;" in line
    wide = int(re.search(r":(\d+) \(", line).group(1))
    assert _listening(everywhere.p.pid) & {"::", "0.0.0.0"}
    if outside:
        assert _connects(outside, wide)
        line = one.wait_line("dispatcher serving")
        assert f"(listening on {outside} only;" in line
        assert _listening(one.p.pid) == {outside}
        assert not _connects("127.0.0.1", int(re.search(r":(\d+) \(", line).group(1)))
    d.signal(signal.SIGINT)
    assert d.finish() == 0 and d.lines[-1] == "dispatcher stopped (SIGINT)"


def test_bind_refusals(capsys):
    w = Proc("service", "dispatcher", "--port", "0", "--bind", "no-such-host.invalid")
    assert w.finish(300) == 7
    assert w.stderr.strip().startswith("tfpipe: error: --bind no-such-host.invalid: cannot resolve it")
    w = Proc("service", "dispatcher", "--port", "0", "--bind", "192.0.2.254")   # not an address of this host
    try:
        assert w.finish(300) == 7
    finally:
        w.kill()
    assert w.stderr.strip().splitlines()[-1] == (
        "tfpipe: error: dispatcher on 192.0.2.254:0 did not start: Could not start gRPC server (is 192.0.2.254 an "
        "address of this host? see --bind)")
    assert "Traceback" not in w.stderr
