"""Hostile use with ``s3://`` (a real S3 endpoint: moto's server on 127.0.0.1, fixtures from conftest.py):
manifests whose names lead out of the set for upload, download and the pipeline's S3 cache; a cache file
replaced behind tfpipe's back; two writers on one prefix and stale claims; an endpoint that accepts
connections and never answers."""
from __future__ import annotations

import json
import os
import pathlib
import socket
import threading

import pytest
from hostile import check_one_line_error, run_cli, snapshot
from moto_s3 import keys

from converters.libsvm.synthetic import write_criteo_shards
from converters.shardset.options import ShardOutputOptions
from converters.shardset.writer import ShardSetWriter
from converters.storage import CLAIM_NAME
from converters.storage.claim import Holder
from converters.util.errors import IntegrityError, OutputInUseError
from pipeline.build import build_dataset
from pipeline import PipelineSpec
from sharding.transfer import download


def _escaping_set(s3, tmp_path, name):
    """A shard set in S3 whose manifest names ``name`` for its first shard (the object is there too)."""
    src = tmp_path / "src"
    m = write_criteo_shards(str(src), 100, shard_bytes=10_000)
    data = json.loads((src / "index.json").read_text())
    data["shards"][0]["name"] = name
    for s in m.shards:
        s3.client.upload_file(str(src / s.name), s3.bucket, f"set/{s.name}")
    s3.client.put_object(Bucket=s3.bucket, Key=f"set/{name}", Body=b"x")
    s3.client.put_object(Bucket=s3.bucket, Key="set/index.json", Body=json.dumps(data).encode())
    return f"{s3.url}/set"


@pytest.mark.parametrize("name", ["../../escape.tfrecord", "/tmp/escape.tfrecord", "sub/train-00000-of-00002.tfrecord"])
def test_download_and_s3_cache_never_write_outside(s3, tmp_path, name):
    url = _escaping_set(s3, tmp_path, name)
    before = snapshot(tmp_path)
    with pytest.raises(IntegrityError, match=r"shards\[0\] name .* not a shard of this set"):
        download(url, str(tmp_path / "dl" / "here"))
    with pytest.raises(IntegrityError, match=r"shards\[0\] name"):
        PipelineSpec.from_manifest(url, 8, stream_cache_dir=str(tmp_path / "cache" / "c"))
    assert snapshot(tmp_path) == before
    assert not os.path.exists("/tmp/escape.tfrecord")


def test_upload_refuses_an_escaping_local_manifest(s3, tmp_path):
    src = tmp_path / "src"
    write_criteo_shards(str(src), 100, shard_bytes=10_000)
    data = json.loads((src / "index.json").read_text())
    data["shards"][0]["name"] = "../../secret/x.tfrecord"
    (src / "index.json").write_text(json.dumps(data))
    r = run_cli(["upload", str(src), f"{s3.url}/up", "--endpoint-url", s3.endpoint, "--no-progress"])
    check_one_line_error(r, r"shards\[0\] name '\.\./\.\./secret/x\.tfrecord'")
    assert keys(s3) == []


def test_s3_cache_rechecks_a_reused_file(s3, tmp_path):
    src = tmp_path / "src"
    m = write_criteo_shards(str(src), 100, shard_bytes=10_000)
    for n in os.listdir(src):
        s3.client.upload_file(str(src / n), s3.bucket, f"set/{n}")
    cache = tmp_path / "cache"
    spec = PipelineSpec.from_manifest(f"{s3.url}/set", 8, stream_cache_dir=str(cache))  # streamed when read
    assert sum(len(b[1]) for b in build_dataset(spec)) == 100
    first = pathlib.Path(spec.files[0])
    first.write_bytes(b"\0" * first.stat().st_size)  # same size, other bytes
    assert sum(len(b[1]) for b in build_dataset(spec)) == 100
    assert first.read_bytes() == (src / m.shards[0].name).read_bytes()  # fetched again, not reused by size


