"""S3 against a real S3 endpoint: moto's server on 127.0.0.1 (fake credentials), optionally behind a
fault-injecting HTTP proxy that answers some requests with 500/503 SlowDown/403 or resets the connection."""
from __future__ import annotations

import hashlib
import os
import socket

import numpy as np
import pytest
from moto_s3 import keys

from converters.libsvm.options import libsvm_schema
from converters.libsvm.synthetic import (
    criteo_arrays,
    write_criteo_libsvm,
    write_criteo_shards,
)
from converters.shardset.options import ShardOutputOptions
from converters.shardset.reader import read_manifest
from converters.shardset.verify import verify
from converters.shardset.writer import ShardSetWriter
from converters.storage.s3 import S3Storage, parse_s3_url
from converters.util.errors import IntegrityError, OutputExistsError, TfpipeError

pytest.importorskip("boto3")
pytest.importorskip("moto.server")


# -- writing straight to s3:// ------------------------------------------------------------------------------

def test_parse_s3_url():
    assert parse_s3_url("s3://b") == ("b", "")
    assert parse_s3_url("s3://b/a/c/") == ("b", "a/c/")
    with pytest.raises(ValueError, match="without a bucket"):
        parse_s3_url("s3:///x")


def test_write_shard_set_straight_to_s3(s3, tmp_path):
    url = f"{s3.url}/criteo/day0"
    m = write_criteo_shards(url, 3000, shard_bytes=256 << 10)
    local = write_criteo_shards(str(tmp_path / "local"), 3000, shard_bytes=256 << 10)
    assert len(m.shards) > 1
    assert m.shards == local.shards  # same names, counts and sha256 as a local write: byte-identical shards
    assert keys(s3) == sorted([f"criteo/day0/{s.name}" for s in m.shards] + ["criteo/day0/index.json"])
    back = read_manifest(url)
    assert back == m and back.location == url
    report = verify(url)
    assert report.ok and report.records == 3000 and report.shards == len(m.shards)
    assert S3Storage(url).list() == sorted([s.name for s in m.shards] + ["index.json"])
    # rerun into the non-empty prefix is refused; with overwrite it replaces the set
    with pytest.raises(OutputExistsError, match="not empty"):
        write_criteo_shards(url, 10)
    m2 = write_criteo_shards(url, 10, overwrite=True)
    assert keys(s3) == ["criteo/day0/index.json", f"criteo/day0/{m2.shards[0].name}"]


def test_verify_names_a_damaged_object(s3):
    url = f"{s3.url}/set"
    m = write_criteo_shards(url, 500, shard_bytes=64 << 10)
    key = f"set/{m.shards[1].name}"
    data = bytearray(s3.client.get_object(Bucket=s3.bucket, Key=key)["Body"].read())
    data[100] ^= 0xFF
    s3.client.put_object(Bucket=s3.bucket, Key=key, Body=bytes(data))
    with pytest.raises(IntegrityError, match=rf"{m.shards[1].name}: corrupt record"):
        verify(url)


def test_multipart_upload_and_copy(s3):
    """Shards larger than the part size go up in parts and are published by a multipart server-side copy."""
    url = f"{s3.url}/big"
    schema = libsvm_schema(39)
    from converters.tfrecord.examples import serialize_batch

    framed, lengths = serialize_batch(schema, criteo_arrays(40_000, seed=3))  # ~12 MiB
    with ShardSetWriter(url, ShardOutputOptions(shard_size=64 << 20), part_size=5 << 20) as w:
        w.write(framed, lengths)
        m = w.finish(schema=schema)
    assert m.shards[0].bytes > 10 << 20
    head = s3.client.head_object(Bucket=s3.bucket, Key=f"big/{m.shards[0].name}")
    assert "-" in head["ETag"], "expected a multipart ETag"
    assert hashlib.sha256(framed.tobytes()).hexdigest() == m.shards[0].sha256
    assert verify(url).ok


# -- upload / download (library and CLI) ---------------------------------------------------------------------

def run_cli(argv):
    from converters.cli import main

    return main(argv)


