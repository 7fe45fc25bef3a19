"""Where a shard set lives: a local directory or ``s3://bucket/prefix``, behind one small interface that knows
nothing of manifests.

The shard-set writer writes each shard to a temporary local file, then calls ``stage`` when the shard is
complete and ``publish`` for every shard once the set is complete (when final names, which carry the shard
count, are known); the manifest is written last with ``write_bytes_atomic``.
"""
from __future__ import annotations

from typing import Protocol

__all__ = ["Storage", "is_s3", "TMP_PREFIX"]

TMP_PREFIX = ".tfpipe-tmp-"  # temporary names; never matched by a shard glob


def is_s3(url: str) -> bool:
    return str(url).startswith("s3://")


class Storage(Protocol):
    url: str
    claim: object | None  # a ``claim.Claim`` while a run holds this location for writing

    def list(self) -> list[str]: ...
    def exists(self, name: str) -> bool: ...
    def read_bytes(self, name: str) -> bytes: ...
    def write_bytes_atomic(self, name: str, data: bytes) -> None: ...
    def delete(self, name: str) -> None: ...
    def staging_dir(self) -> str: ...
    def stage(self, local_path: str, tmp_name: str) -> None: ...
    def publish(self, tmp_name: str, final_name: str) -> None: ...
    def fetch(self, name: str, local_path: str) -> None: ...
    def local_path(self, name: str) -> str | None: ...
