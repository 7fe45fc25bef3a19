"""Hostile use, second round: what the Beam engine, Processing, URL inputs and write-time preparation
added, used as a careless or hostile user would. Every case runs tfpipe as a real process (``hostile.run_cli``)
under an address-space cap, and checks one error line or a verified set, no traceback, no leftover."""
from __future__ import annotations

import glob
import json
import os
import resource
import signal
import socket
import threading
import time
from pathlib import Path

import pytest

from converters.shardset.verify import verify
from converters.storage import TMP_PREFIX
from hostile import check_one_line_error, finish, run_cli, run_py, snapshot, start

AS_CAP = 16 << 30  # address space: TensorFlow, numba and Beam reserve a lot of it, but not this much
LIMITS = {resource.RLIMIT_AS: AS_CAP}


def _libsvm(path: Path, labels, *, n: int | None = None) -> Path:
    """A small LibSVM file, field size 3, its labels cycling through ``labels``."""
    n = n if n is not None else 20 * len(labels)
    path.write_text("".join(f"{labels[i % len(labels)]} 1:{i} 2:0.5 3:1\n" for i in range(n)))
    return path


def _convert(src: Path, out: Path, *extra: str) -> list[str]:
    return ["convert", "libsvm", str(src), "--field-size", "3", "--out", str(out), "--no-progress", *extra]


def _left(out: Path) -> list[str]:
    return [n for n in os.listdir(out) if n.startswith(TMP_PREFIX)] if out.is_dir() else []


def _shard_bytes(out: Path) -> list[bytes]:
    m = json.loads((out / "index.json").read_text())
    return [(out / s["name"]).read_bytes() for s in m["shards"]]


# -- NaN, inf, -0.0 and huge labels (23.4) --------------------------------------------------------------------

ODD_LABELS = ["nan", "0", "-0", "1", "inf", "-inf", "1e39", "-nan", "3e38"]


def test_nan_labels_balance_to_the_same_bytes_on_both_engines(tmp_path):
    """Every NaN is one label ``nan``, -0 is 0, 1e39 is inf: no KeyError, the same set locally and on Beam."""
    src = _libsvm(tmp_path / "odd.svm", ODD_LABELS)
    outs = {}
    for engine in ("local", "beam"):
        out = tmp_path / engine
        r = run_cli(_convert(src, out, "--allow-nonfinite", "--balance", "equal", "--seed", "1", "--engine", engine),
                    limits=LIMITS, timeout=180)
        assert r.rc == 0 and "Traceback" not in r.err, r.err
        assert verify(str(out)).ok and not _left(out)
        outs[engine] = out
    balance = json.loads((outs["local"] / "index.json").read_text())["extra"]["balance"]
    assert balance["counts_in"] == {"-inf": 20, "0": 40, "1": 20, "300000000000000000000000000000000000000": 20,
                                    "inf": 40, "nan": 40}
    assert set(balance["counts_out"].values()) == {20}
    assert _shard_bytes(outs["local"]) == _shard_bytes(outs["beam"])


def test_nan_labels_split_into_a_part_of_their_own(tmp_path):
    src = _libsvm(tmp_path / "odd.svm", ODD_LABELS)
    out = tmp_path / "split"
    r = run_cli(_convert(src, out, "--allow-nonfinite", "--split-by-label", "--shuffle", "--seed", "2"),
                limits=LIMITS)
    assert r.rc == 0 and "Traceback" not in r.err, r.err
    assert sorted(p for p in os.listdir(out) if p.startswith("label=")) == [
        "label=-inf", "label=0", "label=1", "label=300000000000000000000000000000000000000", "label=inf",
        "label=nan"]
    assert verify(str(out)).ok