def test_cli_upload_download_round_trip_reads_in_tensorflow(s3, tmp_path, capsys):
    src = tmp_path / "src"
    m = write_criteo_shards(str(src), 1200, shard_bytes=128 << 10)
    dest = f"{s3.url}/up"
    # explicit --endpoint-url for upload, AWS_ENDPOINT_URL for download
    assert run_cli(["upload", str(src), dest, "--endpoint-url", s3.endpoint, "--no-progress"]) == 0
    assert "uploaded" in capsys.readouterr().out
    assert "up/index.json" in keys(s3)
    head = s3.client.head_object(Bucket=s3.bucket, Key=f"up/{m.shards[0].name}")
    assert head["Metadata"]["sha256"] == m.shards[0].sha256
    out = tmp_path / "down"
    assert run_cli(["download", dest, str(out), "--no-progress"]) == 0
    for s in m.shards:
        assert (out / s.name).read_bytes() == (src / s.name).read_bytes()
    assert (out / "index.json").read_bytes() == (src / "index.json").read_bytes()
    assert sorted(os.listdir(out)) == sorted([s.name for s in m.shards] + ["index.json"])

    tf = pytest.importorskip("tensorflow")
    spec = {"label": tf.io.FixedLenFeature([], tf.float32), "ids": tf.io.FixedLenFeature([39], tf.int64),
            "values": tf.io.FixedLenFeature([39], tf.float32)}
    ds = tf.data.TFRecordDataset([str(out / s.name) for s in m.shards]).batch(2000).map(
        lambda x: tf.io.parse_example(x, spec))
    got = next(iter(ds))
    want = criteo_arrays(1200, seed=0)
    for k in ("label", "ids", "values"):
        np.testing.assert_array_equal(got[k].numpy(), want[k].reshape(got[k].shape))


def test_upload_never_replaces_a_manifest_without_overwrite(s3, tmp_path, capsys):
    a = write_criteo_shards(str(tmp_path / "a"), 100)
    write_criteo_shards(str(tmp_path / "b"), 50, seed=7)
    dest = f"{s3.url}/x"
    assert run_cli(["upload", str(tmp_path / "a"), dest, "--no-progress"]) == 0
    before = s3.client.get_object(Bucket=s3.bucket, Key="x/index.json")["Body"].read()
    capsys.readouterr()
    assert run_cli(["upload", str(tmp_path / "b"), dest, "--no-progress"]) == 3
    assert "not empty" in capsys.readouterr().err
    assert s3.client.get_object(Bucket=s3.bucket, Key="x/index.json")["Body"].read() == before
    assert run_cli(["upload", str(tmp_path / "b"), dest, "--overwrite", "--no-progress"]) == 0
    assert read_manifest(dest).records == 50 and read_manifest(dest).shards != a.shards


def test_download_checks_sha256_and_writes_no_manifest_on_mismatch(s3, tmp_path, capsys):
    from sharding import download

    url = f"{s3.url}/d"
    m = write_criteo_shards(url, 400, shard_bytes=32 << 10)
    key = f"d/{m.shards[-1].name}"
    data = bytearray(s3.client.get_object(Bucket=s3.bucket, Key=key)["Body"].read())
    data[-1] ^= 1  # same size, different bytes
    s3.client.put_object(Bucket=s3.bucket, Key=key, Body=bytes(data))
    with pytest.raises(IntegrityError, match=rf"{m.shards[-1].name}: sha256 .* differs"):
        download(url, str(tmp_path / "out"))
    assert not (tmp_path / "out" / "index.json").exists()
    assert not (tmp_path / "out" / m.shards[-1].name).exists()
    assert run_cli(["download", url, str(tmp_path / "out2"), "--no-progress"]) == 4
    assert "differs from the manifest" in capsys.readouterr().err


@pytest.mark.parametrize("argv, code, message", [
    # a missing bucket read from is a missing input (exit 2, as a missing path); one written to is an output error
    (["download", "s3://no-such-bucket-xyz/p", "{tmp}/o"], 2, "bucket 'no-such-bucket-xyz' does not exist"),
    (["inspect", "s3://no-such-bucket-xyz/p"], 2, "cannot read s3://no-such-bucket-xyz/p/index.json: bucket"),
    (["index", "s3://no-such-bucket-xyz/p"], 2, "cannot list s3://no-such-bucket-xyz/p: bucket"),
    (["convert", "libsvm", "s3://no-such-bucket-xyz/x.libsvm", "--out", "{tmp}/o", "--field-size", "2"], 2,
     "bucket 'no-such-bucket-xyz' does not exist"),
    (["pipeline", "explain", "s3://no-such-bucket-xyz/p", "--batch-size", "8"], 2, "does not exist"),
    (["upload", "{tmp}/set", "s3://no-such-bucket-xyz/up"], 1,
     "cannot write s3://no-such-bucket-xyz/up/.tfpipe-tmp-claim: bucket 'no-such-bucket-xyz' does not exist"),
    (["download", "{url}/empty", "{tmp}/o"], 2, "no manifest at"),
    (["upload", "{tmp}", "{tmp}/o"], 1, "upload destination must be an s3:// URL"),
    (["download", "{tmp}", "{tmp}/o"], 1, "download source must be an s3:// URL"),
])
def test_cli_errors(s3, tmp_path, capsys, argv, code, message):
    write_criteo_shards(str(tmp_path / "set"), 20)
    argv = [a.format(tmp=tmp_path, url=s3.url) for a in argv]
    quiet = ["--no-progress"] if argv[0] in ("download", "upload", "convert") else []
    assert run_cli(argv + quiet) == code
    err = capsys.readouterr().err
    assert err.startswith("tfpipe: error:") and message in err and "Traceback" not in err


