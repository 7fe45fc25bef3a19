"""``tfpipe processing launch``'s I/O: ship tfpipe into the container and create (and watch) the job.

Getting tfpipe into a stock image, the way framework processors ship code: a wheel of the tfpipe that runs
here (``build_wheel``) and a small POSIX shell script (``BOOTSTRAP``) go to the code location in S3, which the
request mounts as the ``code`` input; the container's entry point runs the script, which checks Python
>= 3.10, pip-installs the wheel with the extras the conversion needs (``TFPIPE_EXTRAS``) and execs
``tfpipe processing run`` with the container's arguments. Any image with Python >= 3.10 and pip works.
boto3 is imported inside the functions.
"""
from __future__ import annotations

import logging
import os
import shutil
import subprocess
import sys
import tempfile
import time
from typing import Callable

from converters.util.errors import TfpipeError

from .request import BOOTSTRAP_NAME

__all__ = ["BOOTSTRAP", "build_wheel", "project_root", "upload_code", "sagemaker_client", "create_job",
           "wait_job", "TERMINAL"]

log = logging.getLogger(__name__)

TERMINAL = ("Completed", "Failed", "Stopped")

BOOTSTRAP = r"""#!/bin/sh
# tfpipe bootstrap for a SageMaker Processing container (written by `tfpipe processing launch`):
# install the tfpipe wheel shipped next to this script, then run `tfpipe processing run` with the
# container's arguments. Needs python3 >= 3.10 with pip in the image.
set -u
code_dir=$(cd "$(dirname "$0")" && pwd)
msg=${TFPIPE_MESSAGE_FILE:-/opt/ml/output/message}
py=${TFPIPE_PYTHON:-python3}
fail() {
    echo "tfpipe bootstrap: $1" >&2
    mkdir -p "$(dirname "$msg")" 2>/dev/null && printf '%s\n' "tfpipe bootstrap: $1" > "$msg" 2>/dev/null
    exit 1
}
"$py" -c 'import sys; sys.exit(0 if sys.version_info >= (3, 10) else 1)' 2>/dev/null ||
    fail "$py is missing or older than 3.10: use an image with Python >= 3.10 and pip"
wheel=$(ls "$code_dir"/tfpipe-*.whl 2>/dev/null | head -n 1)
[ -n "$wheel" ] || fail "no tfpipe wheel in $code_dir"
extras=${TFPIPE_EXTRAS:-s3}
# shellcheck disable=SC2086  # TFPIPE_PIP_ARGS holds several words on purpose
"$py" -m pip install --quiet --disable-pip-version-check --no-input ${TFPIPE_PIP_ARGS:-} "$wheel[$extras]" ||
    fail "pip install of $(basename "$wheel")[$extras] failed (the job's log has pip's output)"
if [ -z "${TMPDIR:-}" ] && mkdir -p /opt/ml/processing/tmp 2>/dev/null; then
    export TMPDIR=/opt/ml/processing/tmp  # shards are staged on the job's storage volume
fi
# -v: INFO logs (who does what, parts, waits) go to the job's CloudWatch log
exec "$py" -c 'import sys; from converters.cli import main; sys.exit(main(["-v", "processing", "run", *sys.argv[1:]]))' "$@"
"""


def project_root() -> str:
    """The source tree of the tfpipe that runs here (the folder holding setup.cfg next to ``converters/``)."""
    here = os.path.abspath(__file__)  # <root>/converters/engines/processing/launch.py
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(here))))
    if not all(os.path.exists(os.path.join(root, f)) for f in ("setup.cfg", "pyproject.toml")):
        raise TfpipeError(f"cannot build a tfpipe wheel: {root} is not a tfpipe source tree (tfpipe was installed "
                          "from a wheel): pass --wheel PATH with a tfpipe wheel")
    return root


