"""One shard filename template that formats, parses and globs: ``train-00003-of-00128.tfrecord``.

A shard name is always a plain file name: no separator, no ``..``, no control character, never absolute.
``check_shard_name`` is the one test of that, applied wherever a manifest is read; ``ShardName`` refuses a
prefix that could produce anything else (or a name too long for a file system once the run's temporary
prefix is added). A set tfpipe adopted (``tfpipe index``) keeps its files' own names (``train.tfrecords``):
``check_adopted_name`` accepts any plain, visible file name that is not the manifest.
"""
from __future__ import annotations

import re
import unicodedata
from dataclasses import dataclass

from ..storage.base import TMP_PREFIX

__all__ = ["ShardName", "check_shard_name", "check_plain_name", "check_adopted_name", "check_side_name",
           "MAX_PREFIX_BYTES"]

_NAME_RE = re.compile(r"(?P<prefix>.+)-(?P<index>[0-9]{5,})-of-(?P<count>[0-9]{5,})(?P<suffix>\.tfrecord(?:\.gz)?)\Z")
MAX_PREFIX_BYTES = 128  # UTF-8 bytes: with the temporary prefix and suffix a name stays far below NAME_MAX (255)


def check_plain_name(name: object) -> None:
    """Raise ValueError (saying why) unless ``name`` is a plain file name: a non-empty string without a path
    separator, not ``.``/``..``, without control or format characters."""
    if not isinstance(name, str) or not name:
        raise ValueError(f"not a file name: {name!r}")
    if "/" in name or "\\" in name:
        raise ValueError(f"{name!r} holds a path separator")
    if name in (".", ".."):
        raise ValueError(f"{name!r} is not a file name")
    bad = next((c for c in name if unicodedata.category(c).startswith("C")), None)
    if bad is not None:
        raise ValueError(f"{name!r} holds the control character U+{ord(bad):04X}")


def check_side_name(name: object) -> None:
    """Raise ValueError unless ``name`` can be a file a set keeps beside its shards (a tabular vocabulary,
    ``vocab/C1.txt``): a folder and a file name, each plain and not a temporary name."""
    if not isinstance(name, str) or name.count("/") != 1:
        raise ValueError(f"{name!r} is not FOLDER/FILE")
    for part in name.split("/"):
        check_plain_name(part)
        if part.startswith(TMP_PREFIX):
            raise ValueError(f"{name!r}: {part!r} is a temporary name")


def check_shard_name(name: object) -> None:
    """Raise ValueError unless ``name`` is a plain file name in tfpipe's template
    (``{prefix}-{index:05d}-of-{count:05d}.tfrecord[.gz]``, index < count)."""
    check_plain_name(name)
    _, index, count = ShardName.parse(name)
    if index >= count:
        raise ValueError(f"{name!r}: shard index {index} is not below the count {count}")


def check_adopted_name(name: object) -> None:
    """Raise ValueError (saying why) unless ``name`` may name a file of an adopted set: a plain file name
    (``check_plain_name``), not hidden (tfpipe's temporary files start with '.'), not a manifest (``*.json``),
    at most 255 bytes."""
    check_plain_name(name)
    if name.startswith("."):
        raise ValueError(f"{name!r} is a hidden file (tfpipe's temporary files start with '.')")
    if name.endswith(".json"):
        raise ValueError(f"{name!r} is a JSON file (a manifest's name), not a record file")
    if len(name.encode("utf-8")) > 255:
        raise ValueError(f"{name!r} is longer than 255 bytes")


@dataclass(frozen=True)
class ShardName:
    prefix: str = "train"
    suffix: str = ".tfrecord"

    def __post_init__(self):
        try:
            check_plain_name(self.prefix)
        except ValueError as exc:
            raise ValueError(f"shard prefix must be a plain name: {exc}") from None
        if self.prefix.startswith("."):
            raise ValueError(f"shard prefix must not start with '.' (hidden files, tfpipe's temporary names), "
                             f"got {self.prefix!r}")
        if self.prefix != self.prefix.strip():
            raise ValueError(f"shard prefix must not start or end with white space, got {self.prefix!r}")
        if len(self.prefix.encode("utf-8")) > MAX_PREFIX_BYTES:
            raise ValueError(f"shard prefix is {len(self.prefix.encode('utf-8'))} bytes long; at most "
                             f"{MAX_PREFIX_BYTES} (file names are limited to 255 bytes)")
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
        m = _NAME_RE.match(name) if isinstance(name, str) else None
        if not m:
            raise ValueError(f"not a tfpipe shard name: {name!r}")
        return m.group("prefix"), int(m.group("index")), int(m.group("count"))
