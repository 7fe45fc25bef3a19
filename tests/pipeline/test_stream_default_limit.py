"""The stream cache's defaults: where it goes (``scratch_root``: $TFPIPE_CACHE, $TMPDIR, SageMaker's /tmp,
~/.cache), the limit derived from the free space of its disk (``default_limit``, shown by ``describe`` and logged
where the cache is), and a set larger than a small file system (a tmpfs of a few shards) streamed from moto's S3
server through the default: bounded, never full, every record read."""
from __future__ import annotations

import logging
import os
import shutil
import subprocess
import uuid

import pytest
from pipeline_data import cache_bytes, labels_of, write_indexed_set

from converters.util.errors import TfpipeError
from converters.util.units import format_size
from converters.util.system import scratch_root
from pipeline import PipelineSpec, build_dataset, describe
from pipeline.remote.streamcache import CACHE_SUBDIR, default_limit
from pipeline.spec.streamopts import DEFAULT_LIMIT_SHARE

SHARD = 128 << 10


@pytest.mark.parametrize("env, want", [
    ({"TFPIPE_CACHE": "/c/t", "TMPDIR": "/scratch"}, ("/c/t", "$TFPIPE_CACHE")),
    ({"TMPDIR": "/scratch/job1", "SM_CURRENT_HOST": "algo-1"}, ("/scratch/job1/tfpipe", "$TMPDIR/tfpipe")),
    ({"SM_CURRENT_HOST": "algo-1"}, ("/tmp/tfpipe", "SageMaker training's scratch space /tmp")),
    ({"TRAINING_JOB_NAME": "job"}, ("/tmp/tfpipe", "SageMaker training's scratch space /tmp")),
    ({}, (os.path.join(os.path.expanduser("~"), ".cache", "tfpipe"), "~/.cache/tfpipe (no $TFPIPE_CACHE, no $TMPDIR)")),
])
def test_scratch_root(monkeypatch, env, want):
    if not env and os.path.exists("/opt/ml/input/config/resourceconfig.json"):
        pytest.skip("this host is a SageMaker training instance")
    for k in ("TFPIPE_CACHE", "TMPDIR", "SM_CURRENT_HOST", "TRAINING_JOB_NAME"):
        monkeypatch.delenv(k, raising=False)
    for k, v in env.items():
        monkeypatch.setenv(k, v)
    assert scratch_root() == want


def test_default_limit_is_half_the_free_space_plus_what_the_cache_holds(tmp_path):
    cache = tmp_path / "c"
    data = cache / CACHE_SUBDIR / "data"
    data.mkdir(parents=True)
    (data / ("0" * 32 + "-a.tfrecord")).write_bytes(b"x" * 300_000)      # a shard of the cache: counted
    (data / f".part.123-456.200000.{'1' * 32}-b.tfrecord").write_bytes(b"")  # a download's reservation: counted
    (data / "notes.txt").write_bytes(b"y" * 100_000)                     # not the cache's: not counted
    before = shutil.disk_usage(tmp_path).free
    limit, how = default_limit(str(cache / "not-yet" / ".."))
    after = shutil.disk_usage(tmp_path).free
    lo, hi = sorted((before, after))
    assert int((lo + 500_000) * DEFAULT_LIMIT_SHARE) - (1 << 20) <= limit <= int((hi + 500_000) * DEFAULT_LIMIT_SHARE) + (1 << 20)
    assert how.startswith("the default: 50% of ") and "488.3 KiB the cache holds" in how
    missing, _ = default_limit(str(tmp_path / "a" / "b" / "c"))       # not created yet: its nearest parent's disk
    assert abs(missing - int(shutil.disk_usage(tmp_path).free * DEFAULT_LIMIT_SHARE)) < (64 << 20)


@pytest.fixture
def small_fs(tmp_path):
    """A tmpfs of 2 MiB (root only; skipped where mounting is not permitted), unmounted afterwards."""
    mnt = tmp_path / "tmpfs"
    mnt.mkdir()
    r = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=2m", f"tfpipe-test-{uuid.uuid4().hex[:8]}", str(mnt)],
                       capture_output=True, text=True)
    if r.returncode:
        pytest.skip(f"cannot mount a tmpfs here: {r.stderr.strip() or r.returncode}")
    try:
        yield mnt
    finally:
        subprocess.run(["umount", "-l", str(mnt)], capture_output=True)


def test_a_set_larger_than_the_disk_streams_through_the_default_limit(s3, small_fs, tmp_path, caplog):
    """24 shards (3 MiB) through a cache on a 2 MiB file system, no stream_cache_limit given: the default limit
    (half the free space) holds the cache's bytes at every batch, the file system never fills, every record
    is read once; the log says where the cache is and what bounds it; describe shows the limit and its origin.
    An unbounded cache could not pass: the set does not fit on the file system."""
    local = tmp_path / "local"
    m = write_indexed_set(local, 24 * 1500, shard_bytes=SHARD)
    for name in sorted(os.listdir(local)):
        s3.client.upload_file(str(local / name), s3.bucket, f"set/{name}")
    assert m.total_bytes > shutil.disk_usage(small_fs).total
    cache = str(small_fs / "cache")
    spec = PipelineSpec.from_manifest(f"{s3.url}/set", 500, stream_cache_dir=cache, read_ahead=1, cache="none")
    assert spec.stream.stream_cache_limit is None              # the spec stays pure: the limit is read at open
    limit, how = default_limit(cache)
    assert 0 < limit <= shutil.disk_usage(small_fs).total * DEFAULT_LIMIT_SHARE < m.total_bytes
    text = describe(spec)
    assert f"stream_cache_limit={format_size(limit)} (the default: 50% of" in text, text
    peak, total = 0, shutil.disk_usage(small_fs).total
    labels = []
    with caplog.at_level(logging.INFO, logger="pipeline.remote.stream"):
        for _, y in build_dataset(spec):
            labels.extend(int(v) for v in y.numpy())
            peak = max(peak, cache_bytes(cache))
            assert shutil.disk_usage(small_fs).free > 0
    assert sorted(labels) == list(range(m.records))
    assert 0 < peak <= limit < total
    said = [r.getMessage() for r in caplog.records if r.getMessage().startswith("stream cache: ")]
    assert said and said[0].startswith(f"stream cache: {cache}, at most ") and "(the default: 50% of" in said[0]


def test_a_disk_too_small_for_the_default_is_refused_in_one_line(s3, small_fs, tmp_path):
    """Shards larger than the default limit allows (half of a 2 MiB disk): refused before any download, naming
    the default and how it was derived, as a given limit smaller than the largest shard is."""
    local = tmp_path / "local"
    write_indexed_set(local, 4 * 12_000, shard_bytes=1 << 20)
    for name in sorted(os.listdir(local)):
        s3.client.upload_file(str(local / name), s3.bucket, f"set/{name}")
    cache = str(small_fs / "cache")
    with pytest.raises(TfpipeError, match=r"stream_cache_limit .* bytes; the default: 50% of .* free on the file "
                                          r"system of .* is too small: .*need at least .*on a larger disk") as e:
        PipelineSpec.from_manifest(f"{s3.url}/set", 500, stream_cache_dir=cache, read_ahead=1)
    assert "\n" not in str(e.value)
    assert cache_bytes(str(small_fs)) == 0
