"""One writer per output: a run claims its output location before it writes anything there, and releases the
claim when it finishes or gives up. A second run that finds the claim held fails at once naming the holder
(process id, host, start time).

* Local directory: the claim file ``CLAIM_NAME`` is created with ``O_EXCL`` and kept ``flock``-ed for the
  whole run, so the kernel drops the lock when the holder dies however it dies. A claim file whose lock is
  free is stale: taken over with a warning when its holder was on this host (or it is unreadable); a holder
  on another host (a shared file system, where a lock may not reach) is named and left to the user.
* ``s3://``: the claim object is written with a conditional PUT (``If-None-Match: *``), which S3 (and moto)
  make atomic; a stale claim (its holder ran on this host and that process is gone) is replaced with
  ``If-Match`` on its ETag, so two runs cannot both take it over. Where the store does not support conditional writes the claim is a best effort
  (check, then write), with a warning.
"""
from __future__ import annotations

import json
import logging
import os
import socket
import time
import weakref
from dataclasses import asdict, dataclass

from ..util.errors import OutputInUseError
from .base import TMP_PREFIX, Storage

__all__ = ["CLAIM_NAME", "Holder", "Claim", "claim_output"]

log = logging.getLogger(__name__)

CLAIM_NAME = f"{TMP_PREFIX}claim"  # a temporary name: never a shard, never listed in a manifest


@dataclass(frozen=True)
class Holder:
    """Who holds a claim: run id, process id, host and start time (UTC)."""

    run: str
    pid: int
    host: str
    since: str

    @classmethod
    def me(cls, run: str) -> "Holder":
        return cls(run, os.getpid(), socket.gethostname(), time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()))

    @classmethod
    def parse(cls, raw: bytes) -> "Holder | None":
        try:
            d = json.loads(raw)
            return cls(str(d["run"]), int(d["pid"]), str(d["host"]), str(d["since"]))
        except (ValueError, KeyError, TypeError, RecursionError):
            return None

    def to_bytes(self) -> bytes:
        return (json.dumps(asdict(self), sort_keys=True) + "\n").encode()

    def describe(self) -> str:
        return f"pid {self.pid} on host {self.host}, since {self.since}"

    def gone(self) -> bool:
        """True only when this host ran the holder and its process no longer exists."""
        if self.host != socket.gethostname():
            return False
        try:
            os.kill(self.pid, 0)
        except ProcessLookupError:
            return True
        except PermissionError:
            return False
        return False


def _in_use(where: str, holder: Holder | None, claim: str) -> OutputInUseError:
    who = holder.describe() if holder else "holder unknown"
    return OutputInUseError(f"output {where} in use by another run ({who}); wait for it to finish, or, if that "
                            f"run is gone, remove {claim} and retry")


class Claim:
    """A held claim on an output location; ``release()`` (idempotent) gives it back. A claim that is dropped
    without ``release()`` is released when it is garbage-collected or at exit."""

    def __init__(self, storage: Storage, run: str):
        self.storage = storage
        self.holder = Holder.me(run)
        local = storage.local_path(CLAIM_NAME)
        if local is not None:
            made = _missing_dirs(os.path.dirname(local))
            fd = _claim_local(local, storage.url, self.holder)
            self._finalizer = weakref.finalize(self, _release_local, local, fd, os.getpid(), made)
        else:
            etag = _claim_s3(storage, self.holder)
            self._finalizer = weakref.finalize(self, _release_s3, storage, etag, os.getpid())

    @property
    def held(self) -> bool:
        return self._finalizer.alive

    def release(self) -> None:
        self._finalizer()

    def __enter__(self) -> "Claim":
        return self

    def __exit__(self, *exc) -> None:
        self.release()


def claim_output(storage: Storage, run: str) -> Claim:
    """Claim ``storage`` for the run ``run`` or raise OutputInUseError naming the holder. Creates a local
    output directory if needed (OSError if it cannot be); the directories it created are removed again on
    release when they are empty (a run that failed leaves no empty ``--out`` behind; one that existed before,
    or holds anything, is kept)."""
    return Claim(storage, run)


# -- local directory ---------------------------------------------------------------------------------------

def _missing_dirs(path: str) -> list[str]:
    """``path`` and those of its parents that do not exist yet, deepest first (what ``makedirs`` will create)."""
    missing = []
    path = os.path.abspath(path)
    while not os.path.lexists(path):
        missing.append(path)
        parent = os.path.dirname(path)
        if parent == path:
            break
        path = parent
    return missing


