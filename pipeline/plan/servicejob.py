"""What a rank reading through a tf.data service asks of it, and why (pure: the spec and the environment in,
values and reasons out; ``tfpipe pipeline explain`` prints the reasons, ``pipeline.graph.service`` builds them).

* Processing: ``ShardingPolicy.DYNAMIC`` over the rank's *files*, one job per rank. The dispatcher hands each
  file to whichever worker asks next, so a file is read by one worker (OFF would make every worker produce the
  rank's whole graph: each record once per worker); the static policies (FILE, DATA, FILE_OR_DATA) need a fixed
  worker list, so no worker could join or leave. One job per rank, not one shared job: consumers of a shared
  DYNAMIC job get unequal shares, and unequal steps hang all-reduce.
* Split across ranks: per-rank file lists (a sharding plan) read as they are; a record-level ``shard(n, i)``
  becomes ``shard(n, i)`` of every file on the worker (records ``k ≡ i (mod n)`` of each file), so which
  worker reads a file never changes which rank gets a record.
* Equal steps: the workers' batches are re-cut to ``batch_size`` here (each worker's stream ends on a short
  batch) and the rank takes the smallest rank's steps.
* Compression: off on a fast link (a private or loopback address, a cluster host name), where decompressing
  costs the trainer more CPU than the link saves; on across public addresses.
"""
from __future__ import annotations

import hashlib
import ipaddress
import json
import re
from dataclasses import dataclass
from typing import Any, Mapping

from sharding.epochs import epoch_batches
from sharding.plan import shard_count

from ..spec.serviceopts import parse_service

__all__ = ["ServiceChoice", "service_choice", "base_job_name", "compression", "service_steps", "fast_link",
           "idle_workers_warning"]

_CLUSTER_HOST = re.compile(r"(algo-\d+|localhost|[^.]+|.+\.(internal|local|cluster\.local))", re.I)


@dataclass(frozen=True)
class ServiceChoice:
    """What ``distribute`` is given for one rank, and why (``explain``)."""

    job_name: str
    job_why: str
    compression: str | None          # tf.data's value: "AUTO" (snappy on the workers) or None
    compression_why: str
    steps: int | None                # the per-epoch take(steps) after the re-cut, None: every batch
    steps_why: str
    split: str                       # how this rank's records reach the workers
    split_why: str


def base_job_name(spec: Any, env: Mapping[str, str]) -> tuple[str, str]:
    """The name every rank of one run shares, and where it came from: ``service_job``, else the SageMaker
    training job's name, else a digest of ``TF_CONFIG``'s cluster, else the manifest fingerprint and seed."""
    if spec.service_job:
        return spec.service_job, "service_job"
    sm = env.get("TRAINING_JOB_NAME") or _sm_job(env.get("SM_TRAINING_ENV"))
    if sm:
        return f"tfpipe-{_safe(sm)}", "the SageMaker training job's name (TRAINING_JOB_NAME)"
    cluster = _tf_cluster(env.get("TF_CONFIG"))
    if cluster:
        digest = hashlib.sha256(json.dumps(cluster, sort_keys=True).encode()).hexdigest()[:12]
        return f"tfpipe-{digest}", "a digest of TF_CONFIG's cluster (the same on every rank of the run)"
    key = f"{spec.manifest_sha256 or ','.join(spec.files)}|{spec.seed}"
    return (f"tfpipe-{hashlib.sha256(key.encode()).hexdigest()[:12]}",
            "a digest of the manifest and seed (no SageMaker job name or TF_CONFIG here)")


def _safe(name: str) -> str:
    return re.sub(r"[^A-Za-z0-9._-]", "-", name)[:100]


def _sm_job(raw: str | None) -> str | None:
    try:
        return json.loads(raw).get("job_name") if raw else None
    except (ValueError, AttributeError):
        return None


def _tf_cluster(raw: str | None) -> Any:
    try:
        return json.loads(raw).get("cluster") if raw else None
    except (ValueError, AttributeError):
        return None


