"""A group of shard sets (pure model + JSON): one complete shard set per label under ``OUT/label=<v>/``, each
with its own manifest, and a small group manifest at ``OUT/index.json`` that lists the parts (with the sha256
of each part's manifest) and holds the accounting of the whole conversion.

Readers see a group as one shard set (``union``): its shards are the parts' shards, named ``label=<v>/<shard>``
(one directory level, nothing else), so ``verify``, ``inspect``, upload/download and the planner work on it
unchanged, and a pipeline can read it whole or balance the parts at read time.
"""
from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from typing import Any

from ..util.errors import IntegrityError, TfpipeError
from ..util.fs import is_sha256
from ..util.version import __version__
from .manifest import FORMAT_VERSION, InputStats, Manifest, ShardInfo

__all__ = ["GROUP_KIND", "PartInfo", "GroupManifest", "group_bytes", "union", "is_group", "part_path"]

GROUP_KIND = "group"
_PART = re.compile(r"^label=[0-9A-Za-z.+\-_]+$")


def part_path(label_name: str) -> str:
    """The directory of a label's part: ``label=<name>``."""
    path = f"label={label_name}"
    _check_part(path)
    return path


def _check_part(path: str) -> None:
    if not isinstance(path, str) or not _PART.match(path) or path in ("label=.", "label=.."):
        raise ValueError(f"not a part directory of a tfpipe group: {path!r} (expected label=<value>)")


@dataclass(frozen=True)
class PartInfo:
    """One part: its label (as written in names), directory, records, bytes, shards, manifest sha256."""

    label: str
    path: str
    records: int
    bytes: int
    shards: int
    manifest_sha256: str

    def __post_init__(self):
        _check_part(self.path)
        for name in ("records", "bytes", "shards"):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, int) or v < 0:
                raise ValueError(f"part {self.path}: {name} must be a non-negative integer, got {v!r}")
        if not is_sha256(self.manifest_sha256):
            raise ValueError(f"part {self.path}: manifest_sha256 must be 64 hex digits, got {self.manifest_sha256!r}")

    def to_json(self) -> dict:
        return {"label": self.label, "path": self.path, "records": self.records, "bytes": self.bytes,
                "shards": self.shards, "manifest_sha256": self.manifest_sha256}


@dataclass(frozen=True)
class GroupManifest:
    """The group manifest: the parts, and the whole conversion's accounting (every input's records read,
    written and skipped, summed over the parts), options and extra figures."""

    parts: tuple[PartInfo, ...]
    records: int
    inputs: tuple[InputStats, ...] = ()
    options: dict[str, Any] = field(default_factory=dict)
    extra: dict[str, Any] = field(default_factory=dict)
    group_by: str = "label"
    tfpipe_version: str = __version__
    format_version: int = FORMAT_VERSION

    def __post_init__(self):
        paths = [p.path for p in self.parts]
        if len(set(paths)) != len(paths):
            raise ValueError(f"a group lists a part twice: {paths}")
        if sum(p.records for p in self.parts) != self.records:
            raise ValueError(f"group records {self.records} != the sum over its parts")
        if self.group_by != "label":
            raise ValueError(f"group_by must be 'label', got {self.group_by!r}")

    def to_json(self) -> dict:
        skipped: dict[str, int] = {}
        for i in self.inputs:
            for k, v in i.skipped.items():
                skipped[k] = skipped.get(k, 0) + v
        return {"format_version": self.format_version, "tfpipe_version": self.tfpipe_version, "kind": GROUP_KIND,
                "group_by": self.group_by, "records": self.records,
                "bytes": sum(p.bytes for p in self.parts), "parts": [p.to_json() for p in self.parts],
                "inputs": [i.to_json() for i in self.inputs], "skipped": dict(sorted(skipped.items())),
                "options": self.options, "extra": self.extra}

    @classmethod
    def from_json(cls, data: dict, location: str | None = None) -> "GroupManifest":
        where = f" {location}" if location else ""
        try:
            if data["format_version"] != FORMAT_VERSION:
                raise TfpipeError(f"unsupported group manifest format_version {data['format_version']}")
            parts = tuple(PartInfo(**p) for p in data["parts"])
            inputs = tuple(InputStats(**i) for i in data.get("inputs", []))
            return cls(parts, data["records"], inputs, data.get("options", {}), data.get("extra", {}),
                       data.get("group_by", "label"), data.get("tfpipe_version", "?"), data["format_version"])
        except (KeyError, TypeError, ValueError) as exc:
            raise IntegrityError(f"invalid group manifest{where}: {exc}") from None


def is_group(data: Any) -> bool:
    return isinstance(data, dict) and data.get("kind") == GROUP_KIND


def group_bytes(group: GroupManifest) -> bytes:
    """Deterministic serialization (sorted keys, no timestamps)."""
    return (json.dumps(group.to_json(), indent=2, sort_keys=True) + "\n").encode("utf-8")


def union(group: GroupManifest, parts: list[Manifest], location: str | None) -> Manifest:
    """The group as one shard set: the parts' shards (named ``<part dir>/<shard>``) in part order, the parts'
    schema, compression and kind, and the group's accounting; ``.parts`` lists the parts."""
    if len(parts) != len(group.parts) or not parts:
        raise IntegrityError(f"group {location}: {len(group.parts)} part(s) listed, {len(parts)} read")
    first = parts[0]
    shards = []
    for info, m in zip(group.parts, parts):
        if m.schema != first.schema or m.compression != first.compression or m.kind != first.kind:
            raise IntegrityError(f"group {location}: part {info.path} has another schema, compression or kind "
                                 "than the first part")
        if m.records != info.records or len(m.shards) != info.shards:
            raise IntegrityError(f"group {location}: part {info.path} holds {m.records} records in {len(m.shards)} "
                                 f"shards, the group manifest says {info.records} in {info.shards}")
        shards += [ShardInfo(f"{info.path}/{s.name}", s.records, s.bytes, s.sha256) for s in m.shards]
    extra = dict(group.extra)
    extra["group"] = {"group_by": group.group_by, "parts": [p.to_json() for p in group.parts]}
    return Manifest(records=group.records, shards=tuple(shards), schema=first.schema, inputs=group.inputs,
                    options=dict(group.options), compression=first.compression, kind=first.kind, extra=extra,
                    tfpipe_version=group.tfpipe_version, location=location, parts=group.parts)
