"""The stream's pure planning, its options, and the per-host cache's accounting (no TensorFlow, no network)."""
from __future__ import annotations

import hashlib
import json
import os
import shutil
import signal
import subprocess
import sys
import time

import pytest
from pipeline_data import cache_bytes, partial_files

from converters.util.errors import TfpipeError
from pipeline.remote.stream import check_cache_limit, epoch_order, min_cache_bytes, open_width
from pipeline.remote.streamcache import ShardCache
from pipeline.spec.streamopts import ShardRef, StreamOptions

SHA = "ab" * 32


@pytest.mark.parametrize("kw, match", [
    ({"stream_cache_dir": ""}, "stream_cache_dir must be a non-empty path"),
    ({"stream_cache_limit": "lots"}, "stream_cache_limit: invalid size 'lots'"),
    ({"stream_cache_limit": 0}, "stream_cache_limit: size must be positive"),
    ({"stream_cache_limit": 1.5}, "stream_cache_limit must be a size"),
    ({"read_ahead": -1}, "read_ahead must be an integer >= 0"),
    ({"local_readers": 0}, "local_readers must be a positive integer"),
    ({"shards": (ShardRef("a", 1, SHA),)}, "need the set's url"),
])
def test_stream_options_refuse_bad_values(kw, match):
    with pytest.raises(ValueError, match=match):
        StreamOptions(**{"stream_cache_dir": "/tmp/c", **kw})


@pytest.mark.parametrize("limit, expect", [("200GiB", 200 << 30), (4096, 4096), ("4096", 4096), (None, None)])
def test_cache_limit_forms(limit, expect):
    assert StreamOptions("/tmp/c", limit).stream_cache_limit == expect


def test_stream_options_have_one_spelling():
    for wrong in ("cache_dir", "cache_limit"):   # cache= is tf.data's cache stage: the stream's are stream_*
        with pytest.raises(TypeError, match=wrong):
            StreamOptions("/tmp/c", **{wrong: "/tmp/b"})
    assert not hasattr(StreamOptions("/tmp/c"), "cache_dir")


@pytest.mark.parametrize("name, bytes_, sha", [("../x", 1, SHA), ("/abs", 1, SHA), ("a", -1, SHA), ("a", 1, "xyz")])
def test_shard_refs_refuse_bad_entries(name, bytes_, sha):
    with pytest.raises(ValueError):
        ShardRef(name, bytes_, sha)


def test_epoch_order_is_a_pure_function_of_seed_and_epoch():
    assert epoch_order(12, 1, 0, False) == list(range(12))
    a, b = epoch_order(12, 1, 0, True), epoch_order(12, 1, 1, True)
    assert a == epoch_order(12, 1, 0, True) and sorted(a) == sorted(b) == list(range(12)) and a != b


@pytest.mark.parametrize("read, par, width", [("sequential", 1, 1), ("interleave", 4, 4), ("parallel_reads", 3, 3)])
def test_open_width(read, par, width):
    assert open_width(read, par) == width


def test_minimum_names_readers_window_and_bytes(tmp_path):
    sizes = [100, 300, 200, 50]
    assert min_cache_bytes(sizes, 1, 2, 2) == 2 * (300 + 200 + 100)
    opts = StreamOptions("/tmp/c", 1199, 2, 2)
    with pytest.raises(TfpipeError, match=r"2 local reader\(s\) x \(1 open \+ 2 read ahead\).*\(stream_cache_limit=1200;"):
        check_cache_limit(opts, sizes, 1)
    assert check_cache_limit(StreamOptions("/tmp/c", 1200, 2, 2), sizes, 1) == 1200
    # no limit given: the default (half the free space of the disk) is checked the same way, and holds here
    assert check_cache_limit(StreamOptions(str(tmp_path / "c"), None, 2, 2), sizes, 1) == 1200


def _fill(cache: ShardCache, key: str, data: bytes) -> str:
    got = cache.try_acquire(key, len(data))
    assert got.state == "download"
    with open(got.path, "wb") as f:
        f.write(data)
    return cache.commit(got.path, key, hashlib.sha256(data).hexdigest())


def test_reservations_and_lru_eviction_keep_under_the_limit(tmp_path):
    cache = ShardCache(str(tmp_path), 250)
    keys = [f"{i:032x}-s{i}" for i in range(4)]
    for k in keys[:2]:
        _fill(cache, k, b"x" * 100)
    cache.release(keys[0])
    assert cache.try_acquire(keys[2], 100).state == "download"  # 200 held + 100 > 250: the unleased keys[0] goes
    assert not os.path.exists(cache.data_path(keys[0])) and os.path.exists(cache.data_path(keys[1]))
    got = cache.try_acquire(keys[3], 100)  # keys[1] leased, keys[2] reserved: no room, wait
    assert got.state == "wait" and "in use" in got.why
    assert cache.usage() <= 250 and cache_bytes(str(tmp_path)) <= 250