def fast_link(host: str) -> bool:
    """A dispatcher on this host, a private network or a cluster host name (``algo-2``, ``*.internal``)."""
    try:
        ip = ipaddress.ip_address(host)
    except ValueError:
        return bool(_CLUSTER_HOST.fullmatch(host))
    return ip.is_private or ip.is_loopback or ip.is_link_local


def compression(spec: Any) -> tuple[str | None, str]:
    """tf.data's ``compression`` and why."""
    asked = spec.service_compression
    if asked == "on":
        return "AUTO", "service_compression='on'"
    if asked == "off":
        return None, "service_compression='off'"
    host, _ = parse_service(spec.service)
    if fast_link(host):
        return None, (f"off: {host} is on a fast link (private, loopback or cluster address), where decompressing "
                      f"costs the trainer more CPU than the link saves (docs/offload.md)")
    return "AUTO", f"on: {host} is a public address; snappy on the workers saves link bandwidth"


def _rank_records(file_records: tuple[int, ...], n: int, i: int) -> int:
    return sum(shard_count(c, n, i) for c in file_records)


def service_steps(spec: Any) -> tuple[int | None, str]:
    """The per-epoch steps of this rank under the service, and why."""
    n = spec.num_shards
    if n == 1:
        if spec.steps is not None:
            return spec.steps, "the plan's (or explicit) steps: equal on every rank"
        return None, "single rank: every batch"
    if len(spec.file_records) != len(spec.files):
        raise ValueError("service with a record-level shard (num_shards > 1) needs the records of every file "
                         "(file_records; from_manifest fills them)")
    smallest = min(_rank_records(spec.file_records, n, i) for i in range(n))
    steps = epoch_batches(smallest, spec.batch_size, spec.drop_remainder)
    why = f"equal steps on every rank: the smallest rank has {smallest} records"
    if spec.steps is not None and spec.steps < steps:
        return spec.steps, "explicit steps"
    mine = _rank_records(spec.file_records, n, spec.shard_index)
    return steps, why + f"; this rank uses {min(mine, steps * spec.batch_size)} of its {mine} per epoch"


def service_choice(spec: Any, env: Mapping[str, str]) -> ServiceChoice:
    """Everything ``distribute`` needs for this rank, with the reasons."""
    base, where = base_job_name(spec, env)
    if spec.num_shards > 1:
        who = f"shard{spec.shard_index}of{spec.num_shards}"
        split = f"every file, records k % {spec.num_shards} == {spec.shard_index} of each"
        split_why = ("record-level shard applied to each file on the worker: a record's rank does not depend on "
                     "which worker reads its file")
    else:
        who = "files-" + hashlib.sha256("\n".join(spec.files).encode()).hexdigest()[:8]
        split = f"this rank's {len(spec.files)} file(s)"
        split_why = "a per-rank file list (or a single rank): each file is read once, by one worker"
    comp, comp_why = compression(spec)
    steps, steps_why = service_steps(spec)
    return ServiceChoice(job_name=f"{base}-{who}", job_why=f"The run's name from {where}",
                         compression=comp, compression_why=comp_why, steps=steps, steps_why=steps_why,
                         split=split, split_why=split_why)


def idle_workers_warning(files: int, workers: int | None) -> str | None:
    """The warning ``explain`` prints when a service read leaves workers idle: DYNAMIC sharding hands each of
    the rank's ``files`` to one worker, so at most ``files`` of the ``workers`` registered ones (None: unknown,
    then only a one-file set is warned of) ever read. None when every worker can be busy."""
    if workers is not None and files < workers:
        return (f"warning: {workers - files} of the service's {workers} workers will sit idle: each of this "
                f"rank's {files} file(s) is read by one worker; reshard into at least {workers} files "
                f"(tfpipe reshard --num-shards {workers}) to use them all")
    if workers is None and files == 1:
        return ("warning: this rank reads one file, so one worker of the service reads it and any others sit "
                "idle; reshard into at least as many files as workers (tfpipe reshard --num-shards N)")
    return None
