"""A local directory behind the ``Storage`` interface: temporary shards are written in place and renamed on
publish; small files are written atomically (temporary name, fsync, rename)."""
from __future__ import annotations

import os
import shutil

from ..util.errors import TfpipeError
from ..util.fs import open_regular, write_atomic
from .base import TMP_PREFIX

__all__ = ["LocalStorage"]


class LocalStorage:
    """A local directory. Temporary shards are written in place and renamed on publish."""

    def __init__(self, path: str | os.PathLike):
        self.url = str(path)
        self.path = os.path.abspath(path)
        self.claim = None  # the run's claim on this location, set by ``shardset.writer.prepare_output``

    def _p(self, name: str) -> str:
        return os.path.join(self.path, name)

    def list(self) -> list[str]:
        """The directory's names; none while it does not exist (one look: another process may create it)."""
        try:
            return sorted(os.listdir(self.path))
        except FileNotFoundError:
            return []
        except NotADirectoryError:
            raise TfpipeError(f"output {self.url} exists and is not a directory") from None

    def exists(self, name: str) -> bool:
        return os.path.exists(self._p(name))

    def read_bytes(self, name: str) -> bytes:
        """The file's bytes; a FIFO or device under ``name`` is refused (``NotRegularFileError``), never read."""
        with open_regular(self._p(name)) as f:
            return f.read()

    def open_read(self, name: str):
        """The file for reading (a regular file only; for the downloader)."""
        return open_regular(self._p(name))

    def read_range(self, name: str, start: int, stop: int) -> bytes:
        """Bytes ``[start, stop)`` of a regular file."""
        with open_regular(self._p(name)) as f:
            f.seek(start)
            return f.read(max(stop - start, 0))

    def write_bytes_atomic(self, name: str, data) -> None:
        """``data``: bytes, or a list of byte buffers written one after another."""
        os.makedirs(self.path, exist_ok=True)
        write_atomic(self._p(name), data, tmp_prefix=TMP_PREFIX)

    def delete(self, name: str) -> None:
        """Remove a file; also a run's temporary area (a ``.tfpipe-tmp-*`` directory an engine left behind)."""
        p = self._p(name)
        if name.startswith(TMP_PREFIX) and os.path.isdir(p) and not os.path.islink(p):
            shutil.rmtree(p)
            return
        try:
            os.unlink(p)
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
        shutil.copyfile(self._p(name), local_path)

    def local_path(self, name: str) -> str | None:
        return self._p(name)
