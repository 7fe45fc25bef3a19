"""PipelineSpec: validation table, from_manifest (local, plan entries, s3:// fetched to a local cache)."""
from __future__ import annotations

import hashlib
import os
import uuid
from types import SimpleNamespace as NS

import pytest
from hypothesis import given
from hypothesis import strategies as st
from pipeline_data import write_indexed_set

from converters.libsvm.options import libsvm_schema
from converters.shardset.reader import read_manifest
from converters.util.errors import TfpipeError
from pipeline import PipelineSpec
from pipeline.plan.manifest import download_shards
from pipeline.spec.pipelinespec import smallest_rank_steps
from sharding.plan import shard_count

SCHEMA = libsvm_schema(3)


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    d = tmp_path_factory.mktemp("indexed")
    write_indexed_set(d, 500)
    return str(d)


def _spec(**kw):
    base = {"schema": SCHEMA, "batch_size": 8, "files": ("a",)}
    return PipelineSpec(**{**base, **kw})


@pytest.mark.parametrize("kw,msg", [
    ({"batch_size": 0}, "batch_size must be a positive integer, got 0"),
    ({"batch_size": 2.5}, "got 2.5"),
    ({"mode": "stream"}, "mode must be one of ('file', 'pipe'), got 'stream'"),
    ({"files": ()}, "file mode needs at least one file"),
    ({"mode": "pipe", "channel": None}, "pipe mode needs a channel name"),
    ({"mode": "pipe", "channel": "a/b"}, "got 'a/b'"),
    ({"mode": "pipe", "channel": "train", "cache": "memory"}, "cache must be auto or none, got 'memory'"),
    ({"pipe_timeout": 0}, "pipe_timeout must be > 0 seconds, got 0"),
    ({"compression": "zstd"}, "compression must be 'none' or 'gzip' (or None), got 'zstd'"),
    ({"shuffle_buffer": -1}, "shuffle_buffer must be >= 0, got -1"),
    ({"seed": -3}, "got -3"),
    ({"epochs": 0}, "epochs must be a positive integer or None (forever), got 0"),
    ({"cache": "disk"}, "cache must be one of auto|memory|none|file:PATH, got 'disk'"),
    ({"cache": "file:"}, "got 'file:'"),
    ({"num_shards": 0}, "num_shards must be >= 1, got 0"),
    ({"num_shards": 2, "shard_index": 2}, "shard_index must be in [0, 2), got 2"),
    ({"steps": 0}, "steps must be a positive integer or None, got 0"),
    ({"read": "fast"}, "read must be one of"),
    ({"num_parallel_reads": 0}, "num_parallel_reads must be >= 1 or None, got 0"),
    ({"buffer_size": -1}, "buffer_size must be >= 0 bytes or None, got -1"),
    ({"chunk_records": -1}, "chunk_records must be >= 0 (0: no chunks) or None, got -1"),
    ({"parse_parallelism": 0}, "parse_parallelism must be >= 1, -1 (AUTOTUNE) or None, got 0"),
    ({"tune": "always"}, "tune must be one of ('stored', 'on-first-use', 'off'), got 'always'"),
    ({"prefetch": -1}, "prefetch must be >= 0 or None (AUTOTUNE), got -1"),
    ({"output": "tuple"}, "output must be one of ('keras', 'dict'), got 'tuple'"),
    ({"use_sagemaker_pipe": True}, "use_sagemaker_pipe=True needs mode='pipe'"),
    ({"sparse_as": "dense"}, "sparse_as must be one of ('sparse', 'ragged'), got 'dense'"),
    ({"sparse_features": ("ids", "values")}, "must name a variable-length int64 ids feature"),
    ({"schema": libsvm_schema(None), "sparse_features": ("values", "ids"), "num_features": 3},
     "got ('values', 'ids')"),
    ({"schema": libsvm_schema(None), "sparse_features": ("ids", "values")}, "needs num_features"),
    ({"schema": libsvm_schema(None), "sparse_features": ("ids", "values"), "num_features": 0}, "got 0"),
])
def test_validation(kw, msg):
    with pytest.raises(ValueError) as e:
        _spec(**kw)
    assert msg in str(e.value)