def test_rows_balance_removes_are_sampled_out_not_bad_lines(tmp_path):
    src = _libsvm(tmp_path / "two.svm", ["0", "1"], n=2000)
    r = run_cli(_convert(src, tmp_path / "out", "--balance", "0=0,1=0", "--seed", "1"), limits=LIMITS)
    check_one_line_error(r, r"--balance sampled out all 2000 valid record\(s\).* 0 bad line\(s\)")


# -- processing run --message-file (23.5) ----------------------------------------------------------------------

def test_message_file_never_overwrites_a_users_file(tmp_path):
    cfg = tmp_path / "nocfg"  # no resourceconfig.json: the run fails, and writes its message
    user = tmp_path / "notes.txt"
    user.write_text("my own notes\n" * 100)
    shard_like = tmp_path / "link"
    shard_like.symlink_to(user)
    before = snapshot(tmp_path)
    for target in (user, shard_like):
        r = run_cli(["processing", "run", "--config-dir", str(cfg), "--message-file", str(target),
                     *_convert(tmp_path / "in.svm", tmp_path / "out")], limits=LIMITS)
        check_one_line_error(r, "resourceconfig.json not found")
        assert "is not a tfpipe message (left unchanged" in r.err
    assert snapshot(tmp_path) == before
    msg = tmp_path / "message"
    for _ in range(2):  # a new file, then the earlier message replaced
        r = run_cli(["processing", "run", "--config-dir", str(cfg), "--message-file", str(msg),
                     *_convert(tmp_path / "in.svm", tmp_path / "out")], limits=LIMITS)
        assert r.rc == 1 and "left unchanged" not in r.err
        assert msg.read_text().startswith("tfpipe: error: ") and msg.read_text().count("\n") == 1


# -- Processing: absurd host lists, a host started twice (23.9) -----------------------------------------------

def test_two_million_hosts_are_refused_at_once(tmp_path):
    cfg = tmp_path / "cfg"
    cfg.mkdir()
    (cfg / "resourceconfig.json").write_text(json.dumps(
        {"current_host": "algo-1", "hosts": [f"algo-{i}" for i in range(1, 2_000_001)]}))
    src = _libsvm(tmp_path / "a.svm", ["0", "1"])
    r = run_cli(["processing", "run", "--config-dir", str(cfg), "--message-file", "",
                 *_convert(src, tmp_path / "out")], limits=LIMITS, timeout=60)
    check_one_line_error(r, r"2,000,000 hosts; a Processing job has at most 100 instances")
    assert not (tmp_path / "out").exists()


def test_the_same_host_started_twice_leaves_one_set_and_nothing_else(tmp_path):
    src_dir = tmp_path / "in"
    src_dir.mkdir()
    _libsvm(src_dir / "a.svm", ["0", "1"], n=20000)
    cfg = tmp_path / "cfg"
    cfg.mkdir()
    (cfg / "resourceconfig.json").write_text('{"current_host": "algo-1", "hosts": ["algo-1"]}')
    out = tmp_path / "out"
    argv = ["-c", "import sys; from converters.cli.main import main; sys.exit(main(sys.argv[1:]))", "processing",
            "run", "--config-dir", str(cfg), "--message-file", "", "--poll", "0.1",
            *_convert(src_dir, out, "--shard-size", "64KiB")]
    t0 = time.monotonic()
    procs = [start(argv, limits=LIMITS) for _ in range(2)]
    results = sorted((finish(p, "processing run", 180, t0) for p in procs), key=lambda r: r.rc)
    assert results[0].rc == 0, results[0].err
    check_one_line_error(results[1], r"already running|is not empty")
    assert verify(str(out)).ok
    assert [n for n in os.listdir(out) if n.startswith(".")] == []  # no temporary shard, no work area


# -- Beam under signals and bad options (23.6) -----------------------------------------------------------------

