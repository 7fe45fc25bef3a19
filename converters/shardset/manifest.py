"""The manifest ``index.json`` as a pure model (dataclasses + deterministic JSON; no I/O): the commit marker
of a shard set, written last.

It counts and checksums everything: every shard's name, records, bytes and sha256; the feature schema;
per-input-file accounting (records read / written / skipped by reason); options and tool version.
"""
from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from typing import Any

from ..tfrecord.schema import Schema
from ..util.errors import TfpipeError
from ..util.version import __version__
from .options import normalize_compression

__all__ = ["MANIFEST_NAME", "FORMAT_VERSION", "MAX_EXAMPLES", "ShardInfo", "InputStats", "Manifest",
           "manifest_bytes"]

MANIFEST_NAME = "index.json"
FORMAT_VERSION = 1
MAX_EXAMPLES = 20  # skipped-line examples kept per input file


@dataclass(frozen=True)
class ShardInfo:
    name: str
    records: int
    bytes: int
    sha256: str

    def __post_init__(self):
        if self.records < 0 or self.bytes < 0:
            raise ValueError(f"shard {self.name!r}: negative records/bytes ({self.records}, {self.bytes})")


@dataclass
class InputStats:
    """Accounting for one input file: read == written + sum(skipped.values())."""

    path: str
    records_read: int = 0
    records_written: int = 0
    blank_lines: int = 0
    skipped: dict[str, int] = field(default_factory=dict)
    examples: list[str] = field(default_factory=list)  # "file:line: reason" for the first skipped lines

    def skip(self, reason: str, count: int = 1, example: str | None = None) -> None:
        self.skipped[reason] = self.skipped.get(reason, 0) + count
        if example is not None and len(self.examples) < MAX_EXAMPLES:
            self.examples.append(example)

    def merge(self, other: "InputStats") -> None:
        self.records_read += other.records_read
        self.records_written += other.records_written
        self.blank_lines += other.blank_lines
        for k, v in other.skipped.items():
            self.skipped[k] = self.skipped.get(k, 0) + v
        room = MAX_EXAMPLES - len(self.examples)
        if room > 0:
            self.examples.extend(other.examples[:room])

    @property
    def records_skipped(self) -> int:
        return sum(self.skipped.values())

    def to_json(self) -> dict:
        d = asdict(self)
        d["skipped"] = dict(sorted(self.skipped.items()))
        return d


@dataclass(frozen=True)
class Manifest:
    records: int
    shards: tuple[ShardInfo, ...]
    schema: Schema
    inputs: tuple[InputStats, ...] = ()
    options: dict[str, Any] = field(default_factory=dict)
    compression: str | None = None
    kind: str = "libsvm"
    extra: dict[str, Any] = field(default_factory=dict)   # converter-specific totals (tokens, subsets, ...)
    tfpipe_version: str = ""
    format_version: int = FORMAT_VERSION
    location: str | None = field(default=None, compare=False)  # where it was read from (not serialized)

    def __post_init__(self):
        object.__setattr__(self, "compression", normalize_compression(self.compression))
        total = sum(s.records for s in self.shards)
        if total != self.records:
            raise ValueError(f"manifest records {self.records} != sum over shards {total}")
        if not self.tfpipe_version:
            object.__setattr__(self, "tfpipe_version", __version__)

    @property
    def total_bytes(self) -> int:
        return sum(s.bytes for s in self.shards)

    @property
    def skipped(self) -> dict[str, int]:
        out: dict[str, int] = {}
        for i in self.inputs:
            for k, v in i.skipped.items():
                out[k] = out.get(k, 0) + v
        return dict(sorted(out.items()))

    def shard_paths(self, base: str | None = None) -> list[str]:
        """Full paths (or s3:// URLs) of the shards, relative to the manifest's directory by default."""
        base = base if base is not None else self.location
        if base is None:
            raise ValueError("manifest location unknown: pass base")
        sep = "" if base.endswith("/") else "/"
        return [f"{base}{sep}{s.name}" for s in self.shards]

    def to_json(self) -> dict:
        return {
            "format_version": self.format_version,
            "tfpipe_version": self.tfpipe_version,
            "kind": self.kind,
            "records": self.records,
            "bytes": self.total_bytes,
            "compression": self.compression,
            "schema": self.schema.to_json(),
            "shards": [asdict(s) for s in self.shards],
            "inputs": [i.to_json() for i in self.inputs],
            "skipped": self.skipped,
            "options": self.options,
            "extra": self.extra,
        }

    @classmethod
    def from_json(cls, data: dict, location: str | None = None) -> "Manifest":
        try:
            version = data["format_version"]
            if version != FORMAT_VERSION:
                raise TfpipeError(f"unsupported manifest format_version {version} (this tfpipe reads "
                                  f"{FORMAT_VERSION})")
            return cls(
                records=data["records"],
                shards=tuple(ShardInfo(**s) for s in data["shards"]),
                schema=Schema.from_json(data["schema"]),
                inputs=tuple(InputStats(**i) for i in data.get("inputs", [])),
                options=data.get("options", {}),
                compression=data.get("compression"),
                kind=data.get("kind", "libsvm"),
                extra=data.get("extra", {}),
                tfpipe_version=data.get("tfpipe_version", "?"),
                format_version=version,
                location=location,
            )
        except (KeyError, TypeError, ValueError) as exc:
            where = f" {location}" if location else ""
            raise TfpipeError(f"invalid manifest{where}: {exc!r}") from exc


def manifest_bytes(manifest: Manifest) -> bytes:
    """Deterministic serialization (sorted keys, no timestamps)."""
    return (json.dumps(manifest.to_json(), indent=2, sort_keys=True) + "\n").encode("utf-8")