NUMPY_COUNTS = [  # every count the spec takes, given as a NumPy integer: accepted, stored as a plain int
    ("batch_size", "int64", 512), ("shuffle_buffer", "int32", 1000), ("seed", "uint64", 3), ("epochs", "int16", 2),
    ("num_shards", "int64", 4), ("steps", "int64", 7), ("num_parallel_reads", "int8", 2),
    ("buffer_size", "int64", 1 << 20), ("chunk_records", "int32", 64), ("parse_parallelism", "int64", -1),
    ("prefetch", "int64", 2), ("memory_bytes", "int64", 1 << 30), ("cores", "int32", 2), ("records", "int64", 10),
]


INT64_COUNTS = [  # every count the spec takes, with the least value it refuses and the bound
    ("batch_size", {}), ("shuffle_buffer", {}), ("seed", {}), ("epochs", {}), ("prefetch", {}), ("steps", {}),
    ("num_shards", {}), ("chunk_records", {}), ("memory_bytes", {}), ("cores", {}), ("records", {}),
    ("total_bytes", {}), ("first_epoch", {"mode": "pipe", "channel": "train"}),
    ("num_features", {"schema": libsvm_schema(None), "sparse_features": ("ids", "values")}),
]


@pytest.mark.parametrize("value", [2**63, 2**64, 10**30, 1 << 4000])
@pytest.mark.parametrize("name,extra", INT64_COUNTS)
def test_counts_beyond_int64_refused_in_one_line(name, extra, value):
    """TensorFlow takes every count and seed as an int64: a larger one is refused by the spec, not by
    TensorFlow inside build_dataset."""
    with pytest.raises(ValueError) as e:
        _spec(**extra, **{name: value})
    shown = str(value) if value.bit_length() <= 256 else f"an integer of {value.bit_length()} bits"
    assert str(e.value) == f"{name} must be at most 2**63 - 1 (TensorFlow's int64), got {shown}"
    assert getattr(_spec(**extra, **{name: 2**63 - 1}), name) == 2**63 - 1   # the bound itself is taken


def test_file_records_beyond_int64_refused():
    with pytest.raises(ValueError, match=r"file_records must be record counts \(integers in \[0, 2\*\*63 - 1\]\)"):
        _spec(file_records=(2**63,))


def test_largest_seed_builds_every_epoch(tmp_path):
    from pipeline.build import build_dataset
    from pipeline.graph.service import _epoch_seed

    write_indexed_set(tmp_path, 40)
    spec = PipelineSpec.from_manifest(str(tmp_path), 2**63 - 1, shuffle_buffer=100, seed=2**63 - 1, epochs=2,
                                      tune="off")
    assert sorted(int(x) for _, label in build_dataset(spec) for x in label.numpy()) == sorted(list(range(40)) * 2)
    assert all(0 <= _epoch_seed(spec, e) < 2**63 for e in range(3))   # the service's per-epoch seeds stay int64


@pytest.mark.parametrize("name,dtype,value", NUMPY_COUNTS)
def test_numpy_integers_are_counts(name, dtype, value):
    import json

    import numpy as np

    s = _spec(**{name: np.dtype(dtype).type(value)})
    got = getattr(s, name)
    assert got == value and type(got) is int  # a plain int: the spec stays hashable and serializable
    hash(s.batching), hash(s.shuffling), hash(s.sharding), json.dumps(got)
    assert s == _spec(**{name: value})
    with pytest.raises(ValueError, match=f"{name} must be .*, got (np.)?True"):
        _spec(**{name: np.bool_(True) if dtype == "int8" else True})  # a bool is not a count


def test_numpy_reals_are_reals():
    import numpy as np

    s = _spec(pipe_timeout=np.float32(2.5))
    assert s.pipe_timeout == 2.5 and type(s.pipe_timeout) is float
    with pytest.raises(ValueError, match="pipe_timeout must be > 0 seconds, got True"):
        _spec(pipe_timeout=True)


def test_from_manifest_with_numpy_integers_yields_a_batch(tmp_path):
    import numpy as np

    write_indexed_set(tmp_path, 1100)
    s = PipelineSpec.from_manifest(str(tmp_path), np.int64(512), shuffle_buffer=np.int32(1000), seed=np.int64(3))
    assert (s.batch_size, s.shuffle_buffer, s.seed) == (512, 1000, 3)
    assert all(type(v) is int for v in (s.batch_size, s.shuffle_buffer, s.seed))
    from pipeline.build import build_dataset

    features, label = next(iter(build_dataset(s.with_(tune="off"))))
    assert label.shape[0] == 512 and features["ids"].shape == (512, 3)
    with pytest.raises(ValueError, match="batch_size must be a positive integer, got True"):
        PipelineSpec.from_manifest(str(tmp_path), True)


