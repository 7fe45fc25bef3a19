"""Which processes sharing a directory are alive, in a way that holds across PID namespaces (containers sharing
one host directory see different pids, and ``kill(pid, 0)`` of another namespace's pid says nothing).

Each process holds an exclusive ``flock`` on its own file ``<dir>/<owner>`` for as long as it lives; the
kernel drops the lock however the process dies. An owner whose file is missing or whose lock can be taken is
gone. ``owner`` is ``<pid>-<random>``: unique across namespaces, with the pid only for people reading the names.
A forked child gets an owner of its own (the parent's lock is shared with the child's inherited descriptor and
says nothing about the child). Files are opened without following links.
"""
from __future__ import annotations

import errno
import fcntl
import os
import re
import secrets

from ..util.errors import TfpipeError

__all__ = ["Owners", "OWNER_RE", "CacheFault", "fault"]

OWNER_RE = re.compile(r"^[0-9]+-[0-9a-z]+$")
_FLAGS = os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK


class CacheFault(TfpipeError):
    """A cache directory that cannot be used as it is (a link, a directory where a file belongs, read-only,
    full): one line naming the path."""


def fault(path: str, exc: OSError, what: str = "") -> CacheFault:
    """The one-line error for an OS failure on ``path`` inside a cache."""
    reason = {errno.ELOOP: "is a symbolic link (links inside the cache are refused)",
              errno.EISDIR: "is a directory, not a file", errno.ENOTDIR: "is not a directory",
              errno.EROFS: "read-only file system", errno.ENOSPC: "no space left on device",
              errno.EACCES: "permission denied"}.get(exc.errno or 0, os.strerror(exc.errno or errno.EIO))
    return CacheFault(f"stream cache {path}: {reason}{' ' + what if what else ''}: fix or remove it, or pass "
                      f"another stream_cache_dir")


class Owners:
    """This process's live-owner file in ``directory`` (create it with the directory's lock held)."""

    def __init__(self, directory: str):
        self.directory = directory
        self.owner = ""
        self._fd: int | None = None
        self._pid = -1

    def ensure(self) -> str:
        """This process's owner id, its file created and locked (again after a fork)."""
        if self._pid == os.getpid() and self._fd is not None:
            return self.owner
        if self._fd is not None:  # inherited from the parent: closing it leaves the parent's lock alone
            os.close(self._fd)
            self._fd = None
        owner = f"{os.getpid()}-{secrets.token_hex(6)}"
        path = os.path.join(self.directory, owner)
        try:
            fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_EXCL | _FLAGS, 0o644)
        except OSError as exc:
            raise fault(path, exc) from None
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        self._fd, self.owner, self._pid = fd, owner, os.getpid()
        return owner

    def alive(self, owner: str) -> bool:
        """Whether ``owner`` still holds its file's lock (this process is alive by definition)."""
        if owner == self.owner and self._pid == os.getpid():
            return True
        path = os.path.join(self.directory, owner)
        try:
            fd = os.open(path, os.O_RDONLY | _FLAGS)
        except OSError:
            return False  # no file (or not a plain one): nobody holds it
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            return True
        finally:
            os.close(fd)
        return False

    def forget(self, owner: str) -> None:
        """Remove a gone owner's file."""
        try:
            os.unlink(os.path.join(self.directory, owner))
        except FileNotFoundError:
            pass
        except IsADirectoryError:
            pass