def test_missing_bucket_and_key_errors(s3):
    with pytest.raises(TfpipeError, match="bucket 'nope-nope-1' does not exist"):
        S3Storage("s3://nope-nope-1/p").list()
    with pytest.raises(TfpipeError, match="no manifest at"):
        read_manifest(f"{s3.url}/nothing")
    assert not S3Storage(f"{s3.url}/nothing").exists("index.json")


def test_endpoint_unreachable_is_a_clear_error(monkeypatch):
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "testing")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "testing")
    with socket.socket() as sock:  # a port nobody listens on
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    st = S3Storage("s3://b/p", endpoint_url=f"http://127.0.0.1:{port}", max_attempts=2, connect_timeout=1)
    with pytest.raises(TfpipeError, match=r"connection to http://127.0.0.1:\d+ failed after 2 attempts"):
        st.list()


# -- fault injection -----------------------------------------------------------------------------------------

def test_transient_faults_are_retried(s3, proxy):
    """Some requests fail with 503 SlowDown, 500 InternalError or a connection reset: retries carry the
    write through, and the set is complete and correct."""
    faults = [(503, "SlowDown"), (500, "InternalError"), "reset"]
    budget = {"n": 0}

    def rule(method, path, n):
        if n % 4 == 0 and budget["n"] < 6:
            budget["n"] += 1
            return faults[budget["n"] % 3]
        return None

    p = proxy(rule)
    url = f"{s3.url}/flaky"
    schema = libsvm_schema(39)
    from converters.tfrecord.examples import serialize_batch

    framed, lengths = serialize_batch(schema, criteo_arrays(2000, seed=1))
    with ShardSetWriter(url, ShardOutputOptions(shard_size=64 << 10), endpoint_url=p.url, max_attempts=6) as w:
        w.write(framed, lengths)
        w.finish(schema=schema)
    assert p.injected["SlowDown"] >= 1 and p.injected["InternalError"] >= 1 and p.injected["reset"] >= 1
    assert sum(p.injected.values()) == 6
    # the set, read straight from moto, is complete and matches a fault-free write
    assert verify(url).ok
    assert read_manifest(url).records == 2000
    assert not [k for k in keys(s3, "flaky/") if ".tfpipe-tmp-" in k]


@pytest.mark.parametrize("target, fault, match", [
    (".tfrecord", (503, "SlowDown"), r"S3 kept failing \(SlowDown\) after 2 attempts"),
    (".tfrecord", "reset", r"connection to http://127.0.0.1:\d+ failed after 2 attempts"),
    ("index.json", (503, "SlowDown"), r"cannot write s3://.*/index.json: S3 kept failing \(SlowDown\)"),
    ("index.json", (500, "InternalError"), r"S3 kept failing \(InternalError\)"),
])
def test_persistent_faults_fail_cleanly_without_manifest(s3, proxy, target, fault, match):
    p = proxy(lambda method, path, n: fault if method == "PUT" and target in path else None)
    url = f"{s3.url}/doomed"
    schema = libsvm_schema(39)
    from converters.tfrecord.examples import serialize_batch

    framed, lengths = serialize_batch(schema, criteo_arrays(500, seed=2))
    with pytest.raises(TfpipeError, match=match):
        with ShardSetWriter(url, ShardOutputOptions(shard_size=64 << 10), endpoint_url=p.url, max_attempts=2) as w:
            w.write(framed, lengths)
            w.finish(schema=schema)
    assert sum(p.injected.values()) >= 2  # every attempt of the first failing request
    assert "doomed/index.json" not in keys(s3)
    assert not [k for k in keys(s3) if ".tfpipe-tmp-" in k]  # temporary objects cleaned up
    staging = w.storage.staging_dir()
    assert not [f for f in os.listdir(staging) if f.startswith(".tfpipe-tmp-")]  # and local temp files


def test_access_denied_is_named(s3, proxy):
    write_criteo_shards(f"{s3.url}/secret", 10)
    p = proxy(lambda method, path, n: (403, "AccessDenied") if path.endswith("index.json") else None)
    with pytest.raises(TfpipeError, match=r"access denied \(AccessDenied\)"):
        S3Storage(f"{s3.url}/secret", endpoint_url=p.url).read_bytes("index.json")


