"""``tfpipe processing launch``: the CreateProcessingJob request checked against the API's documented limits
(botocore's model), --dry-run, a real launch against moto's SageMaker API, --wait on a job that fails (a scripted
SageMaker endpoint), the wheel, and the container's bootstrap script run for real."""
from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import zipfile
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
from moto_s3 import keys

from converters.cli import main
from converters.engines.processing.launch import BOOTSTRAP, build_wheel
from converters.engines.processing.request import (
    InputSpec,
    LaunchSpec,
    build_request,
    check_request,
    request_shape,
    validate_request,
)

pytest.importorskip("boto3")

ROLE = "arn:aws:iam::123456789012:role/SMProc"
IMAGE = "683313688378.dkr.ecr.us-east-1.amazonaws.com/sagemaker-scikit-learn:1.2-1-cpu-py3"
BASE = ["processing", "launch", "--job-name", "criteo-1", "--role", ROLE, "--image-uri", IMAGE,
        "--instance-type", "ml.c5.4xlarge", "--instance-count", "4", "--input", "train=s3://raw/criteo/,sharded"]
CMD = ["--", "convert", "libsvm", "/opt/ml/processing/input/train", "--field-size", "39", "--out", "s3://out/criteo/"]


def run(argv, capsys):
    code = main(argv)
    out = capsys.readouterr()
    return code, out.out, out.err


@pytest.fixture(scope="module")
def wheel(tmp_path_factory):
    return build_wheel(str(tmp_path_factory.mktemp("wheel")))


def test_dry_run_prints_a_request_within_the_limits(capsys):
    code, out, err = run(BASE + ["--env", "LOG=1", "--wait-timeout", "900", "--unit-size", "64MiB", "--dry-run"] + CMD,
                         capsys)
    assert code == 0, err
    req = json.loads(out)
    check_request(req)  # every documented limit holds
    assert validate_request(req, request_shape()) == []
    assert req["ProcessingJobName"] == "criteo-1" and req["RoleArn"] == ROLE
    assert req["ProcessingResources"]["ClusterConfig"] == {"InstanceCount": 4, "InstanceType": "ml.c5.4xlarge",
                                                           "VolumeSizeInGB": 30}
    app = req["AppSpecification"]
    assert app["ImageUri"] == IMAGE
    assert app["ContainerEntrypoint"] == ["/bin/sh", "/opt/ml/processing/input/code/tfpipe-bootstrap.sh"]
    assert app["ContainerArguments"] == ["--wait-timeout", "900", "--unit-size", str(64 << 20)] + CMD[1:]
    train, code_in = req["ProcessingInputs"]
    assert train["S3Input"] == {"S3Uri": "s3://raw/criteo/", "LocalPath": "/opt/ml/processing/input/train",
                                "S3DataType": "S3Prefix", "S3InputMode": "File",
                                "S3DataDistributionType": "ShardedByS3Key", "S3CompressionType": "None"}
    assert code_in["InputName"] == "code"
    assert code_in["S3Input"]["S3Uri"] == "s3://out/tfpipe-code/criteo-1/"
    assert code_in["S3Input"]["LocalPath"] == "/opt/ml/processing/input/code"
    assert code_in["S3Input"]["S3DataDistributionType"] == "FullyReplicated"
    assert req["Environment"] == {"TFPIPE_EXTRAS": "s3", "LOG": "1"}


def test_text_jobs_install_the_text_extra(capsys):
    argv = BASE[:-2] + ["--input", "pile=s3://raw/pile/", "--input", "tok=s3://raw/tok/", "--dry-run", "--",
                        "convert", "text", "/opt/ml/processing/input/pile", "--seq-len", "2048", "--tokenizer",
                        "/opt/ml/processing/input/tok/tokenizer.json", "--out", "s3://out/pile/"]
    code, out, err = run(argv, capsys)
    assert code == 0, err
    assert json.loads(out)["Environment"]["TFPIPE_EXTRAS"] == "s3,text"


ELEVEN = [a for i in range(10) for a in ("--input", f"in{i}=s3://raw/{i}/")]