def _beam_run(tmp_path: Path, name: str, *extra: str):
    src = tmp_path / "big.svm"
    if not src.exists():
        _libsvm(src, ["0", "1"], n=20000)
    out = tmp_path / name
    args = ["-c", "import sys; from converters.cli.main import main; sys.exit(main(sys.argv[1:]))",
            *_convert(src, out, "--engine", "beam", "--shard-size", "64KiB", *extra)]
    return start(args, limits=LIMITS), out


@pytest.mark.parametrize("sig, code, group, extra", [
    (signal.SIGINT, 130, False, ()),
    (signal.SIGTERM, 143, True, ("--beam-option", "direct_running_mode=multi_processing",
                                 "--beam-option", "direct_num_workers=2")),
    (signal.SIGINT, 130, True, ("--beam-option", "direct_running_mode=multi_processing",
                                "--beam-option", "direct_num_workers=2")),
])
def test_a_signal_stops_a_beam_conversion_in_one_line(tmp_path, sig, code, group, extra):
    """Ctrl-C (to the process group, as a terminal sends it) or kill: the signal's exit code, one line, no
    traceback from the driver or any worker, nothing left."""
    t0 = time.monotonic()
    p, out = _beam_run(tmp_path, "out", *extra)
    while not glob.glob(str(out / f"{TMP_PREFIX}*")) and p.poll() is None and time.monotonic() - t0 < 120:
        time.sleep(0.05)
    time.sleep(1.0)  # inside the pipeline
    assert p.poll() is None, "the conversion ended before the signal"
    (os.killpg if group else os.kill)(p.pid, sig)
    r = finish(p, "beam conversion", 60, t0)
    assert r.rc == code, r.err
    assert "Traceback" not in r.err and len([ln for ln in r.err.splitlines() if ln.strip()]) == 1, r.err
    assert r.err.startswith(("tfpipe: interrupted", "tfpipe: terminated"))
    assert not (out / "index.json").exists() and _left(out) == []


def test_kill_9_of_the_driver_leaves_its_workers_quiet(tmp_path):
    """The multi_processing workers outlive a SIGKILLed driver only briefly (``finish`` fails if any process of
    the session is left after 5 s) and print no traceback on the way out."""
    t0 = time.monotonic()
    p, out = _beam_run(tmp_path, "out", "--beam-option", "direct_running_mode=multi_processing",
                       "--beam-option", "direct_num_workers=2")
    while not glob.glob(str(out / f"{TMP_PREFIX}*")) and p.poll() is None and time.monotonic() - t0 < 120:
        time.sleep(0.05)
    time.sleep(1.0)
    assert p.poll() is None, "the conversion ended before the signal"
    os.kill(p.pid, signal.SIGKILL)
    r = finish(p, "beam conversion", 60, t0)
    assert r.rc == -signal.SIGKILL and r.err.strip() == "", r.err
    assert not (out / "index.json").exists()


@pytest.mark.parametrize("workers", ["1000", "-1"])
def test_direct_num_workers_out_of_bounds_is_refused(tmp_path, workers):
    src = _libsvm(tmp_path / "a.svm", ["0", "1"])
    r = run_cli(_convert(src, tmp_path / "out", "--engine", "beam", "--beam-option",
                         f"direct_num_workers={workers}"), limits=LIMITS)
    check_one_line_error(r, rf"direct_num_workers must be 1\.\.\d+ .*got {workers}")
    assert not (tmp_path / "out").exists()


def test_a_job_service_that_never_answers_times_out_and_releases_the_output(tmp_path):
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(8)
    accepted = []

    def accept():
        while True:
            try:
                accepted.append(server.accept()[0])  # and never answer
            except OSError:
                return
    threading.Thread(target=accept, daemon=True).start()
    try:
        src = _libsvm(tmp_path / "a.svm", ["0", "1"])
        out = tmp_path / "out"
        r = run_cli(_convert(src, out, "--engine", "beam", "--beam-option", "runner=PortableRunner",
                             "--beam-option", f"job_endpoint=127.0.0.1:{server.getsockname()[1]}",
                             "--beam-option", "job_server_timeout=3"), limits=LIMITS, timeout=120)
    finally:
        server.close()
        for c in accepted:
            c.close()
    check_one_line_error(r, r"job service at 127\.0\.0\.1:\d+ did not answer within 3 s")
    assert not out.exists() or os.listdir(out) == []  # no claim left


