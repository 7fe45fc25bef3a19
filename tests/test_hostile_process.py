"""Hostile use that needs real processes, signals and file systems: two runs into one output, ``kill -9`` and
SIGTERM in the middle of a run, absurd ``--workers``, a read-only file system, a full disk (a 1 MiB tmpfs),
permission denied (root without CAP_DAC_OVERRIDE), a truncated compressed input. Mounts are skipped with
the reason where the machine does not allow them."""
from __future__ import annotations

import bz2
import gzip
import json
import os
import shutil
import signal
import subprocess
import time
import zlib

import psutil
import pytest
from hostile import (
    _CLI,
    check_one_line_error,
    check_outputs,
    finish,
    run_cli,
    session_processes,
    snapshot,
    start,
)

from converters.libsvm.synthetic import write_criteo_libsvm
from converters.shardset.reader import read_manifest
from converters.storage import CLAIM_NAME


def _libsvm(tmp_path, n=60_000, name="big.libsvm"):
    p = tmp_path / name
    write_criteo_libsvm(p, n, field_size=39)
    return p


@pytest.fixture(scope="module")
def big(tmp_path_factory):
    """~300k LibSVM lines (~110 MB; 30k generated, repeated): a run long enough to be caught in the middle."""
    p = tmp_path_factory.mktemp("big") / "big.libsvm"
    write_criteo_libsvm(p, 30_000, field_size=39)
    chunk = p.read_bytes()
    with open(p, "ab") as f:
        for _ in range(9):
            f.write(chunk)
    return p


def _convert(src, out, *extra):
    return ["-c", _CLI, "convert", "libsvm", str(src), "--out", str(out), "--field-size", "39", "--no-progress",
            *extra]


def _wait_for(cond, timeout=60.0, what="condition"):
    end = time.monotonic() + timeout
    while not cond():
        if time.monotonic() > end:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.02)


_HOLD = ("import sys; from converters.shardset.writer import ShardSetWriter; "
         "w = ShardSetWriter(sys.argv[1]); print('held', flush=True); sys.stdin.read()")


def test_a_run_into_an_output_in_use_fails_at_once_naming_the_holder(tmp_path):
    src, out = _libsvm(tmp_path, 2000), tmp_path / "out"
    holder = start(["-c", _HOLD, str(out)], stdin=subprocess.PIPE)  # holds the output until its stdin closes
    try:
        assert holder.stdout.readline().strip() == "held"
        r = run_cli(_convert(src, out, "--overwrite")[2:])
        check_one_line_error(r, rf"output .*out in use by another run \(pid {holder.pid} on host .+, since "
                                r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ\)")
        assert r.rc == 6
    finally:
        holder.kill()
        holder.communicate()
    r = run_cli(_convert(src, out, "--overwrite")[2:])  # the holder died: its claim is stale, taken over
    assert r.rc == 0 and "taking over the stale claim of pid" in r.err, r.err
    check_outputs([out])


def test_two_runs_at_once_one_wins_and_its_set_verifies(tmp_path, big):
    out = tmp_path / "out"
    t0 = time.monotonic()
    runs = [start(_convert(big, out, "--workers", "1")) for _ in range(2)]
    results = [finish(p, f"run {i}", t0=t0) for i, p in enumerate(runs)]
    ok = [r for r in results if r.rc == 0]
    assert len(ok) == 1, [r.err for r in results]
    loser = next(r for r in results if r.rc != 0)
    check_one_line_error(loser, r"in use by another run|is not empty")
    check_outputs([out])
    assert read_manifest(out).records == 300_000


@pytest.fixture(scope="module")
def two_days(tmp_path_factory):
    """Two raw Criteo TSV days of ~18 MB each (20k generated rows, repeated): enough input for two workers."""
    from bench.commands.tabular import write_rows

    d = tmp_path_factory.mktemp("days")
    write_rows(str(d / "rows"), 20_000)
    chunk = (d / "rows").read_bytes()
    for k in range(2):
        (d / f"day_{k}").write_bytes(chunk * 4)
    return d


