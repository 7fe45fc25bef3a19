"""Inputs stored as objects: ``s3://bucket/key`` (boto3, imported only then) or any ``scheme://`` Apache Beam's
``FileSystems`` knows (``gs://``, ``hdfs://``, ...; apache_beam imported only then).

* ``list_objects(url)``: every object under ``url`` taken as a "directory" prefix (recursively), or else the
  object ``url`` itself, as ``(url, size)`` pairs sorted by URL; ``[]`` when there is none. Directory markers
  (empty objects whose keys end in ``/``) are not objects; a key ending in ``/`` that holds data is listed
  (for ``sources`` to report it).
* ``object_size(url)``: one object's size (``FileNotFoundError`` when missing).
* ``open_object(url)``: a seekable, buffered, read-only binary file object. S3: ranged GETs of the bytes asked
  for (at least ``READ_BUFFER`` at a time) through ``S3Storage.read_range`` (the one downloader's retries,
  pinned to the ETag first seen), so its timeouts, endpoint (``storage.s3.s3_endpoint``) and ``$TFPIPE_S3_*``
  settings apply; Beam: ``FileSystems.open`` without decompression
  (decompression is the sources' job, checked against magic bytes).

A missing object raises ``FileNotFoundError`` as ``os`` does for a missing file (errno ENOENT, "no such
object", the URL); other failures a ``TfpipeError`` naming it.
"""
from __future__ import annotations

import errno
import io
import os
from typing import BinaryIO

from ..util.errors import TfpipeError
from .beamfs import _fs as _beam
from .beamfs import BeamFSStorage, has_scheme

__all__ = ["is_url", "list_objects", "object_size", "open_object", "READ_BUFFER"]

READ_BUFFER = 1 << 20  # 1 MiB: the least one GET reads by default (a larger read is one GET of that size)
MAX_GET = 64 << 20     # 64 MiB: the most one GET reads (a larger read is several)
BEAM_READ_BUFFER = 8 << 20  # 8 MiB: the least one read of a Beam file system's object takes (each range is an open)
_S3_CLIENTS: dict[tuple, object] = {}  # one S3Storage (and boto3 client) per bucket and endpoint, per process
_PINS: dict[str, str] = {}  # s3:// URL -> the ETag first seen (listing or HEAD); kept by forked workers
if hasattr(os, "register_at_fork"):  # a forked worker must not share its parent's HTTP connections
    os.register_at_fork(after_in_child=_S3_CLIENTS.clear)


def is_url(path: str | os.PathLike) -> bool:
    """Whether an input names an object (``s3://...``, ``gs://...``) rather than a local path."""
    return has_scheme(str(path))


def _s3(url: str):
    """The cached ``S3Storage`` of ``url``'s bucket and the object key."""
    from .s3 import S3Storage, s3_endpoint

    bucket, _, key = url[len("s3://"):].partition("/")
    if not bucket:
        raise TfpipeError(f"input {url!r}: an s3:// URL needs a bucket")
    endpoint = s3_endpoint()
    store = _S3_CLIENTS.get((bucket, endpoint))
    if store is None:
        store = _S3_CLIENTS[(bucket, endpoint)] = S3Storage(f"s3://{bucket}")
    return store, key


def _beam_error(action: str, url: str, exc: Exception) -> TfpipeError:
    return TfpipeError(f"cannot {action} {url}: {str(exc).splitlines()[0] if str(exc) else type(exc).__name__}")


def list_objects(url: str) -> list[tuple[str, int]]:
    """The objects under ``url/`` (recursively), else the object ``url``; ``[]`` when neither exists."""
    url = str(url)
    if url.startswith("s3://"):
        store, key = _s3(url)
        prefix = key.strip("/") + "/" if key.strip("/") else ""
        found = [(f"s3://{store.bucket}/{k}", n) for k, n in store.list_tree(prefix)
                 if not (k.endswith("/") and n == 0)]  # a directory marker; a key ending in / with data is kept
        for u, _ in found:
            _pin(store, u, listing=True)
        if not found and key and not key.endswith("/"):
            try:
                found = [(url, store.size(key))]
                _pin(store, url, listing=True)
            except FileNotFoundError:
                pass
        return sorted(found)
    fs, _ = _beam()
    try:
        found = [(m.path, int(m.size_in_bytes)) for m in fs.match([url.rstrip("/") + "/**"])[0].metadata_list
                 if not m.path.endswith("/")]
        if not found and not url.endswith("/"):
            found = [(m.path, int(m.size_in_bytes)) for m in fs.match([url])[0].metadata_list]
    except Exception as exc:  # noqa: BLE001 - BeamIOError wraps whatever the file system raised
        raise _beam_error("list", url, exc) from exc
    return sorted(found)


