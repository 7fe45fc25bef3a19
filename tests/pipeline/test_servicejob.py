"""pipeline.plan.servicejob and spec.serviceopts: the service options checked, the job name, compression, the split
and the equal steps of a rank reading through a tf.data service (pure: no TensorFlow, no servers)."""
from __future__ import annotations

import json

import pytest

from converters.libsvm.options import libsvm_schema
from pipeline.plan.servicejob import base_job_name, compression, fast_link, service_choice, service_steps
from pipeline.spec.pipelinespec import PipelineSpecBase
from pipeline.spec.serviceopts import ServiceOptions, parse_service

SCHEMA = libsvm_schema(3)
FILES = ("/d/a.tfrecord", "/d/b.tfrecord", "/d/c.tfrecord")


def spec(**kw):
    base = dict(files=FILES, file_records=(10, 7, 5), records=22, service="grpc://127.0.0.1:5050")
    return PipelineSpecBase(SCHEMA, kw.pop("batch_size", 4), **{**base, **kw})


@pytest.mark.parametrize("value, host, port", [
    ("grpc://127.0.0.1:5050", "127.0.0.1", 5050),
    ("grpc://algo-2:1", "algo-2", 1),
    ("grpc://[::1]:65535", "::1", 65535),
])
def test_parse_service(value, host, port):
    assert parse_service(value) == (host, port)


@pytest.mark.parametrize("value", ["127.0.0.1:5050", "grpc://host", "grpc://:5050", "grpc://h:0", "grpc://h:70000",
                                   "grpc://h:x", "http://h:1", 5050, "grpc://h h:1"])
def test_bad_service_is_refused_with_the_value(value):
    with pytest.raises(ValueError, match="grpc://HOST:PORT") as err:
        ServiceOptions(service=value)
    assert repr(value) in str(err.value)


@pytest.mark.parametrize("kw, match", [
    (dict(service_job="a b"), "service_job"),
    (dict(service_job=""), "service_job"),
    (dict(service_compression="snappy"), "service_compression"),
])
def test_bad_options(kw, match):
    with pytest.raises(ValueError, match=match):
        ServiceOptions(service="grpc://h:1", **kw)


@pytest.mark.parametrize("kw, match", [
    (dict(mode="pipe", channel="train", files=(), file_records=()), "Pipe mode"),
    (dict(resumable=True), "resumable=True"),
    (dict(cache="memory"), "cache='memory'"),
])
def test_what_the_service_refuses_names_why(kw, match):
    with pytest.raises(ValueError, match=match):
        spec(**kw)


def test_flat_names_and_group():
    s = spec(service_job="chk")
    assert s.offload == ServiceOptions("grpc://127.0.0.1:5050", "chk", "auto")
    assert s.service_job == "chk" and s.with_(service=None).offload.service is None


@pytest.mark.parametrize("env, expect", [
    ({"TRAINING_JOB_NAME": "my-job-2026"}, "tfpipe-my-job-2026"),
    ({"SM_TRAINING_ENV": json.dumps({"job_name": "sm job"})}, "tfpipe-sm-job"),
])
def test_job_name_from_sagemaker(env, expect):
    assert base_job_name(spec(), env)[0] == expect


def test_job_name_from_tf_config_is_shared_by_the_ranks():
    cluster = {"worker": ["h1:1", "h2:1"]}
    names = {base_job_name(spec(), {"TF_CONFIG": json.dumps({"cluster": cluster, "task": {"index": i}})})[0]
             for i in range(2)}
    assert len(names) == 1 and next(iter(names)).startswith("tfpipe-")


def test_job_name_from_manifest_and_seed():
    a, b = spec(manifest_sha256="a" * 64, seed=1), spec(manifest_sha256="a" * 64, seed=2)
    assert base_job_name(a, {})[0] != base_job_name(b, {})[0]
    assert base_job_name(a, {})[0] == base_job_name(spec(manifest_sha256="a" * 64, seed=1), {})[0]
    assert base_job_name(spec(service_job="chk"), {"TRAINING_JOB_NAME": "x"}) == ("chk", "service_job")


def test_one_job_per_rank():
    ranks = [service_choice(spec(service_job="chk", num_shards=2, shard_index=i), {}) for i in range(2)]
    assert [c.job_name for c in ranks] == ["chk-shard0of2", "chk-shard1of2"]
    per_files = [service_choice(spec(service_job="chk", files=f, file_records=(1,) * len(f)), {})
                 for f in (FILES[:1], FILES[1:])]
    assert per_files[0].job_name != per_files[1].job_name and per_files[0].job_name.startswith("chk-files-")


@pytest.mark.parametrize("host, fast", [("127.0.0.1", True), ("10.0.3.4", True), ("algo-2", True),
                                        ("ip-10-0-0-1.ec2.internal", True), ("::1", True),
                                        ("8.8.8.8", False), ("data.example.com", False)])
def test_fast_link(host, fast):
    assert fast_link(host) is fast


@pytest.mark.parametrize("address, asked, value", [
    ("grpc://127.0.0.1:1", "auto", None), ("grpc://data.example.com:1", "auto", "AUTO"),
    ("grpc://127.0.0.1:1", "on", "AUTO"), ("grpc://data.example.com:1", "off", None),
])
def test_compression(address, asked, value):
    got, why = compression(spec(service=address, service_compression=asked))
    assert got == value and why


@pytest.mark.parametrize("n, drop, steps", [
    (1, False, None),        # one rank: every batch
    (2, False, 3),           # rank records per file shard: i=0: 5+4+3=12, i=1: 5+3+2=10 -> ceil(10/4)=3
    (2, True, 2),            # floor(10/4)
    (3, True, 1),            # i=0: 4+3+2=9, i=1: 3+2+2=7, i=2: 3+2+1=6 -> floor(6/4)=1
])
def test_equal_steps_with_a_per_file_shard(n, drop, steps):
    assert service_steps(spec(num_shards=n, shard_index=0, drop_remainder=drop))[0] == steps


def test_explicit_smaller_steps_win_and_plan_steps_kept():
    assert service_steps(spec(num_shards=2, steps=1))[0] == 1
    assert service_steps(spec(steps=2))[0] == 2


def test_record_shard_needs_file_records():
    with pytest.raises(ValueError, match="file_records"):
        service_steps(spec(num_shards=2, file_records=()))


@pytest.mark.parametrize("batch, records, total_bytes, batches", [
    (512, 22, None, 32),                  # 16,384 records per element
    (512, 4096, 4096 * 2048, 8),          # 2 KiB records: 8 MiB = 4,096 records
    (100_000, 22, None, 1),               # a batch larger than an element: one batch
    (4, 1, 10 << 20, 1),                  # 10 MiB records: one batch
])
def test_element_batches(batch, records, total_bytes, batches):
    from pipeline.graph.service import element_batches

    assert element_batches(spec(batch_size=batch, records=records, total_bytes=total_bytes)) == batches
