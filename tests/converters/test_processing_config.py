"""A Processing instance's config directory: resourceconfig.json (required) and processingjobconfig.json."""
from __future__ import annotations

import json

import pytest

from converters.util.errors import TfpipeError
from converters.engines.processing.config import ProcessingConfig, read_processing_config

RES = {"current_host": "algo-2", "hosts": ["algo-1", "algo-2", "algo-3"], "network_interface_name": "eth0"}
JOB = {
    "ProcessingJobArn": "arn:aws:sagemaker:us-east-1:123456789012:processing-job/criteo-1",
    "ProcessingJobName": "criteo-1",
    "ProcessingInputs": [
        {"InputName": "train", "AppManaged": False,
         "S3Input": {"S3Uri": "s3://b/raw/", "LocalPath": "/opt/ml/processing/input/train", "S3DataType": "S3Prefix",
                     "S3InputMode": "File", "S3DataDistributionType": "ShardedByS3Key"}},
        {"InputName": "tok", "S3Input": {"S3Uri": "s3://b/tok/", "LocalPath": "/opt/ml/processing/input/tok",
                                         "S3DataType": "S3Prefix"}},  # no distribution: FullyReplicated
        {"InputName": "athena", "DatasetDefinition": {"LocalPath": "/opt/ml/processing/input/athena"}},
    ],
}


def write(tmp_path, res=RES, job=JOB):
    if res is not None:
        (tmp_path / "resourceconfig.json").write_text(res if isinstance(res, str) else json.dumps(res))
    if job is not None:
        (tmp_path / "processingjobconfig.json").write_text(job if isinstance(job, str) else json.dumps(job))
    return str(tmp_path)


def test_reads_place_channels_and_job(tmp_path):
    cfg = read_processing_config(write(tmp_path))
    assert cfg.place.hosts == ("algo-1", "algo-2", "algo-3") and cfg.place.current_host == "algo-2"
    assert cfg.channels == {"/opt/ml/processing/input/tok": "FullyReplicated",
                            "/opt/ml/processing/input/train": "ShardedByS3Key"}
    assert cfg.job == JOB["ProcessingJobArn"]


def test_job_config_is_optional(tmp_path):
    cfg = read_processing_config(write(tmp_path, job=None))
    assert cfg.channels == {} and cfg.job == ""


@pytest.mark.parametrize("res, job, match", [
    (None, None, "resourceconfig.json not found: not inside a SageMaker Processing job"),
    ("{nope", None, "resourceconfig.json is not valid JSON"),
    ("[1]", None, "must hold a JSON object"),
    ("[" * 100_000 + "]" * 100_000, None, "resourceconfig.json nests deeper than 32 levels"),
    (RES, '{"a":' * 100_000 + "1" + "}" * 100_000, "processingjobconfig.json nests deeper than 32 levels"),
    ({"current_host": "algo-9", "hosts": ["algo-1"]}, None, r"resourceconfig.json: current_host 'algo-9'"),
    ({"current_host": "a", "hosts": []}, None, "hosts must not be empty"),
    (RES, {"ProcessingInputs": {"a": 1}}, "ProcessingInputs must be a list"),
    (RES, {"ProcessingInputs": [{"S3Input": {"LocalPath": "/x", "S3DataDistributionType": "Sometimes"}}]},
     r"processingjobconfig.json: /x: S3DataDistributionType must be one of"),
    (RES, {"ProcessingInputs": [{"S3Input": {"LocalPath": "rel/x"}}]}, "must be an absolute path"),
])
def test_bad_config_is_one_clear_error(tmp_path, res, job, match):
    with pytest.raises(TfpipeError, match=match):
        read_processing_config(write(tmp_path, res, job))


def test_config_value_is_validated():
    from converters.engines.processing.hosts import Place

    with pytest.raises(ValueError, match="place must be a Place"):
        ProcessingConfig(("a",))
    assert ProcessingConfig(Place(("a",), "a"), {"/b": "ShardedByS3Key", "/a": "FullyReplicated"}).channels == \
        {"/a": "FullyReplicated", "/b": "ShardedByS3Key"}
