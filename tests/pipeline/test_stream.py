"""Streaming an s3:// shard set through the bounded per-host cache, against moto's server (fixtures ``s3``,
``moto_endpoint``) behind ``bench.infra.netlink.Link`` (a bandwidth limit and injected 503 SlowDown / resets)."""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time

import pytest
from pipeline_data import cache_bytes, labels_of, partial_files, write_indexed_set

from bench.infra.netlink import Link
from converters.storage.s3 import S3Storage
from converters.util.errors import TfpipeError
from converters.storage.download import fetch_verified
from pipeline import PipelineSpec, build_dataset
from pipeline.remote.stream import STREAMS

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SHARD = 256 << 10


def _port(endpoint: str) -> int:
    return int(endpoint.rsplit(":", 1)[1])


def _upload(s3, tmp_path, records, shard_bytes):
    local = tmp_path / "local"
    m = write_indexed_set(local, records, shard_bytes=shard_bytes)
    for name in sorted(os.listdir(local)):
        s3.client.upload_file(str(local / name), s3.bucket, f"set/{name}")
    return m, f"{s3.url}/set", str(local)


@pytest.fixture
def remote(s3, tmp_path):
    """A 12-shard indexed set (label = record index) of 256 KiB shards in S3, and the same set on local disk."""
    return _upload(s3, tmp_path, 36_000, SHARD)


@pytest.fixture
def link(s3, monkeypatch):
    """``link(rate)``: every S3 request from now on goes through a Link to moto (rate bytes/s, None: no limit)."""
    made = []

    def make(rate=None):
        ln = Link(_port(s3.endpoint), rate)
        made.append(ln)
        monkeypatch.setenv("AWS_ENDPOINT_URL", ln.endpoint)
        return ln
    yield make
    for ln in made:
        ln.close()


def _files_under(d) -> list[str]:
    return sorted(os.path.relpath(os.path.join(r, f), d) for r, _, fs in os.walk(d) for f in fs)


def test_twelve_shards_first_batch_needs_a_fraction_of_a_full_copy(s3, link, tmp_path):
    """The first batch comes after a fraction of the set has crossed the link (the shard it is in and the read
    ahead), so in a fraction of a full copy's time. The bytes are the check: beside busy processes the first
    batch's CPU work (threads handing over, the graph starting) stretches far more than the link-bound copy."""
    m, url, local = _upload(s3, tmp_path, 12 * 48_000, 4 << 20)  # 12 shards of 4 MiB: a 2 s copy at 24 MiB/s
    assert len(m.shards) == 12
    next(iter(build_dataset(PipelineSpec.from_manifest(local, 1000))))  # TensorFlow warmed up (graph, first batch)
    ln = link(24 << 20)
    spec = PipelineSpec.from_manifest(url, 1000, stream_cache_dir=str(tmp_path / "cache"))
    storage = S3Storage(url)
    storage.client  # noqa: B018 - both clocks start with an S3 client ready
    t = time.perf_counter()
    for i, s in enumerate(m.shards):  # the full copy, through the same link and checks
        fetch_verified(storage, s.name, str(tmp_path / f"copy{i}"), s.bytes, s.sha256)
    full_copy, copied = time.perf_counter() - t, ln.bytes_down
    ds = build_dataset(spec)
    t = time.perf_counter()
    it = iter(ds)
    first = next(it)
    first_batch, before_first = time.perf_counter() - t, ln.bytes_down - copied
    rest = labels_of(it)
    assert sorted([int(v) for v in first[1].numpy()] + rest) == list(range(m.records))
    assert ln.bytes_down - copied > 0.99 * copied   # the read took every shard through the link
    print(f"first batch {first_batch:.3f} s after {before_first} bytes; full copy {full_copy:.3f} s, {copied} bytes")
    # at most 4 shards of 12: the one read, the read-ahead (2 by default) and one more
    assert before_first <= copied / 3, (before_first, copied, first_batch, full_copy)


def test_order_is_seeded_per_epoch_and_a_rerun_repeats_it(remote, link, tmp_path):
    m, url, _ = remote
    link()
    kw = dict(stream_cache_dir=str(tmp_path / "c"), stream_cache_limit=6 * SHARD, read_ahead=1, shuffle_buffer=500, seed=7,
              epochs=2, cache="none", resumable=False)   # the plain streamed graph (test_resumestream: the other)
    runs = [labels_of(build_dataset(PipelineSpec.from_manifest(url, 250, **kw))) for _ in range(2)]
    assert runs[0] == runs[1]
    first, second = runs[0][:36_000], runs[0][36_000:]
    assert sorted(first) == sorted(second) == list(range(36_000)) and first != second