def _claim_local(path: str, where: str, me: Holder) -> int:
    import fcntl

    for _ in range(20):
        os.makedirs(os.path.dirname(path), exist_ok=True)
        try:
            fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o644)
            created = True
        except FileNotFoundError:
            continue  # the directory was removed meanwhile (a failed run releasing it): make it again
        except FileExistsError:
            try:
                fd = os.open(path, os.O_RDWR | os.O_CLOEXEC | getattr(os, "O_NOFOLLOW", 0))
            except FileNotFoundError:
                continue  # released meanwhile: try again
            created = False
        try:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                raise _in_use(where, Holder.parse(os.pread(fd, 4096, 0)), path) from None
            if not _same_file(fd, path):  # released (unlinked) between our open and our lock: start over
                os.close(fd)
                continue
            if not created:  # a claim file nobody holds: its run died (the kernel dropped the lock)
                holder = Holder.parse(os.pread(fd, 4096, 0))
                if holder is not None and holder.host != me.host:  # a lock may not reach across hosts
                    raise _in_use(where, holder, path)
                log.warning("output %s: taking over the stale claim of %s (that process is gone)", where,
                            holder.describe() if holder else "an unreadable holder")
            data = me.to_bytes()
            os.ftruncate(fd, 0)
            os.pwrite(fd, data, 0)
            os.fsync(fd)
            return fd
        except BaseException:
            try:
                os.close(fd)
            except OSError:
                pass
            raise
    raise OutputInUseError(f"output {where}: could not claim it (the claim {path} kept changing hands)")


def _same_file(fd: int, path: str) -> bool:
    try:
        a, b = os.fstat(fd), os.stat(path, follow_symlinks=False)
    except FileNotFoundError:
        return False
    return (a.st_dev, a.st_ino) == (b.st_dev, b.st_ino)


def _release_local(path: str, fd: int, owner: int, made: list[str]) -> None:
    if os.getpid() != owner:  # a forked child never releases its parent's claim
        return
    try:
        if _same_file(fd, path):
            os.unlink(path)  # while still locked: nobody can take a claim that is about to vanish
    except OSError as exc:
        log.warning("could not remove the claim %s: %s", path, exc)
    finally:
        os.close(fd)
    for d in made:  # the directories the claim created, deepest first, if nothing was left in them
        try:
            os.rmdir(d)
        except OSError:  # not empty (a set was written, or something else is there), or gone: kept
            break


# -- s3 ------------------------------------------------------------------------------------------------------

def _claim_s3(storage, me: Holder) -> str | None:
    where = storage.url
    data = me.to_bytes()
    try:
        etag = storage.put_conditional(CLAIM_NAME, data)
    except NotImplementedError:
        return _claim_s3_best_effort(storage, me)
    if etag is not None:
        return etag
    try:
        raw, old = storage.read_with_etag(CLAIM_NAME)
    except FileNotFoundError:  # released meanwhile
        etag = storage.put_conditional(CLAIM_NAME, data)
        if etag is None:
            raise _in_use(where, None, f"{where}/{CLAIM_NAME}") from None
        return etag
    holder = Holder.parse(raw)
    if holder is not None and not holder.gone():
        raise _in_use(where, holder, f"{where}/{CLAIM_NAME}")
    etag = storage.put_conditional(CLAIM_NAME, data, if_match=old)
    if etag is None:  # someone else took it over first
        raise _in_use(where, None, f"{where}/{CLAIM_NAME}")
    log.warning("output %s: taking over the stale claim of %s (that process is gone)", where,
                holder.describe() if holder else "an unreadable holder")
    return etag


def _claim_s3_best_effort(storage, me: Holder) -> None:
    log.warning("output %s: the store does not support conditional writes; the claim on it is a best effort",
                storage.url)
    if storage.exists(CLAIM_NAME):
        holder = Holder.parse(storage.read_bytes(CLAIM_NAME))
        if holder is not None and not holder.gone():
            raise _in_use(storage.url, holder, f"{storage.url}/{CLAIM_NAME}")
    storage.write_bytes_atomic(CLAIM_NAME, me.to_bytes())
    return None


def _release_s3(storage, etag: str | None, owner: int) -> None:
    if os.getpid() != owner:
        return
    try:
        storage.delete_if_match(CLAIM_NAME, etag)
    except Exception as exc:  # noqa: BLE001 - releasing must not hide the run's own outcome
        log.warning("could not remove the claim %s/%s: %s", storage.url, CLAIM_NAME, exc)