# (input fixture, command, the workers a two-worker run starts besides its main process)
KILLED_RUNS = {
    "libsvm": ("big", lambda src, out: _convert(src, out, "--shard-size", "1MiB"), 2),
    "tabular": ("two_days", lambda src, out: ["-c", _CLI, "convert", "tabular", str(src / "day_0"),
                                               str(src / "day_1"), "--out", str(out), "--no-progress"], 1),
}


@pytest.mark.parametrize("fmt", list(KILLED_RUNS))
def test_kill_9_leaves_no_worker_and_the_rerun_takes_over(tmp_path, request, fmt):
    """kill -9 of the main process of a two-worker run (what the OOM killer does): its workers die with it,
    the rerun takes the stale claim over, and nothing of the killed run appears in the committed set later."""
    data, command, pool = KILLED_RUNS[fmt]
    src, out = request.getfixturevalue(data), tmp_path / "out"
    p = start(command(src, out) + ["--workers", "2"])
    main = psutil.Process(p.pid)

    def working() -> bool:
        assert p.poll() is None, p.communicate()[1][-2000:]  # it ended before its workers were seen
        return len(main.children()) >= pool and any(n.startswith(".tfpipe-tmp-") and n != CLAIM_NAME
                                                    for n in os.listdir(out) if out.exists())

    _wait_for(working, what="workers and a first temporary file")
    workers = main.children()
    os.kill(p.pid, signal.SIGKILL)
    p.wait()  # not communicate(): workers that survived would hold its pipes open forever
    gone_by = time.monotonic() + 5
    try:
        while any(w.is_running() and w.status() != psutil.STATUS_ZOMBIE for w in workers):
            assert time.monotonic() < gone_by, f"workers outlived their parent: {[w.pid for w in workers]}"
            time.sleep(0.05)
    finally:
        for w in session_processes(p.pid):
            w.kill()
        p.stdout.close()
        p.stderr.close()
    assert not (out / "index.json").exists() and not [n for n in os.listdir(out) if n.startswith("train-")]
    r = run_cli(command(src, out)[2:] + ["--overwrite"])  # the dead run's claim is stale: taken over
    assert r.rc == 0, r.err
    assert "taking over the stale claim" in r.err
    committed = snapshot(out)
    time.sleep(1.5)  # longer than a worker's look at its parent
    assert snapshot(out) == committed
    check_outputs([out])


def test_a_worker_killed_mid_run_ends_it_in_one_line(tmp_path, big):
    src, out = big, tmp_path / "out"
    p = start(_convert(src, out, "--workers", "2", "--shard-size", "1MiB"))
    main = psutil.Process(p.pid)
    _wait_for(lambda: len(main.children()) >= 2, what="workers")
    main.children()[-1].kill()
    r = finish(p, "run with a killed worker")
    check_one_line_error(r, r"a parser worker process died \(killed by a signal, or out of memory\)")
    assert not out.exists()  # the run made it: nothing left, not even the folder


def test_sigterm_removes_temporaries_and_the_claim(tmp_path, big):
    src, out = big, tmp_path / "out"
    p = start(_convert(src, out, "--workers", "2", "--shard-size", "1MiB"))
    _wait_for(lambda: out.exists() and any(n.startswith(".tfpipe-tmp-") and n != CLAIM_NAME for n in os.listdir(out)),
              what="a first temporary shard")
    os.kill(p.pid, signal.SIGTERM)
    r = finish(p, "terminated run")
    assert r.rc == 143 and "tfpipe: terminated" in r.err and "Traceback" not in r.err, r.err
    assert not out.exists()


