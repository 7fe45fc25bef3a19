"""Topology from SageMaker / Horovod / Open MPI / TF_CONFIG settings, explicit overrides, and validation."""
from __future__ import annotations

import json

import pytest

from converters.util.errors import TfpipeError
from sharding import ChannelConfig, Topology

SM2 = {"SM_HOSTS": '["algo-1", "algo-2"]', "SM_CURRENT_HOST": "algo-2", "SM_NUM_GPUS": "8", "SM_NUM_CPUS": "64"}
TF2 = json.dumps({"cluster": {"chief": ["c0:2222"], "worker": ["w0:2222", "w1:2222"]},
                  "task": {"type": "worker", "index": 1}})


def from_env(env, tmp_path, **kw):
    return Topology.from_env(env, config_dir=str(tmp_path / "input" / "config"),
                             processing_config_dir=str(tmp_path / "config"), **kw)


@pytest.mark.parametrize("env, expected", [
    ({}, dict(hosts=("localhost",), current_host="localhost", workers_per_host=1, rank=0, local_rank=0,
              world_size=1)),
    (SM2, dict(hosts=("algo-1", "algo-2"), current_host="algo-2", workers_per_host=1, rank=1, local_rank=0,
               world_size=2, gpus_per_host=8, cpus_per_host=64)),
    # Horovod on SageMaker: 2 hosts x 4 processes, this is rank 5 = host 1, local rank 1
    ({**SM2, "HOROVOD_RANK": "5", "HOROVOD_SIZE": "8", "HOROVOD_LOCAL_RANK": "1", "HOROVOD_LOCAL_SIZE": "4"},
     dict(hosts=("algo-1", "algo-2"), current_host="algo-2", workers_per_host=4, rank=5, local_rank=1,
          world_size=8)),
    # Open MPI without SageMaker: hosts named after rank blocks
    ({"OMPI_COMM_WORLD_RANK": "6", "OMPI_COMM_WORLD_SIZE": "8", "OMPI_COMM_WORLD_LOCAL_RANK": "2",
      "OMPI_COMM_WORLD_LOCAL_SIZE": "4"},
     dict(hosts=("host-0", "host-1"), current_host="host-1", workers_per_host=4, rank=6, local_rank=2, world_size=8)),
    # Horovod wins over OMPI when both are set
    ({"HOROVOD_RANK": "1", "HOROVOD_SIZE": "2", "HOROVOD_LOCAL_RANK": "1", "HOROVOD_LOCAL_SIZE": "2",
      "OMPI_COMM_WORLD_RANK": "0", "OMPI_COMM_WORLD_SIZE": "2", "OMPI_COMM_WORLD_LOCAL_RANK": "0",
      "OMPI_COMM_WORLD_LOCAL_SIZE": "2"},
     dict(hosts=("host-0",), workers_per_host=2, rank=1, local_rank=1, world_size=2)),
    # TF_CONFIG: chief first, then workers; worker 1 is rank 2
    ({"TF_CONFIG": TF2}, dict(hosts=("c0", "w0", "w1"), current_host="w1", workers_per_host=1, rank=2,
                              world_size=3)),
    ({"TF_CONFIG": json.dumps({"cluster": {"worker": ["a:1", "a:2"]}, "task": {"type": "worker", "index": 0}})},
     dict(hosts=("a:1", "a:2"), current_host="a:1", rank=0)),
    ({"SM_CHANNELS": '["train", "eval"]'},
     dict(channels={"eval": ChannelConfig(), "train": ChannelConfig()})),
    ({"SM_INPUT_DATA_CONFIG": json.dumps({"train": {"TrainingInputMode": "Pipe",
                                                    "S3DistributionType": "ShardedByS3Key"}})},
     dict(channels={"train": ChannelConfig("Pipe", "ShardedByS3Key")})),
])
def test_from_env(env, expected, tmp_path):
    topo = from_env(env, tmp_path)
    for k, v in expected.items():
        assert getattr(topo, k) == v, k