# -- many labels, few open files (23.7) ------------------------------------------------------------------------

@pytest.mark.parametrize("nofile", [256, 128])
def test_600_labels_split_under_a_small_open_files_limit(tmp_path, nofile):
    src = _libsvm(tmp_path / "many.svm", [str(i) for i in range(600)], n=3000)
    out = tmp_path / "out"
    r = run_cli(_convert(src, out, "--split-by-label"), limits={**LIMITS, resource.RLIMIT_NOFILE: nofile},
                timeout=180)
    assert r.rc == 0 and "Traceback" not in r.err, r.err
    assert len([p for p in os.listdir(out) if p.startswith("label=")]) == 600
    assert verify(str(out)).ok and not _left(out)


# -- an S3 input changed between two reads (23.8) -------------------------------------------------------------

@pytest.mark.parametrize("engine", [("--workers", "1"), ("--engine", "beam")])
def test_an_s3_input_rewritten_mid_run_fails_naming_it(tmp_path, s3, engine):
    """The object is rewritten (same size, other labels) just before the second GET: moto answers the GET's
    If-Match with 412, and the run fails naming the object, with no manifest."""
    body = "".join(f"{i % 2} 1:{i} 2:1 3:1\n" for i in range(2000))
    s3.client.put_object(Bucket=s3.bucket, Key="in/a.svm", Body=body.encode())
    out = tmp_path / "out"
    code = f"""
import boto3
from converters.storage.s3 import S3Storage
from converters.cli.main import main
client = boto3.client("s3", endpoint_url={s3.endpoint!r}, region_name="us-east-1")
real, gets = S3Storage.read_range, []
def read_range(self, name, start, stop, **kw):
    gets.append(name)
    if len(gets) == 2:
        client.put_object(Bucket={s3.bucket!r}, Key="in/a.svm", Body={body.replace("0 1:", "1 1:")!r}.encode())
    return real(self, name, start, stop, **kw)
S3Storage.read_range = read_range
rc = main({_convert(f"{s3.url}/in/", out, "--balance", "equal", "--seed", "1", *engine)!r})
print("GETS", len(gets))
sys.exit(rc)
"""
    r = run_py(code, limits=LIMITS, timeout=120)
    check_one_line_error(r, rf"{s3.url}/in/a\.svm changed during the run")
    assert r.rc == 2 and "GETS 2" in r.out
    assert not (out / "index.json").exists() and _left(out) == []


def test_s3_keys_no_file_could_have_are_reported(tmp_path, s3):
    body = b"0 1:1 2:1 3:1\n1 1:2 2:1 3:1\n"
    for key in ("in/a.svm", "in/x/../y.svm", "in/data-under-a-dir-name/", "in/marker/"):
        s3.client.put_object(Bucket=s3.bucket, Key=key, Body=body if key != "in/marker/" else b"")
    out = tmp_path / "out"
    r = run_cli(_convert(f"{s3.url}/in/", out), limits=LIMITS,
                env={"AWS_ENDPOINT_URL": s3.endpoint, "AWS_CONFIG_FILE": "/nonexistent",
                     "AWS_SHARED_CREDENTIALS_FILE": "/nonexistent"})
    assert r.rc == 0, r.err
    warned = [ln for ln in r.err.splitlines() if ln.startswith("WARNING")]
    assert len(warned) == 1 and "2 object(s) not converted" in warned[0], r.err
    assert "in/x/../y.svm" in warned[0] and "in/data-under-a-dir-name/" in warned[0]
    assert json.loads((out / "index.json").read_text())["records"] == 2
