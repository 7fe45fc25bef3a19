"""Cluster configs: TF_CONFIG for MultiWorkerMirroredStrategy, SageMaker distribution dicts, Pipe channels."""
from __future__ import annotations

import json
from types import SimpleNamespace as NS

import pytest

from sharding import Topology, pipe_channels, plan, sagemaker_distribution, tf_config
from sharding.configs import channel_manifests, training_inputs


def test_tf_config_from_sagemaker_env(monkeypatch):
    monkeypatch.setenv("SM_HOSTS", '["algo-1", "algo-2", "algo-3"]')
    monkeypatch.setenv("SM_CURRENT_HOST", "algo-2")
    for k in ("TF_CONFIG", "HOROVOD_RANK", "HOROVOD_SIZE", "OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE"):
        monkeypatch.delenv(k, raising=False)
    cfg = tf_config(Topology.from_env(config_dir="/nonexistent", processing_config_dir="/nonexistent"))
    assert cfg == {"cluster": {"worker": ["algo-1:2222", "algo-2:2222", "algo-3:2222"]},
                   "task": {"type": "worker", "index": 1}}
    # a TF_CONFIG read back gives the same topology (one worker per host)
    back = Topology.from_env({"TF_CONFIG": json.dumps(cfg)}, config_dir=None, processing_config_dir=None)
    assert back.hosts == ("algo-1", "algo-2", "algo-3") and back.rank == 1


@pytest.mark.parametrize("topo, port, index", [
    (Topology(hosts=4, workers_per_host=8, rank=17), 2222, 2),  # MWMS: one TF worker per host
    (Topology(hosts=("a",)), 12345, 0),
])
def test_tf_config_one_worker_per_host(topo, port, index):
    cfg = tf_config(topo, port=port)
    assert len(cfg["cluster"]["worker"]) == topo.num_hosts and cfg["task"]["index"] == index
    assert all(w.endswith(f":{port}") for w in cfg["cluster"]["worker"])


@pytest.mark.parametrize("kind, kwargs, expected", [
    ("horovod", dict(processes_per_host=8), {"mpi": {"enabled": True, "processes_per_host": 8}}),
    ("mpi", dict(processes_per_host=4, custom_mpi_options="-verbose -x NCCL_DEBUG=INFO"),
     {"mpi": {"enabled": True, "processes_per_host": 4, "custom_mpi_options": "-verbose -x NCCL_DEBUG=INFO"}}),
    ("horovod", dict(topology=Topology(hosts=2, gpus_per_host=8)), {"mpi": {"enabled": True, "processes_per_host": 8}}),
    ("horovod", dict(topology=Topology(hosts=2, workers_per_host=4)),
     {"mpi": {"enabled": True, "processes_per_host": 4}}),
    ("parameter_server", {}, {"parameter_server": {"enabled": True}}),
    ("multi_worker_mirrored", {}, {"multi_worker_mirrored_strategy": {"enabled": True}}),
])
def test_sagemaker_distribution(kind, kwargs, expected):
    assert sagemaker_distribution(kind, **kwargs) == expected


@pytest.mark.parametrize("kind, kwargs, match", [
    ("horovod", {}, r"processes_per_host is required"),
    ("mpi", dict(processes_per_host=0), r"positive integer, got 0"),
    ("parameter_server", dict(processes_per_host=2), r"apply to horovod/mpi only"),
    ("smddp", {}, r"unknown distribution 'smddp': valid ones are horovod, mpi, parameter_server, "
                  r"multi_worker_mirrored"),
])
def test_sagemaker_distribution_errors(kind, kwargs, match):
    with pytest.raises(ValueError, match=match):
        sagemaker_distribution(kind, **kwargs)


def manifest(n, records=100):
    return NS(shards=[NS(name=f"train-{i:05d}-of-{n:05d}.tfrecord", records=records) for i in range(n)])


def test_pipe_channels_from_plan_one_per_worker():
    p = plan(manifest(8), Topology(hosts=2, workers_per_host=4), batch_size=10, pipe=True, channel_per_worker=True)
    chans = pipe_channels(p, "s3://bkt/criteo/")
    assert [c["ChannelName"] for c in chans] == ["train_0", "train_1", "train_2", "train_3"]
    for c in chans:
        src = c["DataSource"]["S3DataSource"]
        assert c["InputMode"] == "Pipe" and src["S3DataType"] == "ManifestFile"
        assert src["S3Uri"] == f"s3://bkt/criteo/channels/{c['ChannelName']}.manifest"
        assert src["S3DataDistributionType"] == "FullyReplicated"
    contents = channel_manifests(p, "s3://bkt/criteo")
    listed = [f for m in contents.values() for f in m[1:]]
    assert sorted(listed) == [s.name for s in manifest(8).shards]  # every shard in exactly one channel
    assert all(m[0] == {"prefix": "s3://bkt/criteo/"} for m in contents.values())
    kw = training_inputs(chans)
    assert kw["train_2"] == {"s3_data": "s3://bkt/criteo/channels/train_2.manifest", "distribution": "FullyReplicated",
                             "input_mode": "Pipe", "s3_data_type": "ManifestFile"}


def test_pipe_channels_sharded_and_by_count():
    p = plan(manifest(8), Topology(hosts=2, workers_per_host=4), batch_size=10, pipe=True, channel_per_worker=True,
             s3_sharded=True)
    assert {c["DataSource"]["S3DataSource"]["S3DataDistributionType"] for c in pipe_channels(p, "s3://b/p")} == \
        {"ShardedByS3Key"}
    chans = pipe_channels(3, "s3://b/p", s3_sharded=True)
    assert [c["DataSource"]["S3DataSource"]["S3Uri"] for c in chans] == ["s3://b/p/train_0/", "s3://b/p/train_1/",
                                                                         "s3://b/p/train_2/"]


@pytest.mark.parametrize("args, kwargs, match", [
    ((4, "/local/dir"), {}, r"s3_uri must be an s3:// URL"),
    ((0, "s3://b/p"), {}, r"positive integer"),
    ((21, "s3://b/p"), {}, r"at most 20"),
    ((2, "s3://b/p"), dict(input_mode="Stream"), r"input_mode must be one of"),
])
def test_pipe_channels_errors(args, kwargs, match):
    with pytest.raises(ValueError, match=match):
        pipe_channels(*args, **kwargs)