@pytest.mark.parametrize("change, command, code, match", [
    ({"--role": "arn:aws:iam::12345:role/x"}, None, 1, r"RoleArn: 'arn:aws:iam::12345:role/x' does not match .*"
                                                       r"an IAM role ARN such as"),
    ({"--role": "SMProc"}, None, 1, "RoleArn"),
    ({"--job-name": "criteo_1"}, None, 1, r"ProcessingJobName: 'criteo_1' does not match .*letters, digits and "
                                          "hyphens"),
    ({"--job-name": "x" * 64}, None, 1, "ProcessingJobName: 64 characters, the API allows at most 63"),
    ({"--instance-count": "101"}, None, 1, "InstanceCount: 101 is above the API's maximum 100"),
    ({"--instance-type": "ml.c5.5xlarge"}, None, 1, "InstanceType: 'ml.c5.5xlarge' is not one of"),
    ({"+": ["--max-runtime", "999999"]}, None, 1, "MaxRuntimeInSeconds: 999999 is above the API's maximum 777600"),
    ({"--input": "train=s3://raw/criteo/,sharded", "+": ELEVEN}, None, 1,
     r"ProcessingInputs: 12 entries, the API allows at most 10"),
    ({"+": [a for i in range(100) for a in ("--env", f"K{i}=v")]}, None, 1,
     "Environment: 101 entries, the API allows at most 100"),
    ({"+": ["--env", "1BAD=v"]}, None, 1, r"Environment key '1BAD': '1BAD' does not match"),
    ({}, CMD[:4] + ["/opt/ml/processing/input/train/" + "d" * 260] + CMD[4:], 1,
     r"ContainerArguments\[3\]: 291 characters, the API allows at most 256 \(a shorter command"),
    ({"--input": "code=s3://raw/x/"}, None, 2, "reserved for the tfpipe code input"),
    ({"--input": "train=/local/dir"}, None, 2, "expected an s3://bucket/prefix URI"),
    ({"--input": "train=s3://raw/x/,fast"}, None, 2, "unknown flag 'fast'"),
    ({}, ["--", "convert", "libsvm", "/data/x.txt", "--field-size", "3", "--out", "s3://o/"], 2,
     r"input /data/x.txt is not under any --input's local path \(/opt/ml/processing/input/train\)"),
    ({}, CMD[:-1] + ["/shared/out"], 2, "writes its shard set straight to S3"),
    ({"+": ["--input", "eval=s3://raw/eval/"]}, CMD[:4] + ["/opt/ml/processing/input/eval"] + CMD[4:], 2,
     "inputs mix ShardedByS3Key"),
    ({}, ["--", "convert", "libsvm", "/opt/ml/processing/input/train", "--out", "s3://o/"], 2,
     "one of the arguments --field-size --sparse is required"),
    ({}, ["--", "convert", "parquet", "x"], 2, r"expected a conversion command 'convert \{libsvm\|text\|tabular\}"),
])
def test_bad_requests_are_refused_with_one_line_and_nothing_sent(capsys, change, command, code, match):
    argv = list(BASE)
    for k, v in change.items():
        if k == "+":
            argv += v
        else:
            argv[argv.index(k) + 1] = v
    got, out, err = run(argv + ["--dry-run"] + (command or CMD), capsys)
    assert got == code, err
    assert out == "" and err.count("\n") == 1 and err.startswith("tfpipe: error: ")
    assert __import__("re").search(match, err), err


def test_tokenizer_must_reach_every_instance(capsys):
    argv = BASE + ["--dry-run", "--", "convert", "text", "/opt/ml/processing/input/train", "--seq-len", "8",
                   "--tokenizer", "/opt/ml/processing/input/train/tok.json", "--out", "s3://o/"]
    code, _, err = run(argv, capsys)
    assert code == 2 and "must be under a FullyReplicated --input" in err