def test_a_dead_readers_part_and_lease_are_removed(tmp_path):
    cache = ShardCache(str(tmp_path), None)
    p = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    dead = f"{p.stdout.strip()}-1"
    key = "0" * 32 + "-s"
    part = tmp_path / "tfpipe-stream" / "data" / f".part.{dead}.100.{key}"
    lease = tmp_path / "tfpipe-stream" / "lease" / f"{dead}.{key}"
    part.write_bytes(b"half")
    lease.write_bytes(b"")
    assert cache.try_acquire(key, 100).state == "download"  # not waiting for a dead reader
    assert not part.exists() and not lease.exists()
    assert cache.owner.startswith(f"{os.getpid()}-")


def test_a_changed_ready_file_is_hashed_and_dropped(tmp_path):
    cache = ShardCache(str(tmp_path), None)
    data = b"y" * 64
    path = _fill(cache, "1" * 32 + "-s", data)
    sha = hashlib.sha256(data).hexdigest()
    assert cache.check_ready("1" * 32 + "-s", 64, sha)
    with open(path, "r+b") as f:
        f.write(b"z")
    assert not cache.check_ready("1" * 32 + "-s", 64, sha) and not os.path.exists(path)


def _key(i: int) -> str:
    return f"{i:032x}-s{i}"


def test_a_forked_reader_leases_what_it_uses(tmp_path):
    cache = ShardCache(str(tmp_path), 200)
    k = _key(0)
    _fill(cache, k, b"x" * 100)  # the parent reads it (leased)
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child reads the same shard, then keeps reading it
        try:
            got = cache.try_acquire(k, 100)
            os.write(w, got.state.encode())
            time.sleep(60)
        finally:
            os._exit(0)
    try:
        assert os.read(r, 100) == b"ready"
        cache.release(k)  # the parent is done with it; the child is not
        other = ShardCache(str(tmp_path), 200)
        assert other.try_acquire(_key(1), 150).state == "wait"  # room only by evicting the child's shard: no
        assert os.path.exists(cache.data_path(k))
    finally:
        os.kill(pid, signal.SIGKILL)
        os.waitpid(pid, 0)
    assert other.try_acquire(_key(1), 150, leased=True).state == "download"  # the child is gone: evicted now


NS_READER = r"""
import sys, time
from pipeline.remote.streamcache import ShardCache
cache = ShardCache(sys.argv[1], None)
print(cache.try_acquire(sys.argv[2], 100).state, flush=True)
time.sleep(float(sys.argv[3]))
"""


def _in_own_pid_namespace(tmp_path, *args) -> subprocess.Popen:
    script = tmp_path / "ns_reader.py"
    script.write_text(NS_READER)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in sys.path if p)}
    return subprocess.Popen(["unshare", "--pid", "--fork", "--kill-child", "--mount-proc", sys.executable, str(script), *args],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)


def test_readers_in_two_pid_namespaces_keep_each_others_downloads(tmp_path):
    probe = subprocess.run(["unshare", "--pid", "--fork", "--mount-proc", "true"], capture_output=True, text=True)
    if probe.returncode != 0:
        pytest.skip(f"unshare --pid is not available here ({probe.stderr.strip()}): needs root")
    cache, k = str(tmp_path / "c"), _key(7)
    a = _in_own_pid_namespace(tmp_path, cache, k, "30")
    try:
        assert a.stdout.readline().strip() == "download"  # A is fetching k (a part with A's owner id)
        b = _in_own_pid_namespace(tmp_path, cache, k, "0")
        out, err = b.communicate(timeout=60)
        assert out.strip() == "wait", err  # B waits for A's download: A is alive, whatever pid it has
        assert len(os.listdir(os.path.join(cache, "tfpipe-stream", "data"))) == 1  # A's part is still there
    finally:
        a.kill()
        a.wait()
    after, deadline = ShardCache(cache, None), time.monotonic() + 30  # A dies with unshare, a moment later
    while after.try_acquire(k, 100).state != "download":  # A is gone: its part removed, the download is B's
        assert time.monotonic() < deadline, "a dead reader's part was never taken over"
        time.sleep(0.1)


WAITER = r"""
import json, sys, threading, time
from converters.storage import open_storage
from pipeline.remote.stream import ReadAhead
from pipeline.spec.streamopts import ShardRef, StreamOptions
cache, secs, idle = sys.argv[1], float(sys.argv[2]), sys.argv[3] == "idle"
opts = StreamOptions(cache, url="file:///none", shards=(ShardRef("s7", 100, "7" * 64),))
stream = ReadAhead(opts, width=1, seed=None, shuffle=False, storage=open_storage(sys.argv[1]), wait_timeout=secs)
cpu, t = time.process_time(), time.monotonic()
if idle:
    time.sleep(secs)
else:
    try:
        stream.acquire(0, threading.Event())
    except Exception as exc:
        assert "waited" in str(exc), exc
print(json.dumps({"cpu": time.process_time() - cpu, "wall": time.monotonic() - t, "scans": stream.cache.scans}))
"""


