"""Who is who in a training cluster: hosts, workers per host, this process's rank, and the input channels.

``Topology.from_env()`` reads, lowest precedence first: SageMaker (``SM_*`` variables,
``/opt/ml/input/config/resourceconfig.json`` and ``inputdataconfig.json``, or a processing job's
``/opt/ml/config/resourceconfig.json``), ``TF_CONFIG``, Horovod/Open MPI (``HOROVOD_*``,
``OMPI_COMM_WORLD_*``); explicit keyword arguments override all of them. No TensorFlow here.
"""
from __future__ import annotations

import json
import logging
import os
from dataclasses import dataclass, field
from typing import Any, Mapping

from converters.util.checks import is_integral, set_int
from converters.util.errors import TfpipeError

from .groups import InstanceGroups, parse_instance_groups

__all__ = ["ChannelConfig", "Topology", "INPUT_MODES", "S3_DISTRIBUTIONS", "MAX_CHANNELS",
           "SAGEMAKER_CONFIG_DIR", "PROCESSING_CONFIG_DIR"]

log = logging.getLogger(__name__)

INPUT_MODES = ("File", "Pipe", "FastFile")
S3_DISTRIBUTIONS = ("FullyReplicated", "ShardedByS3Key")
MAX_CHANNELS = 20  # a SageMaker training job has at most 20 input channels
SAGEMAKER_CONFIG_DIR = "/opt/ml/input/config"
PROCESSING_CONFIG_DIR = "/opt/ml/config"


@dataclass(frozen=True)
class ChannelConfig:
    """One input channel: how SageMaker delivers it (``input_mode``) and how it splits it across hosts."""

    input_mode: str = "File"
    s3_distribution: str = "FullyReplicated"

    def __post_init__(self):
        if self.input_mode not in INPUT_MODES:
            raise ValueError(f"input_mode must be one of {', '.join(INPUT_MODES)}, got {self.input_mode!r}")
        if self.s3_distribution not in S3_DISTRIBUTIONS:
            raise ValueError(f"s3_distribution must be one of {', '.join(S3_DISTRIBUTIONS)}, "
                             f"got {self.s3_distribution!r}")

    @property
    def pipe(self) -> bool:
        return self.input_mode == "Pipe"

    @property
    def sharded(self) -> bool:
        return self.s3_distribution == "ShardedByS3Key"


