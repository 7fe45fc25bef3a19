"""A whole remote object into a local file, under the one downloader's policy (``download``): a large S3 object
comes as ranged GETs in parallel threads (one per part, each retried and resumed by the policy, all pinned to
the ETag of one HEAD); a smaller one, or any other scheme, as one resumable stream. An object that changes
while it arrives is fetched again from a new HEAD (at most ``policy.attempts`` times); one larger than ``cap``
is refused by name; a failed fetch leaves no file behind.
"""
from __future__ import annotations

import logging
import os
import random
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Callable

from ..util.errors import TfpipeError
from .download import Aborted, RetryPolicy, _Changed, _get, _Sink, _TooLong, _where, default_policy

__all__ = ["fetch_file", "DEFAULT_PART_BYTES"]

log = logging.getLogger(__name__)

DEFAULT_PART_BYTES = 64 << 20  # 64 MiB per ranged GET


class _PartSink:
    """Bytes ``[base, base + cap)`` of an open file, written in place (``pwrite``) as they arrive."""

    path = None

    def __init__(self, fd: int, base: int, cap: int, progress: Callable[[int], None] | None):
        self.fd, self.base, self.cap, self.progress, self.pos = fd, base, cap, progress, 0

    def restart(self) -> None:
        self.pos = 0

    def write(self, chunk: bytes) -> None:
        if self.pos + len(chunk) > self.cap:
            raise _TooLong()
        os.pwrite(self.fd, chunk, self.base + self.pos)
        self.pos += len(chunk)
        if self.progress is not None:
            self.progress(len(chunk))


def _too_big(where: str, cap: int, size: int | None = None) -> TfpipeError:
    held = f"{size} bytes, more" if size is not None else "holds more"
    return TfpipeError(f"{where}: {held} than the cap of {cap} bytes: refusing to fetch it")


def _parallel(storage, name: str, fd: int, size: int, etag: str, *, policy: RetryPolicy, part_bytes: int,
              workers: int, progress, where: str) -> None:
    """Every part of ``[0, size)`` by ranged GETs pinned to ``etag``; the first real failure stops the others."""
    stop_all = threading.Event()
    seeds = random.Random()

    def one(a: int, b: int) -> None:
        if stop_all.is_set():  # another part failed before this one started
            raise Aborted(where)
        sink = _PartSink(fd, a, b - a, progress)
        _get(storage, name, sink, policy, stop_all, random.Random(seeds.random()), time.sleep, f"{where} "
             f"[{a}, {b})", b - a, start=a, stop=b, etag=etag)
        if sink.pos != b - a:
            raise TfpipeError(f"cannot fetch {where}: bytes [{a}, {b}) ended at {a + sink.pos}")

    ranges = [(a, min(a + part_bytes, size)) for a in range(0, size, part_bytes)]
    first: BaseException | None = None
    with ThreadPoolExecutor(min(workers, len(ranges)), thread_name_prefix="tfpipe-part") as pool:
        futures = [pool.submit(one, a, b) for a, b in ranges]
        for future in futures:
            exc = future.exception()
            if exc is not None and first is None and not isinstance(exc, Aborted):
                first = exc
                stop_all.set()
    if first is not None:
        raise first


def fetch_file(storage, name: str, path: str, *, cap: int | None = None,
               progress: Callable[[int], None] | None = None, policy: RetryPolicy | None = None,
               part_bytes: int = DEFAULT_PART_BYTES, workers: int = 1) -> None:
    """Download ``name`` into ``path`` (created or truncated, fsynced); refused naming it past ``cap`` bytes.
    With ``workers > 1`` and a storage that answers HEADs (S3), objects above ``part_bytes`` come in parts."""
    policy = policy or default_policy(storage)
    where = _where(storage, name)
    done = False
    try:
        if workers <= 1 or not hasattr(storage, "head"):
            _stream(storage, name, path, cap, progress, policy, where, None, None)
            done = True
            return
        for _ in range(policy.attempts):
            head = _get(storage, name, _Sink(None, 0), policy, None, random.Random(), time.sleep, where, None,
                        get=_head)
            size, etag = head["size"], head["etag"]
            if cap is not None and size > cap:
                raise _too_big(where, cap, size)
            try:
                if size <= part_bytes or not etag:
                    _stream(storage, name, path, size, progress, policy, where, etag, size)
                else:
                    fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_TRUNC, 0o644)
                    try:
                        os.ftruncate(fd, size)
                        _parallel(storage, name, fd, size, etag, policy=policy, part_bytes=part_bytes,
                                  workers=workers, progress=progress, where=where)
                        os.fsync(fd)
                    finally:
                        os.close(fd)
                done = True
                return
            except _Changed:
                log.warning("%s changed while being fetched (ETag %s is gone): starting over", where, etag)
        raise TfpipeError(f"cannot fetch {where}: it changed during every one of {policy.attempts} attempts")
    finally:
        if not done:
            try:
                os.unlink(path)
            except FileNotFoundError:
                pass


def _head(storage, name: str, sink, clock, state: dict, abort, where: str) -> None:
    state["size"], state["etag"] = storage.head(name)


def _stream(storage, name: str, path: str, cap: int | None, progress, policy: RetryPolicy, where: str,
            etag: str | None, size: int | None) -> None:
    """One resumable stream into ``path`` (pinned to ``etag`` when given)."""
    sink = _Sink(path, sys.maxsize if cap is None else cap, progress)
    ok = False
    try:
        _get(storage, name, sink, policy, None, random.Random(), time.sleep, where, size, etag=etag)
        ok = True
    except _TooLong:
        raise _too_big(where, cap) from None
    finally:
        sink.close(sync=ok)
