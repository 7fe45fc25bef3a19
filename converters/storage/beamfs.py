"""Any location Apache Beam's ``FileSystems`` knows (``gs://``, ``hdfs://``, ``azfs://``, ...) behind the
``Storage`` interface; apache_beam is imported only when such a location is used.

Shards are written to a local temporary file, copied to their temporary name when complete (``stage``) and
renamed on ``publish`` (on object stores Beam's rename is a server-side copy + delete); small files go to a
temporary name and are renamed, so a reader never sees a partial manifest.
"""
from __future__ import annotations

import os
import shutil
import tempfile
import uuid
import weakref

from ..util.errors import TfpipeError
from .base import TMP_PREFIX
from .download import read_remote
from .parts import fetch_file

__all__ = ["BeamFSStorage", "has_scheme"]

_COPY = 8 << 20  # 8 MiB copy buffer


def has_scheme(url: str) -> bool:
    """Whether ``url`` names a scheme (``gs://...``), as opposed to a local path."""
    head, sep, _ = str(url).partition("://")
    return bool(sep) and head.isidentifier()


def _fs():
    try:
        from apache_beam.io.filesystem import CompressionTypes
        from apache_beam.io.filesystems import FileSystems
    except ImportError:  # pragma: no cover - apache-beam is an optional extra
        raise TfpipeError("locations other than local paths and s3:// need Apache Beam's file systems: "
                          "pip install 'tfpipe[beam]'") from None
    return FileSystems, CompressionTypes.UNCOMPRESSED


class BeamFSStorage:
    """A shard-set location on a Beam file system (e.g. ``gs://bucket/prefix``)."""

    def __init__(self, url: str):
        self.url = str(url).rstrip("/")
        self._staging: str | None = None

    def _p(self, name: str) -> str:
        return f"{self.url}/{name}" if name else self.url

    def _errors(self, action: str, name: str, exc: Exception) -> TfpipeError:
        return TfpipeError(f"cannot {action} {self._p(name)}: {exc}")

    def list(self) -> list[str]:
        fs, _ = _fs()
        try:
            found = fs.match([self._p("*")])[0].metadata_list
        except Exception as exc:  # noqa: BLE001 - BeamIOError for no match on some file systems
            if "No files found" in str(exc) or "not found" in str(exc).lower():
                return []
            raise self._errors("list", "", exc) from exc
        base = self.url + "/"
        names = [m.path[len(base):] for m in found if m.path.startswith(base)]
        return sorted(n for n in names if n and "/" not in n.rstrip("/"))

    def exists(self, name: str) -> bool:
        fs, _ = _fs()
        return bool(fs.exists(self._p(name)))

    def read_bytes(self, name: str, cap: int | None = None) -> bytes:
        """The whole file (refused naming it past ``cap`` bytes), under the downloader's policy."""
        return read_remote(self, name, cap=cap)[0]

    def open_read(self, name: str):
        """The object as a seekable file, not decompressed (for the downloader)."""
        fs, raw = _fs()
        if not fs.exists(self._p(name)):
            raise FileNotFoundError(f"{self._p(name)}: no such file")
        try:
            return fs.open(self._p(name), compression_type=raw)
        except Exception as exc:  # noqa: BLE001
            raise self._errors("read", name, exc) from exc

    def read_range(self, name: str, start: int, stop: int) -> bytes:
        """Bytes ``[start, stop)`` of a file (seek, then read), under the downloader's policy."""
        return read_remote(self, name, start, stop)[0]

    def write_bytes_atomic(self, name: str, data: bytes) -> None:
        fs, raw = _fs()
        tmp = f"{TMP_PREFIX}{uuid.uuid4().hex[:12]}-{name}"
        try:
            with fs.create(self._p(tmp), compression_type=raw) as f:
                f.write(data)
            fs.rename([self._p(tmp)], [self._p(name)])
        except Exception as exc:  # noqa: BLE001
            self.delete(tmp)
            raise self._errors("write", name, exc) from exc

    def delete(self, name: str) -> None:
        fs, _ = _fs()
        try:
            if fs.exists(self._p(name)):
                fs.delete([self._p(name)])
        except Exception as exc:  # noqa: BLE001
            raise self._errors("delete", name, exc) from exc

    def put_conditional(self, name: str, data: bytes, *, if_match: str | None = None) -> str | None:
        """Beam's file systems have no conditional write: the output claim falls back to a best effort."""
        raise NotImplementedError(f"{self._p(name)}: conditional writes are not supported by Beam file systems")

    def delete_if_match(self, name: str, etag: str | None) -> None:
        """Delete ``name`` (no ETags here: whatever version is there)."""
        self.delete(name)

    def staging_dir(self) -> str:
        """A local temporary directory for shards being written (removed when this object goes away)."""
        if self._staging is None:
            self._staging = tempfile.mkdtemp(prefix="tfpipe-beamfs-staging-")
            weakref.finalize(self, shutil.rmtree, self._staging, True)
        return self._staging

    def stage(self, local_path: str, tmp_name: str) -> None:
        """Copy a finished shard to its temporary name, then delete the local file."""
        fs, raw = _fs()
        try:
            with open(local_path, "rb") as src, fs.create(self._p(tmp_name), compression_type=raw) as dst:
                shutil.copyfileobj(src, dst, _COPY)
        except Exception as exc:  # noqa: BLE001
            raise self._errors("upload", tmp_name, exc) from exc
        os.unlink(local_path)

    def publish(self, tmp_name: str, final_name: str) -> None:
        fs, _ = _fs()
        try:
            fs.rename([self._p(tmp_name)], [self._p(final_name)])
        except Exception as exc:  # noqa: BLE001
            raise self._errors("publish", final_name, exc) from exc

    def fetch(self, name: str, local_path: str, callback=None, cap: int | None = None) -> None:
        """The file into ``local_path``, one resumable stream under the downloader's policy."""
        fetch_file(self, name, local_path, cap=cap, progress=callback)

    def local_path(self, name: str) -> str | None:
        return None
