"""reshard: N record-balanced shards (or by size), same records in the same order, read back with real TF."""
from __future__ import annotations

import pytest

from converters.libsvm.synthetic import write_criteo_shards
from converters.shardset.reader import read_manifest
from converters.shardset.verify import verify
from converters.tfrecord.reader import read_records
from converters.util.errors import IntegrityError, OutputExistsError, TfpipeError
from sharding import reshard
from sharding.resharding import balanced_bounds


@pytest.fixture(scope="module")
def source(tmp_path_factory):
    out = tmp_path_factory.mktemp("reshard") / "src"
    m = write_criteo_shards(str(out), 2503, shard_bytes=300 << 10)  # uneven: 3 shards of ~990 + a short one
    assert len(m.shards) >= 3 and len({s.records for s in m.shards}) > 1
    return str(out), m


def records_of(manifest):
    return [r for path in manifest.shard_paths() for r in read_records(path)]


def tf_records(manifest):
    tf = pytest.importorskip("tensorflow")
    ds = tf.data.TFRecordDataset(manifest.shard_paths(), compression_type="GZIP" if manifest.compression else "")
    return [x.numpy() for x in ds]


@pytest.mark.parametrize("num_shards", [1, 4, 7, 2503])
def test_num_shards_balanced_and_round_trip(source, tmp_path, num_shards):
    src, m = source
    out = reshard(src, str(tmp_path / "out"), num_shards=num_shards)
    counts = [s.records for s in out.shards]
    assert len(counts) == num_shards and sum(counts) == m.records == out.records
    assert max(counts) - min(counts) <= 1
    assert [s.name for s in out.shards][0] == f"train-00000-of-{num_shards:05d}.tfrecord"
    assert verify(str(tmp_path / "out")).ok
    assert read_manifest(str(tmp_path / "out")) == out
    assert out.schema == m.schema and out.kind == m.kind and out.inputs == m.inputs
    assert out.options["reshard"] == {"from": src, "num_shards": num_shards}
    if num_shards in (1, 7):  # real TensorFlow reads the same records in the same order
        assert tf_records(out) == records_of(m)
    else:
        assert records_of(out) == records_of(m)


def test_shard_size_and_gzip(source, tmp_path):
    src, m = source
    out = reshard(src, str(tmp_path / "gz"), shard_size=200 << 10, compression="gzip")
    assert out.compression == "gzip" and all(s.name.endswith(".tfrecord.gz") for s in out.shards)
    assert len(out.shards) > len(m.shards)
    assert tf_records(out) == records_of(m)
    back = reshard(str(tmp_path / "gz"), str(tmp_path / "plain"), num_shards=2, compression=None)
    assert back.compression is None and records_of(back) == records_of(m)
    same = reshard(str(tmp_path / "gz"), str(tmp_path / "stillgz"), num_shards=2)  # "same" keeps GZIP
    assert same.compression == "gzip"


def test_rerun_is_byte_identical(source, tmp_path):
    src, _ = source
    a = reshard(src, str(tmp_path / "a"), num_shards=5)
    b = reshard(src, str(tmp_path / "b"), num_shards=5)
    assert a.shards == b.shards
    assert (tmp_path / "a" / "index.json").read_bytes() == (tmp_path / "b" / "index.json").read_bytes()


@pytest.mark.parametrize("kwargs, error, match", [
    (dict(num_shards=2504), TfpipeError, r"cannot make 2504 non-empty shards from 2503 records"),
    (dict(), ValueError, r"exactly one of num_shards and shard_size"),
    (dict(num_shards=2, shard_size=1000), ValueError, r"exactly one"),
    (dict(num_shards=0), ValueError, r"num_shards must be a positive integer"),
])
def test_bad_arguments(source, tmp_path, kwargs, error, match):
    with pytest.raises(error, match=match):
        reshard(source[0], str(tmp_path / "o"), **kwargs)


def test_refuses_in_place_and_non_empty_output(source, tmp_path):
    src, _ = source
    with pytest.raises(TfpipeError, match="is the input"):
        reshard(src, src + "/", num_shards=2)
    (tmp_path / "full").mkdir()
    (tmp_path / "full" / "notes.txt").write_text("keep me")
    with pytest.raises(OutputExistsError):
        reshard(src, str(tmp_path / "full"), num_shards=2)
    assert (tmp_path / "full" / "notes.txt").read_text() == "keep me"


def test_damaged_source_fails_without_manifest(tmp_path):
    src = tmp_path / "src"
    m = write_criteo_shards(str(src), 600, shard_bytes=64 << 10)
    path = src / m.shards[1].name
    data = bytearray(path.read_bytes())
    data[50] ^= 0x10
    path.write_bytes(bytes(data))
    with pytest.raises(IntegrityError, match=m.shards[1].name):
        reshard(str(src), str(tmp_path / "out"), num_shards=3)
    assert not (tmp_path / "out").exists()   # no manifest, no shard: the failed run removed the --out it made


@pytest.mark.parametrize("records, n", [(10, 3), (7, 7), (100, 1), (5, 2)])
def test_balanced_bounds(records, n):
    b = balanced_bounds(records, n)
    sizes = [b[i + 1] - b[i] for i in range(n)]
    assert b[0] == 0 and b[-1] == records and max(sizes) - min(sizes) <= 1


def test_sharding_reshard_is_the_function_whichever_import_came_first():
    import os
    import subprocess
    import sys

    code = ("import sharding.resharding\nfrom sharding import reshard\n"
            "assert callable(reshard) and not hasattr(reshard, '__file__'), reshard\n")
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    r = subprocess.run([sys.executable, "-c", code], env={**os.environ, "PYTHONPATH": root}, capture_output=True,
                       text=True, timeout=120)
    assert r.returncode == 0, r.stderr