def test_sparse_fields():
    spec = _spec(schema=libsvm_schema(None), sparse_features=["ids", "values"], num_features=9)
    assert spec.sparse_features == ("ids", "values")
    assert _spec(schema=libsvm_schema(None), sparse_features=("ids", "values"), sparse_as="ragged").num_features is None


def test_from_manifest_of_a_sparse_set(tmp_path):
    from converters.libsvm.convert import convert_libsvm

    (tmp_path / "in.txt").write_bytes(b"1 4:1\n0 2:1\n")
    convert_libsvm(tmp_path / "in.txt", tmp_path / "o", sparse=True, ids_key="i", values_key="v")
    spec = PipelineSpec.from_manifest(tmp_path / "o", 4)
    assert (spec.sparse_features, spec.num_features, spec.sparse_as) == (("i", "v"), 4, "sparse")
    assert PipelineSpec.from_manifest(tmp_path / "o", 4, num_features=10).num_features == 10
    assert PipelineSpec.from_manifest(str(tmp_path / "o"), 4, sparse_features=None).sparse_features is None


def test_frozen():
    s = _spec()
    with pytest.raises(AttributeError):
        s.batch_size = 3


def test_from_manifest(data):
    m = read_manifest(data)
    s = PipelineSpec.from_manifest(os.path.join(data, "index.json"), 16, shuffle_buffer=10, seed=1)
    assert s.files == tuple(m.shard_paths())
    assert s.schema == m.schema and s.records == 500 and s.total_bytes == m.total_bytes
    assert s.compression is None and s.record_bytes == pytest.approx(m.total_bytes / 500)
    with open(os.path.join(data, "index.json"), "rb") as f:
        assert s.manifest_sha256 == hashlib.sha256(f.read()).hexdigest()   # the data fingerprint for tuning


def test_from_manifest_pipe_has_no_files(data):
    s = PipelineSpec.from_manifest(data, 16, mode="pipe", channel="train")
    assert s.files == () and s.records == 500


def test_from_manifest_rejects_unknown_option(data):
    with pytest.raises(TypeError):
        PipelineSpec.from_manifest(data, 16, shufle_buffer=3)


def test_missing_manifest(tmp_path):
    with pytest.raises(TfpipeError, match="no manifest"):
        PipelineSpec.from_manifest(str(tmp_path), 8)


def test_plan_entry_files_and_unknown_file(data):
    names = [s.name for s in read_manifest(data).shards]
    entry = NS(rank=0, host="algo-1", local_rank=0, channel=None, files=tuple(names[:2]), shard=None, steps=4)
    s = PipelineSpec.from_manifest(data, 8, plan=entry)
    assert [os.path.basename(f) for f in s.files] == names[:2] and s.take_steps == 4
    assert s.records == sum(x.records for x in read_manifest(data).shards[:2])
    with pytest.raises(TfpipeError, match="not a shard of this manifest"):
        PipelineSpec.from_manifest(data, 8, plan=NS(files=("nope.tfrecord",), shard=None, steps=1, channel=None))


def test_plan_channel_for_pipe(data):
    plan = NS(ranks=[NS(rank=r, host="algo-1", local_rank=r, channel=f"train_{r}", files=None, shard=None,
                        steps=5) for r in range(2)])
    s = PipelineSpec.from_manifest(data, 8, mode="pipe", plan=plan, rank=1)
    assert s.channel == "train_1" and s.take_steps == 5
    with pytest.raises(ValueError, match="no entry for rank 7"):
        PipelineSpec.from_manifest(data, 8, plan=plan, rank=7)