def test_model_validation_table():
    shape = request_shape()
    spec = LaunchSpec("j", ROLE, IMAGE, "ml.m5.xlarge", 1, (InputSpec("a", "s3://b/a/"),), ("convert",), "s3://c/")
    req = build_request(spec, "libsvm")
    assert validate_request(req, shape) == []
    bad = json.loads(json.dumps(req))
    del bad["RoleArn"]
    bad["Nope"] = 1
    bad["ProcessingResources"]["ClusterConfig"]["VolumeSizeInGB"] = 0
    bad["ProcessingInputs"][0]["S3Input"]["S3InputMode"] = "Stream"
    bad["ProcessingInputs"][0]["AppManaged"] = "no"
    problems = validate_request(bad, shape)
    assert sorted(problems) == ["Nope: not a member of CreateProcessingJobRequest",
                                "ProcessingInputs[0].AppManaged: expected true or false, got 'no'",
                                "ProcessingInputs[0].S3Input.S3InputMode: 'Stream' is not one of Pipe, File",
                                "ProcessingResources.ClusterConfig.VolumeSizeInGB: 0 is below the API's minimum 1",
                                "RoleArn: required"]
    outside = json.loads(json.dumps(req))
    outside["ProcessingInputs"][0]["S3Input"]["LocalPath"] = "/opt/ml/input/a"
    with pytest.raises(Exception, match=r"LocalPath: '/opt/ml/input/a' is not under /opt/ml/processing/"):
        check_request(outside, shape)
    nested = json.loads(json.dumps(req))
    nested["ProcessingInputs"][0]["S3Input"]["LocalPath"] = "/opt/ml/processing/input/code/x"
    with pytest.raises(Exception, match="'/opt/ml/processing/input/code' overlaps '/opt/ml/processing/input/code/x'"):
        check_request(nested, shape)


def test_wheel_carries_every_package(wheel):
    names = zipfile.ZipFile(wheel).namelist()
    for m in ("converters/engines/processing/instance.py", "converters/engines/processing/launch.py",
              "converters/cli/main.py", "pipeline/__init__.py"):
        assert m in names
    assert not [n for n in names if "__pycache__" in n or n.startswith("tests/")]
    entry = [n for n in names if n.endswith("entry_points.txt")]
    assert entry and "sharding.cli:register" in zipfile.ZipFile(wheel).read(entry[0]).decode()


def test_launch_creates_a_job_that_describe_returns(s3, moto_endpoint, monkeypatch, capsys, tmp_path):
    """Against moto's SageMaker API: the wheel is built, wheel + bootstrap go to the code location, the job is
    created, DescribeProcessingJob returns it (moto completes jobs at once, so --wait ends at once)."""
    import boto3

    argv = [a.replace("s3://out/", f"{s3.url}/") for a in BASE + ["--wait", "--poll", "0.1"] + CMD]
    code, out, err = run(argv, capsys)
    assert code == 0, err
    assert f"{s3.url}/tfpipe-code/criteo-1/tfpipe-bootstrap.sh" in out and "Completed" in out
    sm = boto3.client("sagemaker", endpoint_url=moto_endpoint, region_name="us-east-1")
    desc = sm.describe_processing_job(ProcessingJobName="criteo-1")
    assert desc["RoleArn"] == ROLE and desc["ProcessingJobStatus"] == "Completed"
    assert desc["AppSpecification"]["ContainerArguments"] == [a.replace("s3://out/", f"{s3.url}/") for a in CMD[1:]]
    assert [i["InputName"] for i in desc["ProcessingInputs"]] == ["train", "code"]
    code_keys = keys(s3, "tfpipe-code/criteo-1/")
    assert "tfpipe-code/criteo-1/tfpipe-bootstrap.sh" in code_keys
    assert len([k for k in code_keys if k.endswith(".whl")]) == 1
    # a malformed role: refused before anything is uploaded or created
    argv2 = [a.replace("criteo-1", "criteo-2") for a in argv]
    argv2[argv2.index("--role") + 1] = "arn:aws:iam::123:role/x"
    code, out, err = run(argv2, capsys)
    assert code == 1 and "RoleArn" in err and err.count("\n") == 1
    assert [j["ProcessingJobName"] for j in sm.list_processing_jobs()["ProcessingJobSummaries"]] == ["criteo-1"]
    assert not keys(s3, "tfpipe-code/criteo-2/")


class ScriptedSageMaker(BaseHTTPRequestHandler):
    """A SageMaker JSON API that answers CreateProcessingJob, then DescribeProcessingJob from a script."""

    script: list[dict] = []

    def do_POST(self):  # noqa: N802
        self.rfile.read(int(self.headers.get("Content-Length", 0)))
        target = self.headers.get("X-Amz-Target", "")
        if target.endswith("CreateProcessingJob"):
            body = {"ProcessingJobArn": "arn:aws:sagemaker:us-east-1:123456789012:processing-job/criteo-1"}
        else:
            body = self.script.pop(0) if len(self.script) > 1 else self.script[0]
        data = json.dumps(body).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/x-amz-json-1.1")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, *args):
        pass