@dataclass(frozen=True)
class Topology:
    """A homogeneous cluster: ``len(hosts)`` hosts with ``workers_per_host`` data-parallel workers each.

    In a SageMaker heterogeneous cluster, ``instance_groups`` holds every group and ``hosts`` is this host's
    group (the training group's hosts are its data-parallel world; a data group's hosts run tf.data service).

    Ranks are host-major: ``rank == hosts.index(current_host) * workers_per_host + local_rank``
    (what ``mpirun``/Horovod on SageMaker gives).
    """

    hosts: tuple[str, ...] = ("localhost",)
    current_host: str | None = None
    workers_per_host: int = 1
    rank: int = 0
    local_rank: int | None = None
    channels: Mapping[str, ChannelConfig] = field(default_factory=dict)
    gpus_per_host: int | None = None
    cpus_per_host: int | None = None
    instance_groups: InstanceGroups | None = None

    def __post_init__(self):
        hosts = _host_names(self.hosts)
        if not hosts:
            raise ValueError("hosts must not be empty")
        for h in hosts:
            if not isinstance(h, str) or not h:
                raise ValueError(f"host names must be non-empty strings, got {h!r}")
        if len(set(hosts)) != len(hosts):
            dup = sorted({h for h in hosts if hosts.count(h) > 1})
            raise ValueError(f"hosts must be unique, {', '.join(dup)} repeated")
        object.__setattr__(self, "hosts", hosts)
        set_int(self, "workers_per_host", minimum=1)
        world = len(hosts) * self.workers_per_host
        set_int(self, "rank", minimum=0, maximum=world - 1,
                must=f"in [0, {world}) for {len(hosts)} host(s) x {self.workers_per_host} worker(s)")
        host_index, local = divmod(self.rank, self.workers_per_host)
        if self.current_host is None:
            object.__setattr__(self, "current_host", hosts[host_index])
        elif self.current_host not in hosts:
            raise ValueError(f"current_host {self.current_host!r} is not one of hosts {list(hosts)}")
        if self.local_rank is None:
            object.__setattr__(self, "local_rank", local)
        else:
            set_int(self, "local_rank", minimum=0, maximum=self.workers_per_host - 1,
                    must=f"in [0, {self.workers_per_host})")
        if self.local_rank != local or hosts.index(self.current_host) != host_index:
            raise ValueError(
                f"rank {self.rank} with {self.workers_per_host} worker(s) per host belongs to host "
                f"{hosts[host_index]!r} local rank {local}, but current_host={self.current_host!r} "
                f"local_rank={self.local_rank}: ranks must be host-major (rank = host index x workers per host "
                f"+ local rank)")
        channels = dict(self.channels or {})
        if len(channels) > MAX_CHANNELS:
            raise ValueError(f"{len(channels)} channels: a SageMaker training job has at most {MAX_CHANNELS}")
        for name, cfg in channels.items():
            if not isinstance(cfg, ChannelConfig):
                raise ValueError(f"channel {name!r}: expected a ChannelConfig, got {cfg!r}")
        object.__setattr__(self, "channels", dict(sorted(channels.items())))
        for attr in ("gpus_per_host", "cpus_per_host"):
            set_int(self, attr, minimum=0, none=True)
        if self.instance_groups is not None and not isinstance(self.instance_groups, InstanceGroups):
            raise ValueError(f"instance_groups must be an InstanceGroups or None, got {self.instance_groups!r}")

    __hash__ = None  # channels is a dict

    # -- derived ------------------------------------------------------------------------------------
    @property
    def world_size(self) -> int:
        return len(self.hosts) * self.workers_per_host

    @property
    def num_hosts(self) -> int:
        return len(self.hosts)

    @property
    def host_index(self) -> int:
        return self.hosts.index(self.current_host)

    @property
    def current_group(self) -> str | None:
        """This host's instance group in a heterogeneous cluster (None in a homogeneous one)."""
        return self.instance_groups.current_group if self.instance_groups is not None else None

    @property
    def is_chief(self) -> bool:
        return self.rank == 0

    def channel(self, name: str | None = None) -> ChannelConfig:
        """The named channel's config; with no name, the only channel or ``train``; default File mode."""
        if name is None:
            if len(self.channels) == 1:
                return next(iter(self.channels.values()))
            name = "train"
        return self.channels.get(name, ChannelConfig())

    def to_json(self) -> dict:
        return {
            "hosts": list(self.hosts), "current_host": self.current_host,
            "workers_per_host": self.workers_per_host, "world_size": self.world_size, "rank": self.rank,
            "local_rank": self.local_rank, "gpus_per_host": self.gpus_per_host,
            "cpus_per_host": self.cpus_per_host,
            "channels": {k: {"input_mode": c.input_mode, "s3_distribution": c.s3_distribution}
                         for k, c in self.channels.items()},
            "instance_groups": self.instance_groups.to_json() if self.instance_groups is not None else None,
        }

    # -- from the environment -----------------------------------------------------------------------
    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None, config_dir: str = SAGEMAKER_CONFIG_DIR, *,
                 processing_config_dir: str = PROCESSING_CONFIG_DIR, **overrides: Any) -> "Topology":
        """Build the topology from SageMaker, ``TF_CONFIG`` and Horovod/MPI settings; ``overrides``
        (any field: hosts, current_host, workers_per_host, rank, local_rank, channels, gpus_per_host,
        cpus_per_host) win over the environment. Bad values raise ``TfpipeError`` naming their source."""
        unknown = sorted(set(overrides) - _FIELDS)
        if unknown:
            raise TypeError(f"unknown Topology field(s): {', '.join(unknown)} (valid: {', '.join(sorted(_FIELDS))})")
        env = os.environ if env is None else env
        found: dict[str, Any] = {}
        _sagemaker(env, config_dir, processing_config_dir, found)
        _tf_config(env, found)
        _mpi(env, found)
        given = {k: v for k, v in overrides.items() if v is not None}
        if "rank" in given:  # placement given explicitly: derive host and local rank from it
            for k in ("current_host", "local_rank"):
                if k not in given:
                    found.pop(k, None)
        elif given.keys() & {"hosts", "workers_per_host"}:
            found.pop("_world_size", None)
            if found.get("_rank_from"):  # an MPI/TF_CONFIG rank is this process's identity: keep it
                drop = ("current_host", "local_rank")
            else:  # SageMaker: keep this host, re-derive the rank
                drop = ("rank", "local_rank")
            for k in drop:
                if k not in given:
                    found.pop(k, None)
        if "hosts" in given:
            try:
                given["hosts"] = _host_names(given["hosts"])
            except ValueError as exc:
                raise TfpipeError(str(exc)) from None
        found.update(given)
        if found.get("hosts") is None:
            wph = found.get("workers_per_host", 1)
            size = found.get("_world_size")
            if size is not None:
                if size % wph:
                    raise TfpipeError(f"world size {size} is not a multiple of the local size {wph} "
                                      "(heterogeneous hosts are not supported)")
                found["hosts"] = tuple(f"host-{i}" for i in range(size // wph))
                found.setdefault("current_host", found["hosts"][found.get("rank", 0) // wph])
            else:
                found["hosts"] = (found.get("current_host") or "localhost",)
        size = found.pop("_world_size", None)
        found.pop("_rank_from", None)
        if size is not None and len(_host_names(found["hosts"])) * found.get("workers_per_host", 1) != size:
            raise TfpipeError(f"inconsistent cluster settings: MPI/Horovod world size {size} != "
                              f"{len(found['hosts'])} host(s) x {found.get('workers_per_host', 1)} worker(s) per host")
        if "hosts" in given and "current_host" not in given and found.get("current_host") not in found["hosts"]:
            found.pop("current_host", None)
        if "rank" not in found and found.get("current_host") in found["hosts"]:
            wph = found.get("workers_per_host", 1)
            found["rank"] = found["hosts"].index(found["current_host"]) * wph + found.get("local_rank", 0)
        try:
            topo = cls(**found)
        except ValueError as exc:
            raise TfpipeError(f"inconsistent cluster settings: {exc}") from None
        log.debug("topology: %s", topo.to_json())
        return topo


_FIELDS = {"hosts", "current_host", "workers_per_host", "rank", "local_rank", "channels", "gpus_per_host",
           "cpus_per_host", "instance_groups"}


def _host_names(hosts: Any) -> tuple[str, ...]:
    """A host count becomes SageMaker-style names ``algo-1 .. algo-N``; a name or list of names a tuple."""
    if is_integral(hosts):
        hosts = int(hosts)
        if hosts < 1:
            raise ValueError(f"hosts must be a positive count or a list of names, got {hosts}")
        return tuple(f"algo-{i + 1}" for i in range(hosts))
    return (hosts,) if isinstance(hosts, str) else tuple(hosts)


def _json(text: str, source: str) -> Any:
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        raise TfpipeError(f"{source} is not valid JSON: {exc}") from None


def _read_json(path: str) -> Any | None:
    try:
        with open(path, encoding="utf-8") as f:
            text = f.read()
    except FileNotFoundError:
        return None
    except OSError as exc:
        raise TfpipeError(f"cannot read {path}: {exc}") from None
    return _json(text, path)


def _int(env: Mapping[str, str], key: str) -> int | None:
    v = env.get(key)
    if v is None or v == "":
        return None
    try:
        return int(v)
    except ValueError:
        raise TfpipeError(f"environment variable {key}={v!r} is not an integer") from None


def _str_list(value: Any, source: str) -> tuple[str, ...]:
    if not isinstance(value, list) or not all(isinstance(h, str) for h in value):
        raise TfpipeError(f"{source} must be a JSON list of host names, got {value!r}")
    return tuple(value)


def _channels(cfg: Any, source: str) -> dict[str, ChannelConfig]:
    if not isinstance(cfg, dict):
        raise TfpipeError(f"{source} must be a JSON object of channels, got {type(cfg).__name__}")
    out = {}
    for name, c in cfg.items():
        if not isinstance(c, dict):
            raise TfpipeError(f"{source}: channel {name!r} must be an object, got {c!r}")
        try:
            out[name] = ChannelConfig(c.get("TrainingInputMode", "File"),
                                      c.get("S3DistributionType", "FullyReplicated"))
        except ValueError as exc:
            raise TfpipeError(f"{source}: channel {name!r}: {exc}") from None
    return out


def _sagemaker(env, config_dir, processing_config_dir, found) -> None:
    res = None
    groups = None
    for d in (config_dir, processing_config_dir):
        if d:
            path = os.path.join(d, "resourceconfig.json")
            res = _read_json(path)
            if res is not None:
                if not isinstance(res, dict):
                    raise TfpipeError(f"{path} must be a JSON object")
                if "hosts" in res:
                    found["hosts"] = _str_list(res["hosts"], f"{path} 'hosts'")
                if "current_host" in res:
                    found["current_host"] = res["current_host"]
                groups = parse_instance_groups(res, path)
                break
    if env.get("SM_HOSTS"):
        found["hosts"] = _str_list(_json(env["SM_HOSTS"], "SM_HOSTS"), "SM_HOSTS")
    if env.get("SM_CURRENT_HOST"):
        found["current_host"] = env["SM_CURRENT_HOST"]
    if groups is not None:  # a heterogeneous cluster: this host's world is its own instance group
        found["instance_groups"] = groups
        if groups.current_group is not None:
            found["hosts"] = groups.hosts_of(groups.current_group)
    gpus, cpus = _int(env, "SM_NUM_GPUS"), _int(env, "SM_NUM_CPUS")
    if gpus is not None:
        found["gpus_per_host"] = gpus
    if cpus is not None:
        found["cpus_per_host"] = cpus
    channels: dict[str, ChannelConfig] = {}
    if env.get("SM_CHANNELS"):
        names = _json(env["SM_CHANNELS"], "SM_CHANNELS")
        if not isinstance(names, list) or not all(isinstance(n, str) for n in names):
            raise TfpipeError(f"SM_CHANNELS must be a JSON list of channel names, got {names!r}")
        channels = {n: ChannelConfig() for n in names}
    cfg_path = os.path.join(config_dir, "inputdataconfig.json") if config_dir else None
    cfg = _read_json(cfg_path) if cfg_path else None
    source = cfg_path
    if cfg is None and env.get("SM_INPUT_DATA_CONFIG"):
        cfg, source = _json(env["SM_INPUT_DATA_CONFIG"], "SM_INPUT_DATA_CONFIG"), "SM_INPUT_DATA_CONFIG"
    if cfg is not None:
        channels.update(_channels(cfg, source))
    if channels:
        found["channels"] = channels


def _tf_config(env, found) -> None:
    if not env.get("TF_CONFIG"):
        return
    cfg = _json(env["TF_CONFIG"], "TF_CONFIG")
    try:
        cluster, task = cfg["cluster"], cfg["task"]
        kind, index = task["type"], int(task["index"])
        workers = list(cluster.get("chief", [])) + list(cluster.get("worker", []))
    except (KeyError, TypeError, ValueError) as exc:
        raise TfpipeError(f"TF_CONFIG must have cluster.{{chief,worker}} and task.{{type,index}}: {exc!r}") from None
    if kind not in ("chief", "worker"):
        raise TfpipeError(f"TF_CONFIG task type {kind!r} reads no training data: only chief and worker tasks "
                          "have a place in a data topology")
    position = index + (len(cluster.get("chief", [])) if kind == "worker" else 0)
    if not 0 <= position < len(workers):
        raise TfpipeError(f"TF_CONFIG task {kind}:{index} is not in its cluster ({len(workers)} worker(s))")
    hosts = [w.rsplit(":", 1)[0] for w in workers]
    if len(set(hosts)) != len(hosts):
        hosts = list(workers)  # several workers on one machine: each address is its own "host"
    found.update(hosts=tuple(hosts), current_host=hosts[position], workers_per_host=1, rank=position,
                 _rank_from="TF_CONFIG")
    found.pop("local_rank", None)


def _mpi(env, found) -> None:
    for keys in (("HOROVOD_RANK", "HOROVOD_SIZE", "HOROVOD_LOCAL_RANK", "HOROVOD_LOCAL_SIZE"),
                 ("OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE", "OMPI_COMM_WORLD_LOCAL_RANK",
                  "OMPI_COMM_WORLD_LOCAL_SIZE")):
        rank, size, local_rank, local_size = (_int(env, k) for k in keys)
        if rank is None and size is None:
            continue
        if rank is None or size is None:
            raise TfpipeError(f"{keys[0]} and {keys[1]} must be set together")
        if local_size is None:
            if local_rank is not None:
                raise TfpipeError(f"{keys[2]} is set but {keys[3]} is not")
            local_size = found.get("workers_per_host", 1)
        if local_size < 1 or size < 1:
            raise TfpipeError(f"{keys[1]}={size} and {keys[3]}={local_size} must be positive")
        if local_rank is None:
            local_rank = rank % local_size
        found.update(rank=rank, workers_per_host=local_size, local_rank=local_rank, _world_size=size,
                     _rank_from=keys[0])
        hosts = found.get("hosts")
        if hosts is not None and "current_host" not in found and rank // local_size < len(hosts):
            found["current_host"] = hosts[rank // local_size]
        return
