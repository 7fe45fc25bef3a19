"""The stream's pure planning, its options, and the per-host cache's accounting (no TensorFlow, no network)."""
from __future__ import annotations

import hashlib
import os
import subprocess
import sys

import pytest
from pipeline_data import cache_bytes

from converters.util.errors import TfpipeError
from pipeline.remote.stream import check_cache_limit, epoch_order, min_cache_bytes, open_width
from pipeline.remote.streamcache import ShardCache, owner_id
from pipeline.spec.streamopts import ShardRef, StreamOptions

SHA = "ab" * 32


@pytest.mark.parametrize("kw, match", [
    ({"cache_dir": ""}, "cache_dir must be a non-empty path"),
    ({"cache_limit": "lots"}, "cache_limit: invalid size 'lots'"),
    ({"cache_limit": 0}, "cache_limit: size must be positive"),
    ({"cache_limit": 1.5}, "cache_limit must be a size"),
    ({"read_ahead": -1}, "read_ahead must be an integer >= 0"),
    ({"local_readers": 0}, "local_readers must be a positive integer"),
    ({"shards": (ShardRef("a", 1, SHA),)}, "need the set's url"),
])
def test_stream_options_refuse_bad_values(kw, match):
    with pytest.raises(ValueError, match=match):
        StreamOptions(**{"cache_dir": "/tmp/c", **kw})


@pytest.mark.parametrize("limit, expect", [("200GiB", 200 << 30), (4096, 4096), ("4096", 4096), (None, None)])
def test_cache_limit_forms(limit, expect):
    assert StreamOptions("/tmp/c", limit).cache_limit == expect


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


def test_minimum_names_readers_window_and_bytes():
    sizes = [100, 300, 200, 50]
    assert min_cache_bytes(sizes, 1, 2, 2) == 2 * (300 + 200 + 100)
    opts = StreamOptions("/tmp/c", 1199, 2, 2)
    with pytest.raises(TfpipeError, match=r"2 local reader\(s\) x \(1 open \+ 2 read ahead\).*\(cache_limit=1200;"):
        check_cache_limit(opts, sizes, 1)
    assert check_cache_limit(StreamOptions("/tmp/c", 1200, 2, 2), sizes, 1) == 1200
    assert check_cache_limit(StreamOptions("/tmp/c", None), sizes, 1) is None


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
    assert owner_id().startswith(f"{os.getpid()}-")


def test_a_changed_ready_file_is_hashed_and_dropped(tmp_path):
    cache = ShardCache(str(tmp_path), None)
    data = b"y" * 64
    path = _fill(cache, "1" * 32 + "-s", data)
    sha = hashlib.sha256(data).hexdigest()
    assert cache.check_ready("1" * 32 + "-s", 64, sha)
    with open(path, "r+b") as f:
        f.write(b"z")
    assert not cache.check_ready("1" * 32 + "-s", 64, sha) and not os.path.exists(path)