def test_wait_exits_non_zero_with_the_failure_reason(s3, wheel, monkeypatch, capsys):
    ScriptedSageMaker.script = [
        {"ProcessingJobName": "criteo-1", "ProcessingJobStatus": "InProgress"},
        {"ProcessingJobName": "criteo-1", "ProcessingJobStatus": "InProgress"},
        {"ProcessingJobName": "criteo-1", "ProcessingJobStatus": "Failed",
         "FailureReason": "AlgorithmError: See job logs for more information",
         "ExitMessage": "gave up after 3600 s waiting for the part of algo-3"},
    ]
    server = ThreadingHTTPServer(("127.0.0.1", 0), ScriptedSageMaker)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        monkeypatch.setenv("AWS_ENDPOINT_URL_SAGEMAKER", f"http://127.0.0.1:{server.server_port}")
        argv = [a.replace("s3://out/", f"{s3.url}/") for a in BASE + ["--wheel", wheel, "--wait", "--poll", "0.05"]
                + CMD]
        code, out, err = run(argv, capsys)
    finally:
        server.shutdown()
    assert code == 1
    assert "criteo-1: InProgress after 0m 00s" in out and "criteo-1: Failed" in out
    assert err.count("\n") == 1 and "processing job criteo-1 failed: AlgorithmError" in err
    assert "waiting for the part of algo-3" in err


def _bootstrap(tmp_path, code_dir, args, **env):
    script = code_dir / "tfpipe-bootstrap.sh"
    script.write_text(BOOTSTRAP)
    full = {**os.environ, "TFPIPE_MESSAGE_FILE": str(tmp_path / "out" / "message"), **env}
    return subprocess.run(["/bin/sh", str(script), *args], env=full, capture_output=True, text=True, timeout=300,
                          cwd=tmp_path)  # not the source tree: python -c would import it from the working dir


def test_bootstrap_installs_the_wheel_and_runs_processing_run(tmp_path, wheel):
    """The container's entry point for real: pip installs the shipped wheel (offline, into a target folder here)
    and execs 'tfpipe processing run' from the installed copy."""
    code_dir = tmp_path / "code"
    code_dir.mkdir()
    (code_dir / os.path.basename(wheel)).write_bytes(open(wheel, "rb").read())
    target = tmp_path / "site"
    res = _bootstrap(tmp_path, code_dir, ["--config-dir", str(tmp_path / "nowhere"), "convert", "libsvm", "x",
                                          "--field-size", "1", "--out", str(tmp_path / "o")],
                     TFPIPE_PIP_ARGS=f"--no-deps --no-index --target {target}", PYTHONPATH=str(target),
                     TMPDIR=str(tmp_path))
    assert (target / "converters" / "engines" / "processing" / "instance.py").exists(), res.stderr
    # it ran the installed tfpipe: outside a job it names the missing resourceconfig.json
    assert res.returncode == 1 and "resourceconfig.json not found" in res.stderr, res.stderr
    where = subprocess.run([sys.executable, "-c", "import sharding; print(sharding.__file__)"], cwd=tmp_path,
                           env={**os.environ, "PYTHONPATH": str(target)}, capture_output=True, text=True).stdout
    assert where.startswith(str(target))  # the same environment imports the installed copy


@pytest.mark.parametrize("setup, env, match", [
    ("nothing", {}, "no tfpipe wheel in"),
    ("wheel", {"TFPIPE_PYTHON": "/nonexistent/python3"}, "missing or older than 3.10"),
    ("junk-wheel", {"TFPIPE_PIP_ARGS": "--no-deps --no-index --target {t}"}, "pip install of tfpipe-0.0.0"),
])
def test_bootstrap_failures_go_to_the_message_file(tmp_path, setup, env, match):
    code_dir = tmp_path / "code"
    code_dir.mkdir()
    if setup == "wheel":
        (code_dir / "tfpipe-1-py3-none-any.whl").write_bytes(b"")
    if setup == "junk-wheel":
        (code_dir / "tfpipe-0.0.0-py3-none-any.whl").write_bytes(b"not a zip")
    res = _bootstrap(tmp_path, code_dir, [], **{k: v.format(t=tmp_path / "t") for k, v in env.items()})
    assert res.returncode == 1 and match in res.stderr
    assert match in (tmp_path / "out" / "message").read_text()
