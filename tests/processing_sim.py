"""Shared by the Processing tests: simulated SageMaker Processing instances, each with its own config dir and
working directory, started at the same time as separate ``tfpipe processing run`` processes (``python -c``, or,
with ``fork=True``, forks of the test process that start as such a process would: ``forked_cli``); and reading a
shard set's records back (downloaded when in S3)."""
from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

from converters.shardset.reader import read_manifest
from converters.tfrecord.reader import read_records

ROOT = Path(__file__).resolve().parents[1]
HOSTS = ("algo-1", "algo-2", "algo-3")
TESTS = str(Path(__file__).resolve().parent)
# botocore's service models parsed once per instance, not once per S3 client (``moto_s3.share_botocore_models``,
# as in the test process): the models are the same files either way
MAIN = (f"import sys\nsys.path.insert(0, {TESTS!r})\ntry:\n    import moto_s3\n"
        "    moto_s3.share_botocore_models()\nexcept ImportError:\n    pass\ndel sys.path[0]\n"
        "from converters.cli import main\nsys.exit(main(sys.argv[1:]))\n")


class Cluster:
    """Config dirs and working directories of simulated instances under ``root``."""

    def __init__(self, root: Path, hosts=HOSTS, *, sharded: bool = True, shared: Path | None = None,
                 fork: bool = False):
        """``sharded``: the input's distribution; ``shared``: one input directory every instance sees (a
        FullyReplicated input), else each instance's own ``in/train``; ``fork``: instances are forks of this
        process (``forked_cli.ForkedMain``), else ``python -c`` processes."""
        self.root, self.hosts, self.sharded, self.shared, self.fork = root, tuple(hosts), sharded, shared, fork

    def dir(self, host: str) -> Path:
        return self.root / host

    def inputs(self, host: str) -> Path:
        d = self.dir(host) / "in" / "train"
        d.mkdir(parents=True, exist_ok=True)
        return d

    def configure(self, host: str, job: str) -> None:
        cfg = self.dir(host) / "config"
        cfg.mkdir(parents=True, exist_ok=True)
        (cfg / "resourceconfig.json").write_text(json.dumps({"current_host": host, "hosts": list(self.hosts),
                                                              "network_interface_name": "eth0"}))
        dist = "ShardedByS3Key" if self.sharded else "FullyReplicated"
        (cfg / "processingjobconfig.json").write_text(json.dumps({
            "ProcessingJobName": job,
            "ProcessingInputs": [{"InputName": "train", "AppManaged": False, "S3Input": {
                "LocalPath": str(self.shared or self.inputs(host)), "S3Uri": "s3://raw/train", "S3DataType": "S3Prefix",
                "S3InputMode": "File", "S3DataDistributionType": dist}}]}))

    def start(self, host: str, command: list[str], *, job: str = "job-1", wait_timeout: float = 120,
              options: tuple = ()):
        self.configure(host, job)
        argv = ["processing", "run", "--config-dir", "config", "--poll", "0.1", "--wait-timeout", str(wait_timeout),
                "--message-file", "message", *options, *command]
        if self.fork:
            from forked_cli import ForkedMain

            return ForkedMain(argv, cwd=self.dir(host))
        argv = [sys.executable, "-c", MAIN, *argv]
        env = {**os.environ, "PYTHONPATH": str(ROOT)}
        return subprocess.Popen(argv, cwd=self.dir(host), env=env, stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, text=True)

    def run(self, command: list[str], *, hosts=None, job: str = "job-1", wait_timeout: float = 120,
            options: tuple = ()):
        """Start the instances at the same time; return {host: (exit code, stdout, stderr, seconds)}."""
        started = {}
        for h in hosts or self.hosts:
            started[h] = (time.monotonic(), self.start(h, command, job=job, wait_timeout=wait_timeout,
                                                       options=options))
        out = {}
        for h, (t0, p) in started.items():
            so, se = p.communicate(timeout=300)
            out[h] = (p.returncode, so, se, time.monotonic() - t0)
        return out


def records_of(url: str, tmp: Path) -> list[bytes]:
    """Every record payload of a shard set (downloaded when in S3), in shard order."""
    from sharding import download

    local = url
    if url.startswith("s3://"):
        local = str(tmp)
        download(url, local)
    m = read_manifest(local)
    return [r for p in m.shard_paths() for r in read_records(p)]