def test_one_writer_per_s3_prefix(s3):
    url = f"{s3.url}/one"
    w = ShardSetWriter(url, ShardOutputOptions())
    with pytest.raises(OutputInUseError, match=rf"in use by another run \(pid {os.getpid()} on host"):
        ShardSetWriter(url, ShardOutputOptions())
    w.abort()
    assert keys(s3, "one/") == []  # claim released
    ShardSetWriter(url, ShardOutputOptions()).abort()


def test_stale_s3_claim_is_taken_over_but_another_hosts_is_not(s3, caplog):
    dead = Holder("old", 2 ** 22 + 12345, socket.gethostname(), "2000-01-01T00:00:00Z")
    s3.client.put_object(Bucket=s3.bucket, Key=f"stale/{CLAIM_NAME}", Body=dead.to_bytes())
    ShardSetWriter(f"{s3.url}/stale", ShardOutputOptions()).abort()
    assert "taking over the stale claim of pid 4206649" in caplog.text
    other = Holder("x", 1, "another-host", "2000-01-01T00:00:00Z")
    s3.client.put_object(Bucket=s3.bucket, Key=f"other/{CLAIM_NAME}", Body=other.to_bytes())
    with pytest.raises(OutputInUseError, match=r"pid 1 on host another-host.*remove s3://.*/other/\.tfpipe-tmp-claim"):
        ShardSetWriter(f"{s3.url}/other", ShardOutputOptions())


@pytest.fixture
def black_hole():
    """A TCP server on 127.0.0.1 that accepts connections and never answers."""
    srv = socket.socket()
    srv.bind(("127.0.0.1", 0))
    srv.listen(64)
    conns, stop = [], threading.Event()

    def accept():
        srv.settimeout(0.2)
        while not stop.is_set():
            try:
                conns.append(srv.accept()[0])
            except OSError:
                continue
    t = threading.Thread(target=accept, daemon=True)
    t.start()
    yield f"http://127.0.0.1:{srv.getsockname()[1]}"
    stop.set()
    t.join()
    for c in conns:
        c.close()
    srv.close()


def test_an_endpoint_that_never_answers_fails_in_bounded_time(black_hole, tmp_path):
    env = {"AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing", "AWS_DEFAULT_REGION": "us-east-1",
           "AWS_ENDPOINT_URL": black_hole, "TFPIPE_S3_READ_TIMEOUT": "0.5", "TFPIPE_S3_CONNECT_TIMEOUT": "0.5",
           "TFPIPE_S3_MAX_ATTEMPTS": "2", "AWS_CONFIG_FILE": "/nonexistent", "AWS_SHARED_CREDENTIALS_FILE": "/nonexistent"}
    startup = run_cli(["verify", str(tmp_path / "none")], env=env).secs  # the same CLI failing at once
    r = run_cli(["verify", "s3://bucket/set"], env=env, timeout=30)
    check_one_line_error(r, r"did not answer; gave up after 2 attempts in \d+ s \(connect timeout 0\.5 s, "
                            r"read timeout 0\.5 s per attempt")
    # bounded by the settings: two attempts of 0.5 s plus one backoff (<= 1 s), beyond the start-up
    assert r.secs < startup + 2 * 0.5 + 1 + 5


def test_default_timeouts_bound_a_silent_endpoint():
    from converters.storage.s3 import (
        DEFAULT_CONNECT_TIMEOUT,
        DEFAULT_MAX_ATTEMPTS,
        DEFAULT_READ_TIMEOUT,
    )

    # worst case: every attempt waits out its read timeout, plus botocore's backoff (at most 2^(k-1) s before
    # attempt k+1): well under a minute, where the old defaults (8 x 60 s) waited 551 s
    backoff = sum(2 ** k for k in range(DEFAULT_MAX_ATTEMPTS - 1))
    assert DEFAULT_MAX_ATTEMPTS * DEFAULT_READ_TIMEOUT + backoff < 60  # accepted, never answered
    assert DEFAULT_MAX_ATTEMPTS * (DEFAULT_CONNECT_TIMEOUT + DEFAULT_READ_TIMEOUT) + backoff < 70