def test_a_thousand_workers_are_capped(tmp_path):
    src, out = _libsvm(tmp_path, 30_000), tmp_path / "out"
    p = start(_convert(src, out, "--workers", "1000", "--shard-size", "1MiB"))
    most = 0
    while p.poll() is None:
        most = max(most, len(session_processes(p.pid)))
        time.sleep(0.05)
    r = finish(p, "--workers 1000")
    assert r.rc == 0, r.err
    limit = 4 * len(os.sched_getaffinity(0))
    assert "1000 parser workers asked for" in r.err and f"using {limit}" in r.err
    assert most <= limit + 2  # main process + workers (+ a forkserver)
    check_outputs([out])


# -- file systems that refuse -------------------------------------------------------------------------------

def test_read_only_file_system(tmp_path, mounted):
    src = _libsvm(tmp_path, 2000)
    ro = tmp_path / "ro"
    ro.mkdir()
    mounted(["--bind", str(ro)], ro)
    mounted(["-o", "remount,bind,ro"], ro)
    r = run_cli(_convert(src, ro / "out")[2:])
    check_one_line_error(r, r"cannot prepare the output .*ro/out: Read-only file system")
    assert os.listdir(ro) == []


def test_disk_full(tmp_path, mounted):
    src = _libsvm(tmp_path, 20_000)  # ~5 MB of shards
    small = tmp_path / "small"
    small.mkdir()
    mounted(["-t", "tmpfs", "-o", "size=1m", "tmpfs"], small)
    r = run_cli(_convert(src, small / "out", "--shard-size", "256KiB")[2:])
    check_one_line_error(r, r"cannot write .*small/out.*: No space left on device")
    assert not (small / "out").exists()  # temporaries removed, no shard under a final name, no manifest, no claim


def test_permission_denied_without_root_privilege(tmp_path):
    if shutil.which("capsh") is None or os.geteuid() != 0:
        pytest.skip("needs root and capsh to drop CAP_DAC_OVERRIDE (as root, permissions are never denied)")
    src = _libsvm(tmp_path, 2000)
    locked = tmp_path / "locked"
    locked.mkdir(mode=0o555)
    wrap = ["capsh", "--drop=cap_dac_override,cap_dac_read_search", "--", "-c"]
    if subprocess.run([*wrap, f"touch {locked}/x"], capture_output=True).returncode == 0:
        pytest.skip("capsh could not drop the capability here")
    r = run_cli(_convert(src, locked / "out")[2:], wrap=[*wrap, 'exec "$0" "$@"'])
    check_one_line_error(r, r"locked/out: Permission denied")
    assert os.listdir(locked) == []


# -- truncated compressed input: every complete document before the damage is kept -------------------------

@pytest.mark.parametrize("suffix,compress,decompressor", [
    (".gz", gzip.compress, lambda: zlib.decompressobj(31)),
    (".bz2", bz2.compress, lambda: bz2.BZ2Decompressor()),
])
def test_truncated_input_keeps_every_complete_document(tmp_path, suffix, compress, decompressor):
    import random

    rnd = random.Random(0)
    words = ["alpha", "beta", "gamma", "delta", "eps", "zeta", "eta", "theta"]
    docs = [json.dumps({"text": " ".join(rnd.choice(words) for _ in range(rnd.randint(50, 150)))})
            for _ in range(12_000)]
    packed = compress(("\n".join(docs) + "\n").encode())
    cut = packed[: int(len(packed) * 0.93)]
    src = tmp_path / f"t.jsonl{suffix}"
    src.write_bytes(cut)
    decodable = decompressor().decompress(cut)  # an independent decoder: what can be read before the damage
    complete = decodable.count(b"\n")
    out = tmp_path / "out"
    r = run_cli(["convert", "text", str(src), "--out", str(out), "--seq-len", "64", "--on-error", "skip",
                 "--no-progress"])
    assert r.rc == 0, r.err
    assert f"at byte {len(decodable)}:" in r.err  # where decoding actually failed, not a read-block boundary
    m = read_manifest(out)
    assert m.inputs[0].records_written == complete == m.extra["documents"]
    assert m.inputs[0].skipped == {"truncated_file": 1}
    assert complete > 0.8 * len(docs)  # bz2 decodes whole 900 kB blocks only