def test_upload_retries_through_faults(s3, proxy, tmp_path):
    from sharding import upload

    src = tmp_path / "s"
    m = write_criteo_shards(str(src), 800, shard_bytes=32 << 10)
    p = proxy(lambda method, path, n: (503, "SlowDown") if method == "PUT" and n % 3 == 1 and n < 12 else None)
    out = upload(str(src), f"{s3.url}/u", endpoint_url=p.url)
    assert p.injected["SlowDown"] >= 2
    assert out.shards == m.shards and verify(f"{s3.url}/u").ok


# -- converters write straight to s3:// ------------------------------------------------------------------------

def test_convert_libsvm_straight_to_s3(s3, tmp_path):
    import converters

    try:
        convert_libsvm = converters.convert_libsvm
    except (AttributeError, ImportError):
        pytest.skip("converters.convert_libsvm is not available yet")
    src = tmp_path / "day.libsvm"
    write_criteo_libsvm(src, 1500, seed=4)
    url = f"{s3.url}/converted"
    m = convert_libsvm([str(src)], url, field_size=39, shard_size=64 << 10, workers=1)
    local = convert_libsvm([str(src)], str(tmp_path / "local"), field_size=39, shard_size=64 << 10, workers=1)
    assert m.records == 1500 and m.shards == local.shards
    assert verify(url).ok
    assert "converted/index.json" in keys(s3)


def test_pipeline_reads_rank_slices_from_s3(s3, tmp_path):
    """Plan two ranks over a set in S3; each rank's pipeline (fetching from s3://) reads its own records."""
    spec_mod = pytest.importorskip("pipeline.plan.manifest")
    build_mod = pytest.importorskip("pipeline.build")
    if not hasattr(spec_mod.PipelineSpec, "from_manifest") or not hasattr(build_mod, "build_dataset"):
        pytest.skip("pipeline.PipelineSpec.from_manifest / build_dataset not available")
    from sharding import Topology, plan

    url = f"{s3.url}/ranks"
    m = write_criteo_shards(url, 1000, shard_bytes=48 << 10)
    p = plan(read_manifest(url), Topology(hosts=2), batch_size=50)
    seen = []
    for rank in range(2):
        spec = spec_mod.PipelineSpec.from_manifest(url, 50, plan=p, rank=rank, stream_cache_dir=str(tmp_path / f"c{rank}"),
                                                   drop_remainder=True)
        batches = []
        for batch in build_mod.build_dataset(spec):
            feats = batch[0] if isinstance(batch, tuple) else batch
            batches.append(feats["ids"].numpy())  # 39 ids per record: unique enough to identify records
        seen.append(np.concatenate(batches))
        assert len(batches) == p.steps_per_epoch
    rows = {tuple(r) for s in seen for r in s}
    assert len(rows) == sum(len(s) for s in seen) == 2 * p.steps_per_epoch * 50  # no record twice
    assert m.records - len(rows) == p.dropped


# -- sharding commands on s3:// sets -----------------------------------------------------------------------------

def test_plan_and_reshard_on_s3(s3, capsys, monkeypatch):
    import json

    from sharding import reshard

    url = f"{s3.url}/three"
    write_criteo_shards(url, 900, shard_bytes=100 << 10)
    monkeypatch.delenv("AWS_ENDPOINT_URL")  # only the explicit --endpoint-url / endpoint_url from here on
    assert run_cli(["shard", "plan", url, "--hosts", "2", "--batch-size", "10", "--s3-sharded",
                    "--endpoint-url", s3.endpoint]) == 5
    assert "divisible by the host count" in capsys.readouterr().err
    out = reshard(url, f"{s3.url}/four", num_shards=4, endpoint_url=s3.endpoint)
    assert [s.records for s in out.shards] == [225] * 4
    assert run_cli(["shard", "plan", f"{s3.url}/four", "--hosts", "2", "--batch-size", "10", "--s3-sharded",
                    "--json", "--endpoint-url", s3.endpoint]) == 0
    d = json.loads(capsys.readouterr().out)
    assert d["strategy"] == "s3_sharded" and d["steps_per_epoch"] == 45
    monkeypatch.setenv("AWS_ENDPOINT_URL", s3.endpoint)
    assert verify(f"{s3.url}/four").ok


def test_progress_bars_go_to_stderr(s3, tmp_path, capsys):
    from sharding import download, upload

    src = tmp_path / "p"
    write_criteo_shards(str(src), 300, shard_bytes=32 << 10)
    upload(str(src), f"{s3.url}/p", progress=True)
    download(f"{s3.url}/p", str(tmp_path / "back"), progress=True)
    captured = capsys.readouterr()
    assert captured.out == "" and "upload" in captured.err and "download" in captured.err
