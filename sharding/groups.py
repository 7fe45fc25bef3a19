"""Instance groups of a SageMaker heterogeneous cluster: which hosts form which group, which group this host is
in, and where a data group's tf.data service dispatcher listens. Pure parsing; no TensorFlow.

``resourceconfig.json`` of a heterogeneous training job::

    {"current_host": "algo-1", "current_group_name": "dnn_group", "hosts": ["algo-1", "algo-2", "algo-3"],
     "instance_groups": [{"instance_group_name": "data_group", "instance_type": "ml.c5.18xlarge",
                          "hosts": ["algo-2", "algo-3"]},
                         {"instance_group_name": "dnn_group", "instance_type": "ml.p4d.24xlarge",
                          "hosts": ["algo-1"]}]}
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Mapping

from converters.util.checks import as_int
from converters.util.errors import TfpipeError

__all__ = ["InstanceGroup", "InstanceGroups", "parse_instance_groups", "service_address", "DEFAULT_SERVICE_PORT"]

DEFAULT_SERVICE_PORT = 5050  # the dispatcher's port unless told otherwise (tfpipe service dispatcher|auto --port)


@dataclass(frozen=True)
class InstanceGroup:
    """One instance group: its name, instance type and hosts, in SageMaker's order."""

    name: str
    hosts: tuple[str, ...]
    instance_type: str | None = None

    def __post_init__(self):
        if not isinstance(self.name, str) or not self.name:
            raise ValueError(f"an instance group's name must be a non-empty string, got {self.name!r}")
        if isinstance(self.hosts, str) or not all(isinstance(h, str) and h for h in self.hosts):
            raise ValueError(f"instance group {self.name!r}: hosts must be a list of host names, got {self.hosts!r}")
        hosts = tuple(self.hosts)
        if not hosts:
            raise ValueError(f"instance group {self.name!r} has no hosts")
        if len(set(hosts)) != len(hosts):
            raise ValueError(f"instance group {self.name!r} lists a host twice: {list(hosts)}")
        object.__setattr__(self, "hosts", hosts)
        if self.instance_type is not None and not isinstance(self.instance_type, str):
            raise ValueError(f"instance group {self.name!r}: instance_type must be a string, "
                             f"got {self.instance_type!r}")


@dataclass(frozen=True)
class InstanceGroups:
    """The groups of a heterogeneous cluster and this host's place in them (``current_group`` is the group
    that lists ``current_host``; None when this host is unknown)."""

    groups: tuple[InstanceGroup, ...]
    current_host: str | None = None
    current_group: str | None = None

    def __post_init__(self):
        groups = tuple(self.groups)
        if not groups or not all(isinstance(g, InstanceGroup) for g in groups):
            raise ValueError(f"groups must be a non-empty list of InstanceGroup, got {self.groups!r}")
        names = [g.name for g in groups]
        if len(set(names)) != len(names):
            raise ValueError(f"instance group names must be unique, got {names}")
        owner: dict[str, str] = {}
        for g in groups:
            for h in g.hosts:
                if h in owner:
                    raise ValueError(f"host {h!r} is in two instance groups: {owner[h]!r} and {g.name!r}")
                owner[h] = g.name
        object.__setattr__(self, "groups", groups)
        if self.current_group is not None and self.current_group not in names:
            raise ValueError(f"current group {self.current_group!r} is not one of the instance groups {names}")
        if self.current_host is not None:
            if self.current_host not in owner:
                raise ValueError(f"current host {self.current_host!r} is in no instance group ({sorted(owner)})")
            if self.current_group is None:
                object.__setattr__(self, "current_group", owner[self.current_host])
            elif owner[self.current_host] != self.current_group:
                raise ValueError(f"current host {self.current_host!r} is in group {owner[self.current_host]!r}, "
                                 f"not in the current group {self.current_group!r}")

    @property
    def names(self) -> tuple[str, ...]:
        return tuple(g.name for g in self.groups)

    def group(self, name: str) -> InstanceGroup:
        """The named group; an unknown name is a ``TfpipeError`` listing the groups."""
        for g in self.groups:
            if g.name == name:
                return g
        raise TfpipeError(f"no instance group {name!r}: the cluster has {', '.join(self.names)}")

    def hosts_of(self, name: str) -> tuple[str, ...]:
        return self.group(name).hosts

    def to_json(self) -> dict:
        return {"current_host": self.current_host, "current_group": self.current_group,
                "groups": [{"name": g.name, "instance_type": g.instance_type, "hosts": list(g.hosts)}
                           for g in self.groups]}


def parse_instance_groups(config: Mapping[str, Any], source: str) -> InstanceGroups | None:
    """The instance groups of a parsed ``resourceconfig.json`` (None for a homogeneous cluster: no
    ``instance_groups``). A malformed entry is a ``TfpipeError`` naming ``source`` and the entry."""
    raw = config.get("instance_groups")
    if raw is None:
        return None
    if not isinstance(raw, list):
        raise TfpipeError(f"{source}: 'instance_groups' must be a list, got {type(raw).__name__}")
    groups = []
    for i, g in enumerate(raw):
        if not isinstance(g, dict) or "instance_group_name" not in g or "hosts" not in g:
            raise TfpipeError(f"{source}: instance_groups[{i}] must be an object with 'instance_group_name' and "
                              f"'hosts', got {g!r}")
        hosts = g["hosts"]
        if not isinstance(hosts, list):
            raise TfpipeError(f"{source}: instance_groups[{i}] 'hosts' must be a list, got {hosts!r}")
        try:
            groups.append(InstanceGroup(g["instance_group_name"], tuple(hosts), g.get("instance_type")))
        except ValueError as exc:
            raise TfpipeError(f"{source}: instance_groups[{i}]: {exc}") from None
    if not groups:
        return None
    current = config.get("current_group_name")
    host = config.get("current_host")
    try:
        return InstanceGroups(tuple(groups), current_host=host if isinstance(host, str) else None,
                              current_group=current if isinstance(current, str) and current else None)
    except ValueError as exc:
        raise TfpipeError(f"{source}: {exc}") from None


def service_address(groups: InstanceGroups, data_group: str, port: int = DEFAULT_SERVICE_PORT, *,
                    addresses: Mapping[str, str] | None = None) -> str:
    """``grpc://HOST:PORT`` of the tf.data service dispatcher that ``tfpipe service auto`` starts on the first
    host of ``data_group`` (the first as SageMaker lists the group's hosts). ``addresses`` maps a host name to
    the address to dial instead (tests, or hosts known by IP)."""
    port = as_int(port, "port", minimum=1, maximum=65535, must="a TCP port in [1, 65535]")
    first = groups.hosts_of(data_group)[0]
    return f"grpc://{(addresses or {}).get(first, first)}:{port}"
