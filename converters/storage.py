"""Where a shard set lives: a local directory or ``s3://bucket/prefix``, behind one small interface.

The shard-set writer writes each shard to a temporary local file, then calls ``stage`` when the shard is
complete and ``publish`` for every shard once the set is complete (when final names, which carry the shard
count, are known); the manifest is written last with ``write_bytes_atomic``.
"""
from __future__ import annotations

import os
import tempfile
from typing import Protocol

from .errors import TfpipeError
from .tfrecord import fsync_dir

__all__ = ["Storage", "LocalStorage", "open_storage", "is_s3", "split_manifest_path", "TMP_PREFIX"]

TMP_PREFIX = ".tfpipe-tmp-"  # temporary names; never matched by a shard glob


def is_s3(url: str) -> bool:
    return str(url).startswith("s3://")


def split_manifest_path(path: str) -> tuple[str, str]:
    """'dir' or 'dir/index.json' -> ('dir', 'index.json')."""
    from .manifest import MANIFEST_NAME

    path = str(path)
    if path.endswith(".json"):
        base, _, name = path.rstrip("/").rpartition("/")
        return (base or "."), name
    return path.rstrip("/") or "/", MANIFEST_NAME


class Storage(Protocol):
    url: str

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


class LocalStorage:
    """A local directory. Temporary shards are written in place and renamed on publish."""

    def __init__(self, path: str | os.PathLike):
        self.url = str(path)
        self.path = os.path.abspath(path)

    def _p(self, name: str) -> str:
        return os.path.join(self.path, name)

    def list(self) -> list[str]:
        if not os.path.isdir(self.path):
            if os.path.exists(self.path):
                raise TfpipeError(f"output {self.url} exists and is not a directory")
            return []
        return sorted(os.listdir(self.path))

    def exists(self, name: str) -> bool:
        return os.path.exists(self._p(name))

    def read_bytes(self, name: str) -> bytes:
        with open(self._p(name), "rb") as f:
            return f.read()

    def write_bytes_atomic(self, name: str, data: bytes) -> None:
        os.makedirs(self.path, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=TMP_PREFIX, dir=self.path)
        try:
            with os.fdopen(fd, "wb") as f:
                f.write(data)
                f.flush()
                os.fsync(f.fileno())
            os.replace(tmp, self._p(name))
        except BaseException:
            if os.path.exists(tmp):
                os.unlink(tmp)
            raise
        fsync_dir(self.path)

    def delete(self, name: str) -> None:
        try:
            os.unlink(self._p(name))
        except FileNotFoundError:
            pass

    def staging_dir(self) -> str:
        os.makedirs(self.path, exist_ok=True)
        return self.path

    def stage(self, local_path: str, tmp_name: str) -> None:
        pass  # already in place under its temporary name

    def publish(self, tmp_name: str, final_name: str) -> None:
        os.replace(self._p(tmp_name), self._p(final_name))

    def fetch(self, name: str, local_path: str) -> None:
        import shutil

        shutil.copyfile(self._p(name), local_path)

    def local_path(self, name: str) -> str | None:
        return self._p(name)


def open_storage(url: str | os.PathLike, **s3_options) -> Storage:
    """Open a local directory or an ``s3://bucket/prefix`` location."""
    url = str(url)
    if is_s3(url):
        from .s3 import S3Storage

        return S3Storage(url, **s3_options)
    return LocalStorage(url)