def _pin(store, url: str, listing: bool = False) -> None:
    """Remember the ETag ``store`` saw for ``url``: every later GET of it asks for that version. A listing
    (the start of a run: inputs are discovered) pins the version it sees; a HEAD pins only an object not
    pinned yet."""
    etag = store.etags.get(url[len(f"s3://{store.bucket}/"):])
    if etag and (listing or url not in _PINS):
        _PINS[url] = etag


def _missing(url: str) -> FileNotFoundError:
    """A missing object, as ``os`` reports a missing file (``strerror`` "no such object", ``filename`` the URL)."""
    return FileNotFoundError(errno.ENOENT, "no such object", url)


def object_size(url: str) -> int:
    url = str(url)
    if url.startswith("s3://"):
        store, key = _s3(url)
        try:
            size = store.size(key)
        except FileNotFoundError:
            raise _missing(url) from None
        _pin(store, url)
        return size
    fs, _ = _beam()
    try:
        found = fs.match([url])[0].metadata_list
    except Exception as exc:  # noqa: BLE001
        raise _beam_error("read", url, exc) from exc
    if not found:
        raise _missing(url)
    return int(found[0].size_in_bytes)


def open_object(url: str, buffer_size: int = READ_BUFFER) -> BinaryIO:
    """``url`` as a seekable, buffered, read-only binary file object; on S3 a read fetches at least
    ``buffer_size`` bytes (a whole-file stream read in small pieces, as a decompressor does, wants a large one)."""
    url = str(url)
    if url.startswith("s3://"):
        store, key = _s3(url)
        size = object_size(url)
        etag = _PINS.get(url)  # the version first seen: a rewrite since is an InputError, not other bytes
        raw = _RangeReader(url, size, lambda a, b: store.read_range(key, a, b, if_match=etag))
        return io.BufferedReader(raw, buffer_size=buffer_size)  # type: ignore[return-value]
    size = object_size(url)  # FileNotFoundError when missing
    parent, name = url.rsplit("/", 1)
    store = BeamFSStorage(parent)
    raw = _RangeReader(url, size, lambda a, b: store.read_range(name, a, b))  # each range under the one policy
    return io.BufferedReader(raw, buffer_size=max(buffer_size, BEAM_READ_BUFFER))  # type: ignore[return-value]


class _RangeReader(io.RawIOBase):
    """Raw reads of an object of ``size`` bytes through ``fetch(start, stop)`` (one ranged request each)."""

    def __init__(self, name: str, size: int, fetch):
        super().__init__()
        self.name = name
        self.size = size
        self._fetch = fetch
        self._pos = 0

    def readable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return True

    def tell(self) -> int:
        return self._pos

    def seek(self, offset: int, whence: int = io.SEEK_SET) -> int:
        base = {io.SEEK_SET: 0, io.SEEK_CUR: self._pos, io.SEEK_END: self.size}[whence]
        if base + offset < 0:
            raise OSError(f"{self.name}: seek to a negative offset {base + offset}")
        self._pos = base + offset
        return self._pos

    def _get(self, n: int) -> bytes:
        data = self._fetch(self._pos, self._pos + min(n, MAX_GET))
        if not data:
            raise OSError(f"{self.name}: object ends at byte {self._pos}, not at {self.size} (did it change "
                          "during the run?)")
        self._pos += len(data)
        return data

    def readinto(self, b) -> int:
        n = min(len(b), self.size - self._pos)
        if n <= 0:
            return 0
        data = self._get(n)
        b[:len(data)] = data
        return len(data)

    def readall(self) -> bytes:
        """The rest of the object in as few GETs as ``MAX_GET`` allows (``io.RawIOBase`` would read 8 KiB
        at a time)."""
        parts = []
        while self._pos < self.size:
            parts.append(self._get(self.size - self._pos))
        return b"".join(parts)
