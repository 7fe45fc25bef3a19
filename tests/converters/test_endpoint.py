"""One S3 endpoint rule (``converters.storage.s3.s3_endpoint``): ``--endpoint-url``, else
``$AWS_ENDPOINT_URL_S3``, else ``$AWS_ENDPOINT_URL``, else AWS; SageMaker in botocore's order
(``$AWS_ENDPOINT_URL_SAGEMAKER``, else ``$AWS_ENDPOINT_URL``). End to end: with ``AWS_ENDPOINT_URL`` at a dead
port and ``AWS_ENDPOINT_URL_S3`` at a real S3 endpoint (moto), every command that touches s3:// succeeds."""
from __future__ import annotations

import json

import pytest
from conftest import DEAD_ENDPOINT
from moto_s3 import keys

from converters.cli import main
from converters.libsvm.synthetic import write_criteo_libsvm, write_criteo_shards
from converters.storage.s3 import S3Storage, s3_endpoint, sagemaker_endpoint

pytest.importorskip("boto3")
pytest.importorskip("moto.server")

ENV = ("AWS_ENDPOINT_URL", "AWS_ENDPOINT_URL_S3", "AWS_ENDPOINT_URL_SAGEMAKER")


@pytest.mark.parametrize("explicit, env, s3_want, sagemaker_want", [
    (None, {}, None, None),
    (None, {"AWS_ENDPOINT_URL": "http://all"}, "http://all", "http://all"),
    (None, {"AWS_ENDPOINT_URL": "http://all", "AWS_ENDPOINT_URL_S3": "http://s3"}, "http://s3", "http://all"),
    (None, {"AWS_ENDPOINT_URL": "http://all", "AWS_ENDPOINT_URL_SAGEMAKER": "http://sm"}, "http://all", "http://sm"),
    (None, {"AWS_ENDPOINT_URL_S3": "http://s3", "AWS_ENDPOINT_URL_SAGEMAKER": "http://sm"}, "http://s3", "http://sm"),
    (None, {"AWS_ENDPOINT_URL": "  ", "AWS_ENDPOINT_URL_S3": ""}, None, None),
    ("http://flag", {"AWS_ENDPOINT_URL": "http://all", "AWS_ENDPOINT_URL_S3": "http://s3"}, "http://flag",
     "http://flag"),
])
def test_endpoint_order(monkeypatch, explicit, env, s3_want, sagemaker_want):
    for k in ENV:
        monkeypatch.delenv(k, raising=False)
    for k, v in env.items():
        monkeypatch.setenv(k, v)
    assert s3_endpoint(explicit) == s3_want
    assert sagemaker_endpoint(explicit) == sagemaker_want
    assert S3Storage("s3://b/p", endpoint_url=explicit).endpoint_url == s3_want


def test_sagemaker_client_follows_botocore_order(monkeypatch):
    from converters.engines.processing.launch import sagemaker_client

    monkeypatch.setenv("AWS_DEFAULT_REGION", "us-east-1")
    monkeypatch.setenv("AWS_ENDPOINT_URL", "http://127.0.0.1:1")
    monkeypatch.setenv("AWS_ENDPOINT_URL_S3", "http://127.0.0.1:2")
    monkeypatch.setenv("AWS_ENDPOINT_URL_SAGEMAKER", "http://127.0.0.1:3")
    assert sagemaker_client().meta.endpoint_url == "http://127.0.0.1:3"
    monkeypatch.delenv("AWS_ENDPOINT_URL_SAGEMAKER")
    assert sagemaker_client().meta.endpoint_url == "http://127.0.0.1:1"
    assert sagemaker_client(endpoint_url="http://127.0.0.1:4").meta.endpoint_url == "http://127.0.0.1:4"


def cli(argv, capsys) -> tuple[int, str, str]:
    code = main(argv)
    out, err = capsys.readouterr()
    return code, out, err


def test_every_s3_command_uses_the_s3_endpoint(s3_split, tmp_path, capsys):
    s3 = s3_split
    src = tmp_path / "day.libsvm"
    write_criteo_libsvm(src, 600, seed=3)
    # convert to s3://
    code, _, err = cli(["convert", "libsvm", str(src), "--field-size", "39", "--out", f"{s3.url}/conv",
                        "--workers", "1", "--shard-size", "64KiB", "--no-progress"], capsys)
    assert code == 0, err
    assert "conv/index.json" in keys(s3)
    # convert from s3://
    s3.client.upload_file(str(src), s3.bucket, "raw/day.libsvm")
    code, _, err = cli(["convert", "libsvm", f"{s3.url}/raw/", "--field-size", "39", "--out",
                        str(tmp_path / "from-s3"), "--workers", "1", "--no-progress"], capsys)
    assert code == 0, err
    # upload, inspect, verify, shard plan, download, reshard
    write_criteo_shards(str(tmp_path / "local"), 400, shard_bytes=32 << 10)
    code, _, err = cli(["upload", str(tmp_path / "local"), f"{s3.url}/up", "--no-progress"], capsys)
    assert code == 0, err
    code, out, err = cli(["inspect", f"{s3.url}/up", "--json"], capsys)
    assert code == 0 and json.loads(out)["records"] == 400, err
    code, out, err = cli(["verify", f"{s3.url}/conv", "--no-progress"], capsys)
    assert code == 0 and out.startswith("OK"), err
    code, out, err = cli(["shard", "plan", f"{s3.url}/up", "--hosts", "1", "--batch-size", "10", "--json"],
                         capsys)
    assert code == 0 and json.loads(out)["steps_per_epoch"] > 0, err
    code, _, err = cli(["download", f"{s3.url}/up", str(tmp_path / "down"), "--no-progress"], capsys)
    assert code == 0 and (tmp_path / "down" / "index.json").is_file(), err
    code, _, err = cli(["reshard", f"{s3.url}/up", "--out", f"{s3.url}/re", "--num-shards", "3",
                        "--no-progress"], capsys)
    assert code == 0, err
    assert "re/index.json" in keys(s3)
    # the pipeline reads the manifest from s3://
    spec_mod = pytest.importorskip("pipeline.plan.manifest")
    spec = spec_mod.PipelineSpec.from_manifest(f"{s3.url}/re", 16)
    assert len(spec.files) == 3


def test_convert_endpoint_url_flag(s3_split, tmp_path, capsys, monkeypatch):
    """``convert --endpoint-url`` wins over both variables (the run's workers see it too)."""
    s3 = s3_split
    monkeypatch.setenv("AWS_ENDPOINT_URL_S3", DEAD_ENDPOINT)
    src = tmp_path / "day.libsvm"
    write_criteo_libsvm(src, 300, seed=5)
    s3.client.upload_file(str(src), s3.bucket, "raw/day.libsvm")
    code, _, err = cli(["convert", "libsvm", f"{s3.url}/raw/day.libsvm", "--field-size", "39", "--out",
                        f"{s3.url}/flag", "--workers", "2", "--endpoint-url", s3.endpoint, "--no-progress"], capsys)
    assert code == 0, err
    assert "flag/index.json" in keys(s3)


def test_a_wrong_s3_endpoint_is_used_and_named(s3_split, tmp_path, capsys, monkeypatch):
    """The check can fail: with AWS_ENDPOINT_URL_S3 at the dead port, the same command fails naming it."""
    monkeypatch.setenv("AWS_ENDPOINT_URL_S3", DEAD_ENDPOINT)
    code, _, err = cli(["inspect", f"{s3_split.url}/nothing"], capsys)
    assert code != 0 and DEAD_ENDPOINT in err, err