def test_transient_faults_are_retried(remote, link, tmp_path, caplog):
    """503 SlowDown answers and connections reset mid-body are retried; a reset reaches the reader as a reset
    (ECONNRESET), not as a stalled read ended by the read timeout."""
    import logging

    m, url, _ = remote
    ln = link(64 << 20)
    spec = PipelineSpec.from_manifest(url, 500, stream_cache_dir=str(tmp_path / "c"), stream_cache_limit=4 * SHARD, read_ahead=1)
    ln.arm(slowdown=3, resets=3)
    with caplog.at_level(logging.WARNING, logger="converters.storage.download"):
        assert sorted(labels_of(build_dataset(spec))) == list(range(36_000))
    assert ln.injected == {"slowdown": 3, "reset": 3}
    assert not partial_files(str(tmp_path / "c"))
    retries = [r.getMessage() for r in caplog.records if "; retry " in r.getMessage()]
    assert sum("SlowDown" in r for r in retries) == 3, retries
    assert sum("Connection reset by peer" in r for r in retries) == 3, retries
    assert not [r for r in retries if "timed out" in r], retries


def test_a_cache_below_one_shard_is_refused_before_any_download(remote, link, tmp_path):
    m, url, _ = remote
    ln = link()
    with pytest.raises(TfpipeError, match=r"stream_cache_limit 100\.0 KiB .*stream cache .* need at least .*stream_cache_limit="):
        PipelineSpec.from_manifest(url, 100, stream_cache_dir=str(tmp_path / "c"), stream_cache_limit=str(100 << 10))
    assert ln.bytes_down < 64 << 10  # the manifest only
    assert not os.path.exists(tmp_path / "c" / "tfpipe-stream" / "data") or not _files_under(tmp_path / "c")


def test_a_shard_changed_in_s3_is_refused_by_name(remote, link, s3, tmp_path):
    m, url, local = remote
    link()
    spec = PipelineSpec.from_manifest(url, 100, stream_cache_dir=str(tmp_path / "c"))
    bad = m.shards[3].name
    data = bytearray(open(os.path.join(local, bad), "rb").read())
    data[100] ^= 0xFF
    s3.client.put_object(Bucket=s3.bucket, Key=f"set/{bad}", Body=bytes(data))
    with pytest.raises(Exception, match=rf"{bad}: sha256 .* \(fetched twice\)"):
        labels_of(build_dataset(spec))
    assert not any(bad in f for f in _files_under(tmp_path / "c"))


def test_the_cache_never_deletes_what_it_did_not_create(remote, link, tmp_path):
    m, url, _ = remote
    link()
    cache = tmp_path / "c"
    foreign = [cache / m.shards[0].name, cache / "tfpipe-stream" / "data" / ".part.notes.txt",
               cache / "tfpipe-stream" / "data" / "mine.txt"]
    for f in foreign:
        f.parent.mkdir(parents=True, exist_ok=True)
        f.write_bytes(b"x" * 10)
    spec = PipelineSpec.from_manifest(url, 500, stream_cache_dir=str(cache), stream_cache_limit=4 * SHARD, read_ahead=1,
                                      epochs=2, cache="none")
    assert sorted(labels_of(build_dataset(spec))) == sorted(list(range(36_000)) * 2)
    assert all(f.read_bytes() == b"x" * 10 for f in foreign)


READER = r"""
import json, os, sys, time
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
from converters.cli.quiet import lean_tensorflow_import
lean_tensorflow_import()                # a reader needs no Keras (TensorFlow then starts in about a third less CPU)
from pipeline import PipelineSpec, build_dataset
from pipeline.spec.streamopts import StreamOptions
for a in json.loads(sys.argv[1]):       # the runs, one after another (each through its own S3 endpoint if given)
    if a.get("endpoint"):
        os.environ["AWS_ENDPOINT_URL"] = a["endpoint"]
    stream = StreamOptions(a["stream_cache_dir"], a["limit"], a["read_ahead"], a["readers"])
    spec = PipelineSpec.from_manifest(a["url"], 200, stream=stream, cache="none", **a["kw"])
    out = []
    open(a["out"] + ".started", "w").close()
    for f, y in build_dataset(spec):
        out.extend(int(v) for v in y.numpy())
        time.sleep(a.get("pause", 0))
    json.dump(out, open(a["out"], "w"))
"""


def _reader(tmp_path, *runs):
    """A reader process (``READER``) doing ``runs`` in turn, each a dict of its options and its ``name``; the
    process and the paths of each run's labels (JSON)."""
    script = tmp_path / "reader.py"
    script.write_text(READER)
    runs = [{**r, "out": str(tmp_path / f"{r['name']}.json")} for r in runs]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([ROOT, os.path.join(ROOT, "tests")])}
    proc = subprocess.Popen([sys.executable, str(script), json.dumps(runs)], env=env, stderr=subprocess.PIPE,
                            text=True)
    return proc, [r["out"] for r in runs]