@given(records=st.integers(0, 10_000), n=st.integers(1, 64), b=st.integers(1, 512), drop=st.booleans())
def test_equal_steps_fit_every_rank(records, n, b, drop):
    counts = [shard_count(records, n, i) for i in range(n)]
    assert sum(counts) == records and max(counts) - min(counts) <= 1
    steps = smallest_rank_steps(records, n, b, drop)
    for c in counts:       # every rank can produce `steps` batches
        assert (c // b if drop else -(-c // b)) >= steps


def test_download_shards_uses_storage_and_skips_cached(data, tmp_path):
    m = read_manifest(data)
    by_name = {s.name: s for s in m.shards}
    names = [s.name for s in m.shards]
    out = download_shards(data, names, by_name, str(tmp_path / "c"))
    assert [open(p, "rb").read() for p in out] == [open(p, "rb").read() for p in m.shard_paths()]
    mtimes = [os.stat(p).st_mtime_ns for p in out]
    download_shards(data, names, by_name, str(tmp_path / "c"))
    assert [os.stat(p).st_mtime_ns for p in out] == mtimes


def test_download_shards_rejects_checksum_mismatch(data, tmp_path):
    import dataclasses

    m = read_manifest(data)
    first = m.shards[0]
    by_name = {first.name: dataclasses.replace(first, sha256="0" * 64)}
    with pytest.raises(TfpipeError, match="differs from the manifest"):
        download_shards(data, [first.name], by_name, str(tmp_path / "c"))
    assert not os.listdir(tmp_path / "c")


@pytest.fixture(scope="module")
def moto_endpoint():
    pytest.importorskip("boto3")
    server_mod = pytest.importorskip("moto.server")
    import logging

    logging.getLogger("werkzeug").setLevel(logging.ERROR)
    server = server_mod.ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    host, port = server.get_host_and_port()
    yield f"http://127.0.0.1:{port}"
    server.stop()


def test_s3_manifest_fetched_to_local_cache(data, moto_endpoint, monkeypatch, tmp_path):
    for k, v in {"AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing", "AWS_SESSION_TOKEN": "testing",
                 "AWS_DEFAULT_REGION": "us-east-1", "AWS_ENDPOINT_URL": moto_endpoint,
                 "AWS_CONFIG_FILE": "/nonexistent", "AWS_SHARED_CREDENTIALS_FILE": "/nonexistent"}.items():
        monkeypatch.setenv(k, v)
    monkeypatch.delenv("AWS_PROFILE", raising=False)
    monkeypatch.delenv("AWS_ENDPOINT_URL_S3", raising=False)
    import boto3

    client = boto3.client("s3", endpoint_url=moto_endpoint, region_name="us-east-1")
    bucket = f"tfpipe-{uuid.uuid4().hex[:12]}"
    client.create_bucket(Bucket=bucket)
    for name in sorted(os.listdir(data)):
        client.upload_file(os.path.join(data, name), bucket, f"set/{name}")
    url = f"s3://{bucket}/set"
    s = PipelineSpec.from_manifest(url, 32, stream_cache_dir=str(tmp_path / "cache"))
    assert all(f.startswith(str(tmp_path / "cache")) for f in s.files)
    from pipeline_data import labels_of

    from pipeline import build_dataset

    assert sorted(labels_of(build_dataset(s))) == list(range(500))


def test_package_import_is_light():
    import subprocess
    import sys

    code = ("import sys, pipeline, pipeline.spec.pipelinespec, pipeline.cli, pipeline.plan.readplan, "
            "pipeline.plan.tunestore, pipeline.plan.tuning\n"
            "from pipeline import PipelineSpec\n"
            "print(sorted(m for m in ('tensorflow', 'numba', 'boto3') if m in sys.modules))")
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    r = subprocess.run([sys.executable, "-c", code], cwd=root, capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == "[]"


def test_download_shards_reuses_a_cached_file_only_if_it_matches(data, tmp_path):
    m = read_manifest(data)
    by_name = {s.name: s for s in m.shards}
    first = download_shards(data, [m.shards[0].name], by_name, str(tmp_path / "c"))[0]
    good = open(first, "rb").read()
    with open(first, "wb") as f:
        f.write(b"\0" * len(good))  # same size, other bytes: reuse by size alone would keep it
    download_shards(data, [m.shards[0].name], by_name, str(tmp_path / "c"))
    assert open(first, "rb").read() == good
    assert sorted(os.listdir(tmp_path / "c")) == [m.shards[0].name]  # no .part left


# -- composed of option groups ----------------------------------------------------------------------------

def test_composed_of_option_groups():
    from dataclasses import fields

    from pipeline.spec.options import FLAT, GROUPS, BatchOptions, ShardingOptions, ShuffleOptions

    assert [f.name for f in fields(PipelineSpec)] == ["schema", *GROUPS]
    s = _spec(shuffle_buffer=5, seed=2, num_shards=2, shard_index=1, cache="none", prefetch=0)
    assert s.shuffling == ShuffleOptions(5, 2) and s.sharding == ShardingOptions(2, 1)
    for name, group in FLAT.items():                   # every flat name reads its group's field
        assert getattr(s, name) == getattr(getattr(s, group), name)
    whole = PipelineSpec(SCHEMA, BatchOptions(8, drop_remainder=True), files=("a",), shuffling=ShuffleOptions(5, 2),
                         sharding=ShardingOptions(2, 1), cache="none", prefetch=0, drop_remainder=False)
    assert whole == s                                  # groups given whole, flat names applied over them
    assert s.with_(seed=3).shuffling == ShuffleOptions(5, 3) and s.with_(seed=3).sharding is s.sharding
    assert s.with_(sharding=ShardingOptions()).num_shards == 1


@pytest.mark.parametrize("kw, msg", [
    ({"sharding": (2, 1)}, "sharding must be a pipeline.spec.options.ShardingOptions, got tuple"),
    ({"memory_bytes": 0}, "memory_bytes must be a positive number of bytes or None, got 0"),
    ({"part_weights": ((1, float("inf")),)}, "part weights must be finite numbers > 0, got [inf]"),
    ({"buffer_size": 10**15}, "buffer_size must be at most 1073741824 bytes (1 GiB), got 1000000000000000"),
    ({"num_parallel_reads": 10**9}, "num_parallel_reads must be at most 1024, got 1000000000"),
    ({"parse_parallelism": 10**9}, "parse_parallelism must be at most 1024, got 1000000000"),
])
def test_group_validation(kw, msg):
    with pytest.raises(ValueError) as e:
        _spec(**kw)
    assert msg in str(e.value)


def test_each_group_checks_itself():
    from pipeline.spec.options import BatchOptions, CacheOptions, ReadOptions, ShardingOptions, SourceOptions

    for make, msg in [(lambda: BatchOptions(0), "batch_size must be a positive integer, got 0"),
                      (lambda: SourceOptions(), "file mode needs at least one file"),
                      (lambda: ReadOptions(buffer_size=-1), "got -1"),
                      (lambda: ShardingOptions(2, 5), "shard_index must be in [0, 2), got 5"),
                      (lambda: CacheOptions("disk"), "got 'disk'")]:
        with pytest.raises(ValueError) as e:
            make()
        assert msg in str(e.value)


@pytest.mark.parametrize("call, msg", [
    (lambda d: PipelineSpec.from_manifest(d, 16, shufle_buffer=3),
     "PipelineSpec.from_manifest() got an unexpected keyword argument 'shufle_buffer'; did you mean 'shuffle_buffer'?"),
    (lambda d: PipelineSpec.from_manifest(d, 16, label_weight={0: 1}), "did you mean 'label_weights'?"),
    (lambda d: PipelineSpec.from_manifest(d, 16, prefech=2), "did you mean 'prefetch'?"),
    (lambda d: PipelineSpec.from_manifest(d, 16, files=("x",)), "from_manifest() sets files from the manifest"),
    (lambda d: _spec(num_shard=2), "PipelineSpec() got an unexpected keyword argument 'num_shard'; did you mean "
                                   "'num_shards'?"),
    (lambda d: _spec().with_(drop_remaider=True), "PipelineSpec.with_() got an unexpected keyword argument "
                                                  "'drop_remaider'; did you mean 'drop_remainder'?"),
])
def test_misspelled_keyword_names_the_function_and_the_closest_name(data, call, msg):
    with pytest.raises(TypeError) as e:
        call(data)
    assert msg in str(e.value) and "__init__" not in str(e.value)


def test_from_manifest_takes_every_option_by_its_flat_name(data):
    """Every keyword from_manifest took when the spec was flat still works and lands in its group."""
    options = {"mode": "file", "pipe_dir": "/tmp/p", "pipe_timeout": 5.0, "shuffle_buffer": 7, "seed": 1,
               "epochs": 3, "cache": "memory", "drop_remainder": True, "num_shards": 2, "shard_index": 1,
               "steps": 4, "equal_steps": False, "read": "sequential", "num_parallel_reads": 2, "buffer_size": 1 << 20,
               "chunk_records": 0, "parse_parallelism": 1, "tune": "off", "prefetch": 2, "deterministic": False,
               "parse": False, "output": "dict", "sparse_as": "ragged", "cores": 3, "memory_bytes": 1 << 30,
               "first_epoch": 0, "use_sagemaker_pipe": False, "stream_cache_dir": None, "plan": None, "rank": None}
    s = PipelineSpec.from_manifest(data, 16, **options)
    for name, value in options.items():
        if name not in ("stream_cache_dir", "plan", "rank"):
            assert getattr(s, name) == value, name
    assert (s.batching.batch_size, s.sharding.steps, s.reading.cores, s.parsing.output) == (16, 4, 3, "dict")


@pytest.mark.parametrize("kind", ["fifo", "link to /dev/zero", "directory"])
def test_download_shards_never_reads_a_hostile_cache_entry(data, tmp_path, kind):
    """A FIFO or a link to a device where a cached shard belongs is replaced by a fresh fetch (never read); a
    directory there is one clear error naming it."""
    m = read_manifest(data)
    by_name = {s.name: s for s in m.shards}
    name = m.shards[0].name
    cache = tmp_path / "c"
    cache.mkdir()
    {"fifo": os.mkfifo, "directory": os.mkdir}.get(kind, lambda p: os.symlink("/dev/zero", p))(cache / name)
    if kind == "directory":
        with pytest.raises(TfpipeError, match=f"the cache holds {cache / name}, which is not a shard file"):
            download_shards(data, [name], by_name, str(cache))
        return
    out = download_shards(data, [name], by_name, str(cache))
    assert open(out[0], "rb").read() == open(m.shard_paths()[0], "rb").read()


def test_take_steps(data):
    s = PipelineSpec.from_manifest(data, 32, num_shards=2, shard_index=1)
    assert s.take_steps == smallest_rank_steps(s.records, 2, 32, False) and not hasattr(s, "epoch_steps")
    assert s.with_(steps=3).take_steps == 3 and PipelineSpec.from_manifest(data, 32).take_steps is None


def test_compression_type(data):
    s = PipelineSpec.from_manifest(data, 32)
    assert s.compression_type == ("GZIP" if s.compression == "gzip" else "")
    assert s.with_(compression="gzip").compression_type == "GZIP"
    assert s.with_(compression=None).compression_type == ""


def _wide_set(tmp_path, keys: int):
    """A TFRecord file whose one Example has ``keys`` float features (and a label), adopted with ``index``."""
    import tensorflow as tf

    from converters.shardset.index import index_set

    feats = {f"k{i}": tf.train.Feature(float_list=tf.train.FloatList(value=[float(i)])) for i in range(keys)}
    feats["label"] = tf.train.Feature(float_list=tf.train.FloatList(value=[1.0]))
    ex = tf.train.Example(features=tf.train.Features(feature=feats)).SerializeToString()
    d = tmp_path / "wide"
    d.mkdir()
    with tf.io.TFRecordWriter(str(d / "part-00000-of-00001.tfrecord")) as w:
        for _ in range(3):
            w.write(ex)
    index_set(str(d))
    return d


def test_a_set_with_more_features_than_a_parse_can_take_is_refused_with_the_number(tmp_path):
    """An adopted set with 50,000 feature keys (a parse graph of minutes and GBs) is refused at once with the
    number, and parse=False still reads its records."""
    from pipeline.spec.pipelinespec import MAX_PARSED_FEATURES

    keys = MAX_PARSED_FEATURES + 1
    d = _wide_set(tmp_path, keys)
    with pytest.raises(ValueError, match=f"the schema has {keys + 1} features.*parse=False"):
        PipelineSpec.from_manifest(str(d), 2)
    from pipeline import build_dataset

    spec = PipelineSpec.from_manifest(str(d), 2, parse=False)
    batches = [b.numpy() for b in build_dataset(spec)]
    assert [len(b) for b in batches] == [2, 1]


def test_a_set_at_the_feature_limit_is_parsed(tmp_path):
    from pipeline.spec.pipelinespec import MAX_PARSED_FEATURES

    d = _wide_set(tmp_path, 50)
    spec = PipelineSpec.from_manifest(str(d), 3, output="dict")
    from pipeline import build_dataset

    (batch,) = list(build_dataset(spec))
    assert len(batch) == 51 and float(batch["k49"].numpy().ravel()[0]) == 49.0
    assert MAX_PARSED_FEATURES >= 1000        # wide CTR schemas (hundreds of features) stay well inside it
