import os
import subprocess
import sys
import uuid
from types import SimpleNamespace as NS

import pytest
from ctrl_c import (pytest_configure, pytest_keyboard_interrupt, pytest_runtest_protocol,  # noqa: F401 - Ctrl-C hooks
                    pytest_sessionfinish)

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
os.environ.setdefault("TF_ENABLE_ONEDNN_OPTS", "0")
os.environ.setdefault("TFPIPE_IGNORE_LOAD", "1")  # parallel paths stay parallel on a busy test host (see test_system)

# The run starts hundreds of Python processes (the CLI, Processing instances, servers, readers). Where the
# environment turns bytecode writing off (PYTHONDONTWRITEBYTECODE), every one of them would compile tfpipe's
# modules from source again, and every xdist worker its test modules: the run writes bytecode as Python does by
# default, into the tree's __pycache__ folders (git ignores them; numba's kernel cache is there already).
if sys.dont_write_bytecode or os.environ.get("PYTHONDONTWRITEBYTECODE"):
    os.environ.pop("PYTHONDONTWRITEBYTECODE", None)
    sys.dont_write_bytecode = False


# -- a real S3 (and SageMaker) API on 127.0.0.1: moto's server, fake credentials ------------------------------

@pytest.fixture(scope="session")
def moto_endpoint():
    """One moto server per test process (xdist worker); every test makes its own bucket."""
    import logging

    moto_server_mod = pytest.importorskip("moto.server")
    logging.getLogger("werkzeug").setLevel(logging.ERROR)  # one line per request otherwise
    server = moto_server_mod.ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    host, port = server.get_host_and_port()
    assert host == "127.0.0.1"
    yield f"http://127.0.0.1:{port}"
    server.stop()


@pytest.fixture
def s3(moto_endpoint, monkeypatch):
    """A fresh bucket on the local moto server; AWS_ENDPOINT_URL points at it (fake credentials)."""
    import boto3
    from moto_s3 import FAKE_AWS

    for k, v in {**FAKE_AWS, "AWS_ENDPOINT_URL": moto_endpoint}.items():
        monkeypatch.setenv(k, v)
    for k in ("AWS_PROFILE", "AWS_ENDPOINT_URL_S3", "AWS_CONFIG_FILE", "AWS_SHARED_CREDENTIALS_FILE"):
        monkeypatch.delenv(k, raising=False)
    monkeypatch.setenv("AWS_CONFIG_FILE", "/nonexistent")
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", "/nonexistent")
    client = boto3.client("s3", endpoint_url=moto_endpoint, region_name="us-east-1")
    bucket = f"tfpipe-{uuid.uuid4().hex[:12]}"
    client.create_bucket(Bucket=bucket)
    return NS(endpoint=moto_endpoint, bucket=bucket, client=client, url=f"s3://{bucket}")


@pytest.fixture
def proxy(s3):
    """``proxy(rule)``: a ``moto_s3.FaultProxy`` in front of the ``s3`` bucket's moto, closed after the test."""
    from moto_s3 import FaultProxy

    made = []

    def make(rule):
        p = FaultProxy(s3.endpoint, rule)
        made.append(p)
        return p

    yield make
    for p in made:
        p.close()


DEAD_ENDPOINT = "http://127.0.0.1:9"  # the discard port: nothing listens, a connection is refused at once


@pytest.fixture
def s3_split(s3, monkeypatch):
    """The ``s3`` bucket with S3-compatible storage for data and "AWS" for the rest: AWS_ENDPOINT_URL_S3
    points at moto, AWS_ENDPOINT_URL at a dead port (any S3 client that reads the latter fails)."""
    monkeypatch.setenv("AWS_ENDPOINT_URL_S3", s3.endpoint)
    monkeypatch.setenv("AWS_ENDPOINT_URL", DEAD_ENDPOINT)
    monkeypatch.setenv("TFPIPE_S3_MAX_ATTEMPTS", "1")  # a wrong endpoint fails at once, not after retries
    monkeypatch.delenv("AWS_ENDPOINT_URL_SAGEMAKER", raising=False)
    return s3


@pytest.fixture
def mounted():
    """``mount(args, target)``: mount (``mount ARGS TARGET``) for the test, unmounted after it; skips the test
    with the reason where the machine does not allow mounts."""
    done = []

    def mount(args: list[str], target) -> None:
        r = subprocess.run(["mount", *args, str(target)], capture_output=True, text=True)
        if r.returncode != 0:
            pytest.skip(f"cannot mount here ({r.stderr.strip() or 'mount failed'}): needs root on a machine that "
                        "allows mounts")
        done.append(target)
    yield mount
    for target in reversed(done):
        subprocess.run(["umount", "-l", str(target)], check=False)


@pytest.fixture(autouse=True, scope="session")
def _botocore_models_once():
    """Every S3 client a test process makes reads botocore's service models parsed once (``moto_s3``)."""
    try:
        from moto_s3 import share_botocore_models

        share_botocore_models()
    except ImportError:  # no boto3: the S3 tests skip
        pass


@pytest.fixture(autouse=True, scope="session")
def _private_tfpipe_cache(tmp_path_factory):
    """Tests never read or write the user's tfpipe cache (fetched shards, stored tuning results, the column
    kernel). The kernel is compiled once per run, into a directory every xdist worker of the run shares."""
    os.environ["TFPIPE_CACHE"] = str(tmp_path_factory.mktemp("tfpipe-cache"))
    os.environ["TFPIPE_KERNEL_DIR"] = str(tmp_path_factory.getbasetemp().parent / "tfpipe-kernels")


@pytest.fixture()
def store(tmp_path, monkeypatch):
    """A private tfpipe cache for one test; returns where tuning results go (``<cache>/tune``)."""
    monkeypatch.setenv("TFPIPE_CACHE", str(tmp_path / "cache"))
    return tmp_path / "cache" / "tune"