def test_two_local_ranks_share_one_cache(remote, link, tmp_path):
    """Two rank processes on one host (``local_readers=2``), side by side, each doing two runs in turn. First one
    epoch through a shared cache without a limit: every shard crosses the link once although both ranks need
    it (downloaded once). Then two epochs through a shared cache bounded to 5 shards: every record is read once
    per epoch while the bytes under the cache, sampled every 5 ms, stay under the limit, and no lease is left.
    Each run has its own link, so the bytes of the first are counted alone."""
    m, url, _ = remote
    once, bounded = link(48 << 20), link(48 << 20)
    shared, small = str(tmp_path / "shared"), str(tmp_path / "small")
    limit = 5 * max(s.bytes for s in m.shards)
    peak, stop = [0], threading.Event()

    def sample():
        while not stop.is_set():
            peak[0] = max(peak[0], cache_bytes(small))
            time.sleep(0.005)
    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    ranks = {"num_shards": 2, "equal_steps": False}
    procs = [_reader(tmp_path,
                     dict(name=f"once{i}", url=url, endpoint=once.endpoint, stream_cache_dir=shared, limit=None,
                          read_ahead=2, readers=2, kw={**ranks, "shard_index": i}),
                     dict(name=f"bounded{i}", url=url, endpoint=bounded.endpoint, stream_cache_dir=small, limit=limit,
                          read_ahead=1, readers=2, kw={**ranks, "shard_index": i, "epochs": 2})) for i in range(2)]
    try:
        for proc, _ in procs:
            _, err = proc.communicate(timeout=300)
            assert proc.returncode == 0, err[-3000:]
    finally:
        stop.set()
        sampler.join()
    got = [json.load(open(outs[0])) for _, outs in procs]
    assert sorted(got[0] + got[1]) == list(range(36_000))
    assert m.total_bytes <= once.bytes_down < 1.2 * m.total_bytes, (once.bytes_down, m.total_bytes)  # once each
    got = [json.load(open(outs[1])) for _, outs in procs]
    for e in range(2):
        epoch = [r for labels in got for r in labels[e * len(labels) // 2:(e + 1) * len(labels) // 2]]
        assert sorted(epoch) == list(range(36_000)), f"bounded cache, epoch {e}"
    assert bounded.bytes_down >= m.total_bytes                    # (the second run went through its own link)
    assert 0 < peak[0] <= limit
    assert not os.listdir(os.path.join(small, "tfpipe-stream", "lease"))


def test_a_reader_killed_mid_stream_leaves_nothing_that_breaks_a_rerun(remote, link, tmp_path):
    m, url, local = remote
    link(1 << 20)  # slow enough to kill it while a shard is on its way (a 256 KiB shard: 0.25 s)
    cache = str(tmp_path / "c")
    proc, (out,) = _reader(tmp_path, dict(name="killed", url=url, stream_cache_dir=cache, limit=4 * SHARD, read_ahead=2,
                                          readers=1, kw={}))
    deadline = time.monotonic() + 120
    while not (partial_files(cache) and os.path.exists(out + ".started")):
        assert proc.poll() is None and time.monotonic() < deadline, "the reader never started a download"
        time.sleep(0.01)
    time.sleep(0.05)   # inside that download: later, it may have ended with the cache full (a starved consumer)
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    assert partial_files(cache)  # it died holding a partial download (and leases)
    link()
    spec = PipelineSpec.from_manifest(url, 200, stream_cache_dir=cache, stream_cache_limit=4 * SHARD, read_ahead=2)
    expected = labels_of(build_dataset(PipelineSpec.from_manifest(local, 200)))
    assert labels_of(build_dataset(spec)) == expected
    assert not partial_files(cache)
    lease = os.listdir(os.path.join(cache, "tfpipe-stream", "lease"))
    assert not [x for x in lease if x.startswith(f"{proc.pid}-")]
    assert any(s.stats["fetched"] for s in STREAMS)


def test_explain_shows_the_stream_stage_and_refuses_a_small_cache(remote, tmp_path):
    from hostile import check_one_line_error, run_cli

    m, url, _ = remote
    r = run_cli(["pipeline", "explain", url, "--batch-size", "100", "--stream-cache-dir", str(tmp_path / "c"),
                 "--stream-cache-limit", "10MiB", "--read-ahead", "1"])
    assert r.rc == 0, r.err
    lines = r.out.splitlines()
    stream = next(i for i, ln in enumerate(lines) if ln.startswith("1. stream   on"))
    assert f"from={url}" in lines[stream] and "stream_cache_limit=10.0 MiB read_ahead=1" in lines[stream]
    assert f"stream_cache_dir={tmp_path / 'c'}" in lines[stream] and "min_cache=" in lines[stream]
    assert lines[stream + 1].startswith("   why: TensorFlow cannot read s3:// itself")
    assert lines[stream + 2].startswith("2. source")
    r = run_cli(["pipeline", "explain", url, "--batch-size", "100", "--stream-cache-dir", str(tmp_path / "c"),
                 "--stream-cache-limit", "1KiB"])
    check_one_line_error(r, r"stream_cache_limit 1\.0 KiB .*stream cache.*need at least")


def test_the_stream_cache_options_have_one_spelling(remote, tmp_path):
    """``cache_dir=``/``--cache-dir`` are not the stream cache's names (``cache=`` is tf.data's cache stage): a
    misspelled option is refused with the closest valid name, before any I/O."""
    from hostile import run_cli

    m, url, _ = remote
    for wrong in ("cache_dir", "cache_limit", "cache_dri"):
        with pytest.raises(TypeError, match=r"did you mean"):
            PipelineSpec.from_manifest(url, 100, **{wrong: str(tmp_path / "c")})
    r = run_cli(["pipeline", "explain", url, "--batch-size", "100", "--cache-dir", str(tmp_path / "c")])
    assert r.rc != 0 and "--cache-dir" in r.err


def _frames(data: bytes) -> list[tuple[int, int]]:
    """(start, end) of every TFRecord frame (length, crc, data, crc) in ``data``."""
    import struct

    out, pos = [], 0
    while pos < len(data):
        n = struct.unpack("<Q", data[pos:pos + 8])[0]
        out.append((pos, pos + 16 + n))
        pos += 16 + n
    return out


def _tamper(path: str, how: str) -> None:
    """Change a cached shard in place, keeping its size and its mtime."""
    st = os.stat(path)
    data = bytearray(open(path, "rb").read())
    if how == "swap":  # two same-length records trade places: every record's CRC still holds
        (a0, a1), (b0, b1) = _frames(bytes(data))[:2]
        assert a1 - a0 == b1 - b0
        data[a0:b1] = data[b0:b1] + data[a0:a1]
    else:
        data[len(data) // 2] ^= 0x01
    with open(path, "r+b") as f:
        f.write(data)
    os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns))
    assert os.stat(path).st_size == st.st_size and os.stat(path).st_mtime_ns == st.st_mtime_ns


@pytest.mark.parametrize("how", ["swap", "flip"])
def test_a_cached_shard_changed_with_size_and_mtime_kept_is_fetched_again(remote, link, tmp_path, how):
    m, url, local = remote
    link()
    spec = PipelineSpec.from_manifest(url, 200, stream_cache_dir=str(tmp_path / "c"))
    expected = labels_of(build_dataset(PipelineSpec.from_manifest(local, 200)))
    assert labels_of(build_dataset(spec)) == expected
    cached = spec.stream.local_paths()[0]
    _tamper(cached, how)
    assert labels_of(build_dataset(spec)) == expected  # never different data, never DataLossError: healed
    assert open(cached, "rb").read() == open(os.path.join(local, m.shards[0].name), "rb").read()


def test_a_cached_shard_that_stays_damaged_is_refused_by_name(remote, tmp_path):
    from converters.storage import open_storage
    from converters.util.errors import IntegrityError
    from pipeline.remote.stream import ReadAhead

    m, url, local = remote
    spec = PipelineSpec.from_manifest(url, 200, stream_cache_dir=str(tmp_path / "c"))
    opts = spec.stream
    bad = tmp_path / "bad"
    bad.mkdir()
    for s in m.shards:
        data = bytearray(open(os.path.join(local, s.name), "rb").read())
        data[50] ^= 0xFF
        (bad / s.name).write_bytes(bytes(data))
    stream = ReadAhead(opts, width=1, seed=None, shuffle=False, storage=open_storage(str(bad)))
    with pytest.raises(IntegrityError, match=rf"{m.shards[0].name}: sha256 .* \(fetched twice\)"):
        stream.acquire(0, threading.Event())
    assert not partial_files(opts.stream_cache_dir) and not os.path.exists(opts.local_paths()[0])


def test_a_cache_fault_is_one_line_before_tensorflow_reads(remote, tmp_path):
    from converters.storage.owners import CacheFault

    m, url, _ = remote
    cache = tmp_path / "c"
    spec = PipelineSpec.from_manifest(url, 200, stream_cache_dir=str(cache))
    (cache / "tfpipe-stream").mkdir(parents=True)
    os.symlink(tmp_path, cache / "tfpipe-stream" / "data")
    with pytest.raises(CacheFault, match=r"^stream cache .*/tfpipe-stream/data: is a symbolic link") as info:
        build_dataset(spec)
    assert "\n" not in str(info.value)
