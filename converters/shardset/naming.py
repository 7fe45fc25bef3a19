"""One shard filename template that formats, parses and globs: ``train-00003-of-00128.tfrecord``."""
from __future__ import annotations

import re
from dataclasses import dataclass

__all__ = ["ShardName"]

_NAME_RE = re.compile(r"^(?P<prefix>.+)-(?P<index>\d{5,})-of-(?P<count>\d{5,})(?P<suffix>\.tfrecord(?:\.gz)?)$")


@dataclass(frozen=True)
class ShardName:
    prefix: str = "train"
    suffix: str = ".tfrecord"

    def __post_init__(self):
        if not self.prefix or "/" in self.prefix:
            raise ValueError(f"shard prefix must be a non-empty name without '/', got {self.prefix!r}")
        if self.suffix not in (".tfrecord", ".tfrecord.gz"):
            raise ValueError(f"shard suffix must be .tfrecord or .tfrecord.gz, got {self.suffix!r}")

    def format(self, index: int, count: int) -> str:
        if not 0 <= index < count:
            raise ValueError(f"shard index {index} out of range for {count} shards")
        return f"{self.prefix}-{index:05d}-of-{count:05d}{self.suffix}"

    def glob(self) -> str:
        return f"{self.prefix}-*-of-*{self.suffix}"

    @staticmethod
    def parse(name: str) -> tuple[str, int, int]:
        """Return (prefix, index, count) for a shard file name, or raise ValueError."""
        m = _NAME_RE.match(name)
        if not m:
            raise ValueError(f"not a tfpipe shard name: {name!r}")
        return m.group("prefix"), int(m.group("index")), int(m.group("count"))