def build_wheel(dest_dir: str) -> str:
    """Build a wheel of the tfpipe source that runs here into ``dest_dir`` (from a clean copy of the packages,
    so no stale ``build/`` folder leaks into it); returns its path."""
    root = project_root()
    with tempfile.TemporaryDirectory(prefix="tfpipe-wheel-src-") as src:
        for name in ("setup.cfg", "pyproject.toml", "README.md"):
            if os.path.exists(os.path.join(root, name)):
                shutil.copy2(os.path.join(root, name), src)
        for pkg in ("converters", "sharding", "pipeline", "bench"):
            if os.path.isdir(os.path.join(root, pkg)):
                shutil.copytree(os.path.join(root, pkg), os.path.join(src, pkg),
                                ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
        os.makedirs(dest_dir, exist_ok=True)
        cmd = [sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "--quiet",
               "--disable-pip-version-check", "-w", dest_dir, src]
        proc = subprocess.run(cmd, capture_output=True, text=True)
        if proc.returncode != 0:
            last = (proc.stderr.strip().splitlines() or ["(no output)"])[-1]
            raise TfpipeError(f"building the tfpipe wheel failed ({last}); pass --wheel PATH with a tfpipe wheel")
    wheels = sorted(f for f in os.listdir(dest_dir) if f.startswith("tfpipe-") and f.endswith(".whl"))
    if not wheels:
        raise TfpipeError(f"pip built no tfpipe wheel in {dest_dir}; pass --wheel PATH")
    return os.path.join(dest_dir, wheels[-1])


def upload_code(code_uri: str, wheel: str, *, endpoint_url: str | None = None) -> list[str]:
    """Put the wheel and the bootstrap script under ``code_uri``; returns their s3:// URLs."""
    from converters.storage.s3 import S3Storage

    if not os.path.basename(wheel).startswith("tfpipe-") or not wheel.endswith(".whl"):
        raise TfpipeError(f"{wheel}: expected a tfpipe wheel (tfpipe-*.whl)")
    storage = S3Storage(code_uri, endpoint_url=endpoint_url)
    stale = [n for n in storage.list() if n.startswith("tfpipe-") and n.endswith(".whl")]
    for n in stale:  # exactly one wheel: the bootstrap installs the first it finds
        storage.delete(n)
    storage.upload_file(wheel, os.path.basename(wheel))
    storage.write_bytes_atomic(BOOTSTRAP_NAME, BOOTSTRAP.encode())
    return [f"{storage.url}/{os.path.basename(wheel)}", f"{storage.url}/{BOOTSTRAP_NAME}"]


def sagemaker_client(*, endpoint_url: str | None = None, region: str | None = None):
    try:
        import boto3
    except ImportError:  # pragma: no cover - boto3 is an extra
        raise TfpipeError("tfpipe processing launch needs boto3: pip install 'tfpipe[s3]'") from None
    from converters.storage.s3 import sagemaker_endpoint

    session = boto3.session.Session()
    region = region or session.region_name
    if not region:
        raise TfpipeError("no AWS region: set AWS_DEFAULT_REGION (or a profile's region) or pass --region")
    return session.client("sagemaker", endpoint_url=sagemaker_endpoint(endpoint_url), region_name=region)


def _call(what: str, fn, **kwargs):
    from botocore import exceptions as bx

    try:
        return fn(**kwargs)
    except bx.ClientError as exc:
        err = exc.response.get("Error", {})
        raise TfpipeError(f"{what} failed: {err.get('Code', '?')}: {err.get('Message', exc)}") from None
    except bx.BotoCoreError as exc:
        raise TfpipeError(f"{what} failed: {exc}") from None


def create_job(client, request: dict) -> str:
    """Send the (already checked) request; returns the job's ARN."""
    return _call("CreateProcessingJob", client.create_processing_job, **request)["ProcessingJobArn"]


def wait_job(client, name: str, *, poll: float = 30.0, on_status: Callable[[dict, float], None] | None = None,
             clock: Callable[[], float] = time.monotonic, sleep: Callable[[float], None] = time.sleep) -> dict:
    """Poll ``DescribeProcessingJob`` until the job ends; ``on_status(description, elapsed seconds)`` after
    every poll. Returns the description when Completed; raises one ``TfpipeError`` line with the job's
    ``FailureReason`` (and ``ExitMessage``) when it Failed or was Stopped."""
    start = clock()
    while True:
        desc = _call("DescribeProcessingJob", client.describe_processing_job, ProcessingJobName=name)
        status = desc.get("ProcessingJobStatus", "?")
        if on_status is not None:
            on_status(desc, clock() - start)
        if status == "Completed":
            return desc
        if status in TERMINAL:
            reason = " ".join(str(desc.get("FailureReason") or "no FailureReason given").split())
            exit_msg = " ".join(str(desc.get("ExitMessage") or "").split())
            more = f" (exit message: {exit_msg})" if exit_msg and exit_msg not in reason else ""
            raise TfpipeError(f"processing job {name} {status.lower()}: {reason}{more}")
        sleep(poll)