def test_waiting_readers_use_little_cpu(tmp_path):
    cache = ShardCache(str(tmp_path), None)
    for i in range(300):  # a cache holding many shards: every look at it costs
        _fill(cache, _key(1000 + i), b"z")
    assert cache.try_acquire("7" * 32 + "-s7", 100).state == "download"  # this process fetches it, for long
    script = tmp_path / "waiter.py"
    script.write_text(WAITER)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in sys.path if p)}
    secs, n = 4.0, 3
    procs = [subprocess.Popen([sys.executable, str(script), str(tmp_path), str(secs), "idle" if i == n else "wait"],
                              stdout=subprocess.PIPE, text=True, env=env) for i in range(n + 1)]
    got = [json.loads(p.communicate(timeout=120)[0]) for p in procs]
    idle, waiters = got[-1], got[:-1]
    print("idle", idle, "waiters", waiters)
    for w in waiters:
        assert w["wall"] >= secs * 0.9
        assert w["scans"] <= 6 * secs, w  # looks at the cache a few times a second at most (50/s before)
        assert w["cpu"] - idle["cpu"] < 0.05 * w["wall"], (w, idle)  # under 5 % of a core more than idling


def test_specs_with_different_limits_on_one_directory(tmp_path):
    from pipeline.remote.stream import _cache_for

    c = str(tmp_path / "c")
    first = _cache_for(StreamOptions(c, 1000))
    assert _cache_for(StreamOptions(c, 300)) is first and first.limit == 300  # the smallest holds
    assert _cache_for(StreamOptions(c, None)).limit == 300 and _cache_for(StreamOptions(c, 5000)).limit == 300
    for i in range(3):
        _fill(first, _key(i), b"q" * 100)
    assert first.try_acquire(_key(9), 100).state == "wait"  # 300 bytes leased: no room under the smaller limit


def test_a_planted_part_with_a_live_pid_and_start_time_0_is_not_waited_for(tmp_path):
    cache = ShardCache(str(tmp_path), None)
    key = _key(3)
    planted = tmp_path / "tfpipe-stream" / "data" / f".part.{os.getpid()}-0.100.{key}"  # this pid, alive
    planted.write_bytes(b"")
    assert cache.try_acquire(key, 100).state == "download"  # nobody holds its owner's lock: not a reader
    assert not planted.exists()


def _plant(root, case: str, outside) -> None:
    """One fault under ``root`` (= <cache_dir>/tfpipe-stream, created by a first reader)."""
    if case == "data_key_dir":
        (root / "data" / _key(5)).mkdir()
    elif case == "lock_dir":
        (root / "lock").unlink(missing_ok=True)
        (root / "lock").mkdir()
    elif case == "lease_file":
        shutil.rmtree(root / "lease")
        (root / "lease").write_bytes(b"")
    elif case == "data_link":
        os.rename(root / "data", outside)
        os.symlink(outside, root / "data")
    elif case == "lock_dangling_link":
        (root / "lock").unlink(missing_ok=True)
        os.symlink(outside / "made-by-the-cache", root / "lock")


@pytest.mark.parametrize("case, match", [
    ("data_key_dir", r"tfpipe-stream/data/0+5-s5: is a directory, not a file"),
    ("lock_dir", r"tfpipe-stream/lock: is a directory, not a file"),
    ("lease_file", r"tfpipe-stream/lease: is not a directory"),
    ("data_link", r"tfpipe-stream/data: is a symbolic link \(links inside the cache are refused\)"),
    ("lock_dangling_link", r"tfpipe-stream/lock: is a symbolic link"),
])
def test_cache_faults_are_one_line_naming_the_path(tmp_path, case, match):
    from converters.storage.owners import CacheFault

    cache_dir, outside = tmp_path / "c", tmp_path / "outside"
    _fill(ShardCache(str(cache_dir), None), _key(1), b"a" * 10)  # a cache in use
    if case != "data_link":
        outside.mkdir()
    _plant(cache_dir / "tfpipe-stream", case, outside)
    before = sorted(os.listdir(outside))
    with pytest.raises(CacheFault, match=match) as info:
        ShardCache(str(cache_dir), None).try_acquire(_key(5), 10)
    assert "\n" not in str(info.value) and "stream_cache_dir" in str(info.value)
    assert sorted(os.listdir(outside)) == before  # nothing written (or evicted) outside the cache
    assert not partial_files(str(cache_dir))


def test_a_filled_cache_remounted_read_only_is_one_line(tmp_path, mounted):
    from converters.storage.owners import CacheFault

    cache_dir = tmp_path / "c"
    cache_dir.mkdir()
    _fill(ShardCache(str(cache_dir), None), _key(1), b"a" * 10)
    mounted(["--bind", str(cache_dir)], cache_dir)
    mounted(["-o", "remount,bind,ro"], cache_dir)
    with pytest.raises(CacheFault, match=r"tfpipe-stream/lock: read-only file system"):
        ShardCache(str(cache_dir), None).try_acquire(_key(5), 10)
