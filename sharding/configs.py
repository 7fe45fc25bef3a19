"""Cluster configuration dicts: TF_CONFIG for MultiWorkerMirroredStrategy, SageMaker estimator
``distribution`` settings, and SageMaker input channel definitions (one Pipe channel per worker)."""
from __future__ import annotations

from typing import Any

from converters.util.checks import as_int

from .plan import ShardPlan
from .topology import INPUT_MODES, MAX_CHANNELS, Topology

__all__ = ["tf_config", "sagemaker_distribution", "pipe_channels", "channel_manifest", "channel_manifests",
           "training_inputs", "DISTRIBUTIONS", "DEFAULT_PORT"]

DEFAULT_PORT = 2222
DISTRIBUTIONS = ("horovod", "mpi", "parameter_server", "multi_worker_mirrored")


def tf_config(topology: Topology | None = None, *, port: int = DEFAULT_PORT) -> dict:
    """``TF_CONFIG`` for MultiWorkerMirroredStrategy: one worker per host (it drives all of the host's GPUs),
    this host's index as the task index. Set it with ``os.environ["TF_CONFIG"] = json.dumps(...)`` before
    creating the strategy. Default topology: ``Topology.from_env()`` (SageMaker's ``SM_HOSTS``...)."""
    if not 0 < port < 65536:
        raise ValueError(f"port must be in 1..65535, got {port}")
    topology = topology or Topology.from_env()
    return {"cluster": {"worker": [f"{h}:{port}" for h in topology.hosts]},
            "task": {"type": "worker", "index": topology.host_index}}


def sagemaker_distribution(kind: str, *, processes_per_host: int | None = None, topology: Topology | None = None,
                           custom_mpi_options: str | None = None) -> dict:
    """The SageMaker TensorFlow estimator's ``distribution`` argument.

    ``"horovod"``/``"mpi"``: MPI with ``processes_per_host`` (default: the topology's GPUs per host, else its
    workers per host); ``"parameter_server"``; ``"multi_worker_mirrored"``."""
    if kind in ("horovod", "mpi"):
        if processes_per_host is None and topology is not None:
            processes_per_host = topology.gpus_per_host or topology.workers_per_host
        if processes_per_host is None:
            raise ValueError(f"{kind}: processes_per_host is required (one process per GPU of a host, e.g. 8 on "
                             "ml.p3.16xlarge)")
        processes_per_host = as_int(processes_per_host, "processes_per_host", minimum=1)
        mpi: dict[str, Any] = {"enabled": True, "processes_per_host": processes_per_host}
        if custom_mpi_options:
            mpi["custom_mpi_options"] = custom_mpi_options
        return {"mpi": mpi}
    if processes_per_host is not None or custom_mpi_options is not None:
        raise ValueError(f"{kind}: processes_per_host and custom_mpi_options apply to horovod/mpi only")
    if kind == "parameter_server":
        return {"parameter_server": {"enabled": True}}
    if kind == "multi_worker_mirrored":
        return {"multi_worker_mirrored_strategy": {"enabled": True}}
    raise ValueError(f"unknown distribution {kind!r}: valid ones are {', '.join(DISTRIBUTIONS)}")


def channel_manifest(files: list[str] | tuple[str, ...], s3_uri: str) -> list:
    """A SageMaker manifest file (S3DataType ``ManifestFile``) listing ``files`` under ``s3_uri``.
    Upload ``json.dumps(...)`` of it to the channel's ``S3Uri``."""
    return [{"prefix": s3_uri.rstrip("/") + "/"}, *files]


def pipe_channels(plan_or_workers: ShardPlan | int, s3_uri: str, *, name: str = "train", input_mode: str = "Pipe",
                  s3_sharded: bool | None = None, manifests_uri: str | None = None) -> list[dict]:
    """Channel definitions (``InputDataConfig`` entries of CreateTrainingJob) for Pipe mode.

    From a ``ShardPlan``: one entry per channel of the plan, each pointing at a SageMaker manifest file
    ``<manifests_uri>/<channel>.manifest`` (default ``<s3_uri>/channels``) that lists exactly the channel's
    shards (``channel_manifests`` gives the contents): a plain ``S3Prefix`` would also stream ``index.json``
    into the FIFO. From an integer ``wph``: channels ``<name>_0 .. <name>_<wph-1>`` reading prefixes
    ``<s3_uri>/<name>_<k>/`` (one shard set per prefix). ``s3_sharded`` defaults to the plan's strategy."""
    if input_mode not in INPUT_MODES:
        raise ValueError(f"input_mode must be one of {', '.join(INPUT_MODES)}, got {input_mode!r}")
    if not str(s3_uri).startswith("s3://"):
        raise ValueError(f"s3_uri must be an s3:// URL, got {s3_uri!r}")
    base = s3_uri.rstrip("/")
    if isinstance(plan_or_workers, ShardPlan):
        if s3_sharded is None:
            s3_sharded = plan_or_workers.strategy in ("s3_sharded", "channel_per_worker_s3")
        manifests_uri = (manifests_uri or f"{base}/channels").rstrip("/")
        entries = [(ch, "ManifestFile", f"{manifests_uri}/{ch}.manifest") for ch in plan_or_workers.channels]
    else:
        wph = plan_or_workers
        wph = as_int(wph, "workers per host", minimum=1)
        entries = [(f"{name}_{k}", "S3Prefix", f"{base}/{name}_{k}/") for k in range(wph)]
    if len(entries) > MAX_CHANNELS:
        raise ValueError(f"{len(entries)} channels: a SageMaker training job has at most {MAX_CHANNELS}")
    dist = "ShardedByS3Key" if s3_sharded else "FullyReplicated"
    return [{"ChannelName": ch, "InputMode": input_mode, "RecordWrapperType": "None",
             "DataSource": {"S3DataSource": {"S3DataType": kind, "S3Uri": uri, "S3DataDistributionType": dist}}}
            for ch, kind, uri in entries]


def channel_manifests(plan: ShardPlan, s3_uri: str) -> dict[str, list]:
    """Per channel of ``plan``, the SageMaker manifest-file content listing its shards under ``s3_uri``."""
    return {ch: channel_manifest(files, s3_uri) for ch, files in plan.channels.items()}


def training_inputs(channels: list[dict]) -> dict[str, dict]:
    """Keyword arguments for ``sagemaker.inputs.TrainingInput`` per channel (for ``estimator.fit(inputs)``)."""
    out = {}
    for c in channels:
        src = c["DataSource"]["S3DataSource"]
        out[c["ChannelName"]] = {"s3_data": src["S3Uri"], "distribution": src["S3DataDistributionType"],
                                 "input_mode": c["InputMode"], "s3_data_type": src["S3DataType"]}
    return out