def write_sagemaker_config(tmp_path, resource=None, inputs=None, processing=False):
    d = tmp_path / ("config" if processing else "input/config")
    d.mkdir(parents=True, exist_ok=True)
    if resource is not None:
        (d / "resourceconfig.json").write_text(json.dumps(resource))
    if inputs is not None:
        (d / "inputdataconfig.json").write_text(json.dumps(inputs))


def test_sagemaker_config_files(tmp_path):
    write_sagemaker_config(
        tmp_path, {"current_host": "algo-3", "hosts": ["algo-1", "algo-2", "algo-3"], "network_interface_name": "eth0"},
        {"train_0": {"ContentType": "application/x-tfrecord", "TrainingInputMode": "Pipe",
                     "S3DistributionType": "FullyReplicated", "RecordWrapperType": "None"},
         "train_1": {"TrainingInputMode": "Pipe", "S3DistributionType": "FullyReplicated"},
         "eval": {"TrainingInputMode": "FastFile", "S3DistributionType": "ShardedByS3Key"}})
    topo = from_env({}, tmp_path)
    assert topo.hosts == ("algo-1", "algo-2", "algo-3") and topo.current_host == "algo-3" and topo.rank == 2
    assert topo.channels["train_1"] == ChannelConfig("Pipe", "FullyReplicated")
    assert topo.channels["eval"].sharded and not topo.channels["eval"].pipe
    assert list(topo.channels) == ["eval", "train_0", "train_1"]
    # SM_* variables win over the files
    topo = from_env({"SM_CURRENT_HOST": "algo-1"}, tmp_path)
    assert topo.current_host == "algo-1" and topo.rank == 0


def test_processing_job_resourceconfig(tmp_path):
    write_sagemaker_config(tmp_path, {"current_host": "algo-2", "hosts": ["algo-1", "algo-2"]}, processing=True)
    topo = from_env({}, tmp_path)
    assert topo.hosts == ("algo-1", "algo-2") and topo.current_host == "algo-2"


@pytest.mark.parametrize("env, overrides, expected", [
    (SM2, dict(workers_per_host=8), dict(workers_per_host=8, rank=8, local_rank=0)),
    (SM2, dict(hosts=4), dict(hosts=("algo-1", "algo-2", "algo-3", "algo-4"), current_host="algo-2", rank=1)),
    (SM2, dict(hosts=["a", "b"]), dict(hosts=("a", "b"), current_host="a", rank=0)),
    (SM2, dict(hosts=4, rank=5, workers_per_host=2), dict(current_host="algo-3", local_rank=1)),
    ({"HOROVOD_RANK": "3", "HOROVOD_SIZE": "4", "HOROVOD_LOCAL_RANK": "1", "HOROVOD_LOCAL_SIZE": "2"},
     dict(hosts=["x", "y", "z"], workers_per_host=2), dict(hosts=("x", "y", "z"), current_host="y", rank=3)),
    ({}, dict(channels={"train": ChannelConfig("Pipe")}), dict(channels={"train": ChannelConfig("Pipe")})),
])
def test_explicit_arguments_override(env, overrides, expected, tmp_path):
    topo = from_env(env, tmp_path, **overrides)
    for k, v in expected.items():
        assert getattr(topo, k) == v, k


@pytest.mark.parametrize("env, match", [
    ({"SM_HOSTS": "algo-1"}, r"SM_HOSTS is not valid JSON"),
    ({"SM_HOSTS": '{"a": 1}'}, r"SM_HOSTS must be a JSON list"),
    ({"SM_NUM_GPUS": "eight"}, r"SM_NUM_GPUS='eight' is not an integer"),
    ({**SM2, "SM_CURRENT_HOST": "algo-9"}, r"current_host 'algo-9' is not one of hosts"),
    ({"HOROVOD_RANK": "1"}, r"HOROVOD_RANK and HOROVOD_SIZE must be set together"),
    ({"HOROVOD_RANK": "0", "HOROVOD_SIZE": "2", "HOROVOD_LOCAL_RANK": "0"}, r"HOROVOD_LOCAL_SIZE is not"),
    ({"HOROVOD_RANK": "0", "HOROVOD_SIZE": "3", "HOROVOD_LOCAL_SIZE": "2"}, r"not a multiple of the local size"),
    ({**SM2, "HOROVOD_RANK": "0", "HOROVOD_SIZE": "6", "HOROVOD_LOCAL_RANK": "0", "HOROVOD_LOCAL_SIZE": "2"},
     r"world size 6 != 2 host\(s\) x 2"),
    ({**SM2, "HOROVOD_RANK": "1", "HOROVOD_SIZE": "4", "HOROVOD_LOCAL_RANK": "1", "HOROVOD_LOCAL_SIZE": "2"},
     r"host-major"),
    ({"TF_CONFIG": "{"}, r"TF_CONFIG is not valid JSON"),
    ({"TF_CONFIG": '{"cluster": {}}'}, r"TF_CONFIG must have"),
    ({"TF_CONFIG": json.dumps({"cluster": {"worker": ["a:1"], "ps": ["p:1"]}, "task": {"type": "ps", "index": 0}})},
     r"task type 'ps' reads no training data"),
    ({"TF_CONFIG": json.dumps({"cluster": {"worker": ["a:1"]}, "task": {"type": "worker", "index": 3}})},
     r"not in its cluster"),
    ({"SM_INPUT_DATA_CONFIG": json.dumps({"train": {"TrainingInputMode": "Stream"}})},
     r"channel 'train': input_mode must be one of File, Pipe, FastFile, got 'Stream'"),
    ({"SM_CHANNELS": json.dumps([f"c{i}" for i in range(21)])}, r"at most 20"),
])
def test_bad_environment(env, match, tmp_path):
    with pytest.raises(TfpipeError, match=match):
        from_env(env, tmp_path)


def test_bad_config_file_names_the_file(tmp_path):
    d = tmp_path / "input" / "config"
    d.mkdir(parents=True)
    (d / "resourceconfig.json").write_text("{not json")
    with pytest.raises(TfpipeError, match=r"resourceconfig.json is not valid JSON"):
        from_env({}, tmp_path)


def test_unknown_override_is_a_type_error(tmp_path):
    with pytest.raises(TypeError, match="unknown Topology field"):
        from_env({}, tmp_path, worker_per_host=2)


@pytest.mark.parametrize("kwargs, match", [
    (dict(hosts=()), r"hosts must not be empty"),
    (dict(hosts=0), r"positive count"),
    (dict(hosts=("a", "a")), r"hosts must be unique, a repeated"),
    (dict(hosts=("a", "")), r"non-empty strings"),
    (dict(workers_per_host=0), r"workers_per_host must be a positive integer, got 0"),
    (dict(hosts=2, workers_per_host=2, rank=4), r"rank must be in \[0, 4\)"),
    (dict(hosts=2, current_host="zz"), r"current_host 'zz' is not one of hosts"),
    (dict(hosts=2, workers_per_host=2, rank=1, local_rank=0), r"host-major"),
    (dict(gpus_per_host=-1), r"gpus_per_host"),
])
def test_validation(kwargs, match):
    with pytest.raises(ValueError, match=match):
        Topology(**kwargs)


@pytest.mark.parametrize("kwargs, match", [
    (dict(input_mode="pipe"), r"input_mode must be one of File, Pipe, FastFile, got 'pipe'"),
    (dict(s3_distribution="Sharded"), r"s3_distribution must be one of FullyReplicated, ShardedByS3Key"),
])
def test_channel_validation(kwargs, match):
    with pytest.raises(ValueError, match=match):
        ChannelConfig(**kwargs)


def test_derived_and_json():
    t = Topology(hosts=("a", "b", "c"), workers_per_host=4, rank=9)
    assert (t.world_size, t.host_index, t.current_host, t.local_rank, t.is_chief) == (12, 2, "c", 1, False)
    d = t.to_json()
    assert d["world_size"] == 12 and d["hosts"] == ["a", "b", "c"]
    assert t.channel() == ChannelConfig()  # default: File, FullyReplicated
    with pytest.raises(Exception):
        t.rank = 0  # frozen
