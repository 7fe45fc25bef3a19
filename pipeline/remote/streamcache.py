"""The per-host shard cache shared by that host's readers (processes), coordinated through the file system.

Everything the cache creates lives under ``<stream_cache_dir>/tfpipe-stream/`` and it deletes nothing else:

* ``lock`` — an ``fcntl`` lock held for a few file operations at a time (the kernel drops it with its process);
* ``data/<key>`` — verified shards (``key`` = ``<sha256[:32]>-<name>``), what TensorFlow opens; a process
  hashes a shard before its first use of it (unless it downloaded it itself), so a file changed behind the
  cache's back — even with its size and mtime kept — is fetched again; its atime is the last use (eviction
  order);
* ``data/.part.<owner>.<bytes>.<key>`` — a download in progress; its name holds the bytes it reserved and its
  owner (``<pid>-<process start time>``), so the space is counted before the bytes arrive and a part whose owner
  died is removed by the next reader. It sits beside the finished shards, so one directory listing sees a
  download and its result never both (whoever samples the bytes under ``stream_cache_dir`` sees at most the limit);
* ``lease/<owner>.<key>`` — an empty file while a reader process uses (or is about to use) the shard: a leased
  shard is never evicted; leases of dead owners are removed.

Without a limit given, ``default_limit`` derives one when the cache opens: ``DEFAULT_LIMIT_SHARE`` (half) of
the bytes its file system has for it (free bytes for this user, plus what the cache already holds), so the
default never fills the disk.

Bytes of ``data`` + reserved bytes of ``part`` never exceed ``limit``: before a download the reader reserves
the shard's bytes, evicting unleased shards least recently used first; a shard another reader is already
downloading is waited for, not fetched twice.
"""
from __future__ import annotations

import contextlib
import errno
import fcntl
import logging
import os
import re
import stat
import threading
import time
import weakref
from dataclasses import dataclass

from converters.storage.owners import OWNER_RE as _OWNER
from converters.storage.owners import Owners, fault
from converters.util.digest import open_file_digest
from converters.util.errors import TfpipeError
from converters.util.units import format_size

from ..spec.streamopts import CACHE_SUBDIR, DEFAULT_LIMIT_SHARE

__all__ = ["ShardCache", "Acquired", "CACHE_SUBDIR", "PART_PREFIX", "default_limit"]

log = logging.getLogger(__name__)

PART_PREFIX = ".part."                            # downloads in progress, beside the finished shards
_KEY = re.compile(r"^[0-9a-f]{32}-[^/]+$")      # ShardRef.key: <sha256[:32]>-<name>


_SUBDIRS = ("data", "lease", "owners")


def _real_dir(path: str) -> None:
    """Create ``path`` if missing; refuse it (one line) when it is a link or not a directory."""
    try:
        os.mkdir(path, 0o755)
    except FileExistsError:
        pass
    except OSError as exc:
        raise fault(path, exc) from None
    mode = os.lstat(path).st_mode
    if stat.S_ISLNK(mode):
        raise fault(path, OSError(errno.ELOOP, "link"))
    if not stat.S_ISDIR(mode):
        raise fault(path, OSError(errno.ENOTDIR, "not a directory"))


def _fault_of(exc: OSError, default: str):
    """The ``CacheFault`` of an OS error inside the cache, naming the path it concerns."""
    path = exc.filename2 if exc.errno == errno.EISDIR and exc.filename2 else exc.filename
    return fault(os.fsdecode(path) if path else default, exc)


def _identity(st: os.stat_result) -> tuple:
    return (st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns)


def _digest_regular(path: str) -> tuple[int, str] | None:
    """``(bytes, sha256)`` of a regular file (never through a link, never blocking on a FIFO); None otherwise."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    except OSError:
        return None
    with os.fdopen(fd, "rb") as f:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            return None
        return open_file_digest(f)


@dataclass
class Acquired:
    """What ``try_acquire`` decided: ``ready`` (the verified file), ``download`` (a reserved part to fill), or
    ``wait`` (another reader is downloading it, or no room yet) with the reason."""

    state: str
    path: str = ""
    why: str = ""


_LIVE: "weakref.WeakSet[ShardCache]" = weakref.WeakSet()


def _after_fork() -> None:  # a thread of the parent may have held a handle's lock at the fork
    for cache in list(_LIVE):
        cache._tlock = threading.RLock()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork)


class ShardCache:
    """One process's handle on a host's cache directory (thread-safe; leases counted per process)."""

    def __init__(self, cache_dir: str, limit: int | None):
        self.cache_dir = os.path.abspath(cache_dir)
        check_writable(self.cache_dir)
        self.root = os.path.join(self.cache_dir, CACHE_SUBDIR)
        self.limit = limit
        _real_dir(self.root)
        for sub in _SUBDIRS:
            _real_dir(os.path.join(self.root, sub))
        self._lock_path = os.path.join(self.root, "lock")
        self._tlock = threading.RLock()
        self._fd = None
        self._pid = -1
        self._counts: dict[str, int] = {}
        self._verified: dict[str, tuple] = {}  # key -> identity of the file this process hashed
        self._owners = Owners(os.path.join(self.root, "owners"))
        self.evicted = 0
        self.scans = 0
        _LIVE.add(self)

    @property
    def owner(self) -> str:
        """This process's owner id (``<pid>-<random>``), alive while it holds ``owners/<owner>`` locked."""
        return self._owners.owner

    def lower_limit(self, limit: int | None) -> None:
        """Another spec in this process reads through this directory: the smallest limit holds."""
        with self._tlock:
            if limit is not None and (self.limit is None or limit < self.limit):
                self.limit = limit

    # -- the host-wide lock ----------------------------------------------------------------------------
    @contextlib.contextmanager
    def locked(self):
        """The host-wide lock, with the cache's layout checked (real directories, no links); an OS error inside
        becomes one line naming the path (``CacheFault``)."""
        with self._tlock:
            if self._pid != os.getpid():  # first use, or a forked child: its own lock, owner and leases
                if self._fd is not None:
                    os.close(self._fd)  # the parent's descriptor (closing it keeps the parent's lock)
                    self._fd = None
                try:
                    self._fd = os.open(self._lock_path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC | os.O_NOFOLLOW, 0o644)
                except OSError as exc:
                    raise fault(self._lock_path, exc) from None
                self._pid = os.getpid()
                self._counts = {}
            fcntl.flock(self._fd, fcntl.LOCK_EX)
            try:
                self._layout()
                self._owners.ensure()
                yield
            except OSError as exc:
                raise _fault_of(exc, self.root) from None
            finally:
                fcntl.flock(self._fd, fcntl.LOCK_UN)

    def _layout(self) -> None:
        """``tfpipe-stream`` and its folders are directories of their own, never links to somewhere else."""
        for path in (self.root, *(os.path.join(self.root, sub) for sub in _SUBDIRS)):
            _real_dir(path)

    def data_path(self, key: str) -> str:
        return os.path.join(self.root, "data", key)

    # -- state on disk (call with the lock held) -----------------------------------------------------
    def _scan(self) -> tuple[dict[str, int], dict[str, tuple[str, str]], set[str]]:
        """(data sizes by key, live parts by key -> (owner, path), leased keys); stale parts and leases removed."""
        data, parts, reserved = {}, {}, 0
        self.scans += 1
        for e in os.scandir(os.path.join(self.root, "data")):
            if e.name.startswith(PART_PREFIX):
                owner, _, rest = e.name[len(PART_PREFIX):].partition(".")
                size_s, _, key = rest.partition(".")
                if not _KEY.match(key) or not size_s.isdigit() or not _OWNER.match(owner):
                    continue  # not one of ours: never touched
                if not self._owners.alive(owner):
                    log.info("removing a partial download left by a reader that is gone: %s", e.path)
                    with contextlib.suppress(FileNotFoundError):
                        os.unlink(e.path)
                    continue
                parts[key] = (owner, e.path)
                reserved += int(size_s)
                continue
            if not _KEY.match(e.name):
                continue  # not one of ours: never counted, never touched
            with contextlib.suppress(OSError):
                if e.is_file(follow_symlinks=False):
                    data[e.name] = e.stat(follow_symlinks=False).st_size
        leased = set()
        for e in os.scandir(os.path.join(self.root, "lease")):
            owner, _, key = e.name.partition(".")
            if not _KEY.match(key) or not _OWNER.match(owner):
                continue
            if not self._owners.alive(owner):
                with contextlib.suppress(FileNotFoundError):
                    os.unlink(e.path)
                continue
            leased.add(key)
        for e in os.scandir(os.path.join(self.root, "owners")):  # gone owners' files, once their leases are
            if _OWNER.match(e.name) and not self._owners.alive(e.name):
                self._owners.forget(e.name)
        self._reserved = reserved
        return data, parts, leased

    def usage(self) -> int:
        """Bytes the cache holds or has reserved now."""
        with self.locked():
            data, _, _ = self._scan()
            return sum(data.values()) + self._reserved

    # -- leases ----------------------------------------------------------------------------------------
    def _lease_path(self, key: str) -> str:
        return os.path.join(self.root, "lease", f"{self.owner}.{key}")

    def _take_lease(self, key: str) -> None:
        n = self._counts.get(key, 0)
        if n == 0:
            os.close(os.open(self._lease_path(key), os.O_WRONLY | os.O_CREAT | os.O_NOFOLLOW | os.O_NONBLOCK, 0o644))
        self._counts[key] = n + 1

    def release(self, key: str) -> None:
        """Drop one use of ``key`` by this process; the last one removes the lease and marks the shard used now."""
        with self._tlock:
            n = self._counts.get(key, 0)
            if n <= 0 or self._pid != os.getpid():  # a forked child holds none of its parent's leases
                return
            if n > 1:
                self._counts[key] = n - 1
                return
            del self._counts[key]
            with contextlib.suppress(FileNotFoundError):
                os.unlink(self._lease_path(key))
            with contextlib.suppress(OSError, NotImplementedError):
                st = os.lstat(self.data_path(key))
                os.utime(self.data_path(key), ns=(time.time_ns(), st.st_mtime_ns), follow_symlinks=False)

    # -- acquire / commit ------------------------------------------------------------------------------
    def try_acquire(self, key: str, size: int, *, leased: bool = False) -> Acquired:
        """Lease ``key`` (unless ``leased``: this call repeats an earlier wait) and say what to do next."""
        with self.locked():
            if not leased:
                self._take_lease(key)
            data, parts, leases = self._scan()
            path = self.data_path(key)
            if key not in data and os.path.isdir(path):  # never fetched to be refused at the rename
                raise fault(path, OSError(errno.EISDIR, "is a directory"))
            if key in data:
                return Acquired("ready", path)
            if key in parts:
                return Acquired("wait", why=f"another reader ({parts[key][0]}) is fetching it")
            used = sum(data.values()) + self._reserved
            if self.limit is not None and used + size > self.limit:
                free = self._evict(data, leases | {key}, used + size - self.limit)
                used -= free
                if used + size > self.limit:
                    return Acquired("wait", why=f"{format_size(used)} of {format_size(self.limit)} in use by "
                                               f"shards other readers hold")
            part = os.path.join(self.root, "data", f"{PART_PREFIX}{self.owner}.{size}.{key}")
            fd = os.open(part, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644)
            os.close(fd)
            return Acquired("download", part)

    def _evict(self, data: dict[str, int], keep: set[str], need: int) -> int:
        """Remove unleased shards, least recently used first, until ``need`` bytes are free; bytes freed."""
        freed = 0
        candidates = []
        for key in data:
            if key in keep:
                continue
            with contextlib.suppress(OSError):
                candidates.append((os.lstat(self.data_path(key)).st_atime_ns, key))
        for _, key in sorted(candidates):
            if freed >= need:
                break
            with contextlib.suppress(FileNotFoundError):
                os.unlink(self.data_path(key))
                freed += data[key]
                self.evicted += 1
                log.debug("evicted %s (%s)", key, format_size(data[key]))
        return freed

    def commit(self, part: str, key: str, sha256: str) -> str:
        """Give a part checked against ``sha256`` its final name, so other readers see it ready."""
        path = self.data_path(key)
        try:
            with self.locked():
                os.replace(part, path)
        except BaseException:
            self.abandon(part)
            raise
        with self._tlock:
            with contextlib.suppress(OSError):  # hashed while it arrived: verified for this process
                self._verified[key] = _identity(os.lstat(path))
        log.debug("cached %s (sha256 %s...)", path, sha256[:12])
        return path

    def abandon(self, part: str) -> None:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(part)

    def check_ready(self, key: str, size: int, sha256: str) -> bool:
        """True when the ready file is the manifest's shard. Its bytes are hashed the first time this process
        uses it (size and mtime can be kept by whoever changed it); afterwards it is trusted while its identity
        (inode, size, mtime and ctime, which no user can set back) stays the one hashed. A file that fails is
        removed, so the next acquire fetches it."""
        path = self.data_path(key)
        try:
            st = os.lstat(path)
        except FileNotFoundError:
            return False
        if self._verified.get(key) == _identity(st):
            return True
        got = _digest_regular(path)
        if got == (size, sha256):
            self._verified[key] = _identity(st)
            return True
        log.warning("cached %s does not match the manifest (changed behind the cache's back): fetching it again",
                    path)
        self._verified.pop(key, None)
        with self.locked(), contextlib.suppress(FileNotFoundError):
            os.unlink(path)
        return False

    def leases_held(self) -> dict[str, int]:
        with self._tlock:
            return dict(self._counts)


def check_writable(cache_dir: str) -> None:
    """Refuse a cache directory that cannot be created or written, naming it."""
    try:
        os.makedirs(os.path.join(cache_dir, CACHE_SUBDIR), exist_ok=True)
    except OSError as exc:
        raise TfpipeError(f"stream_cache_dir {cache_dir}: cannot create it "
                          f"({os.strerror(exc.errno or errno.EIO)})") from None


def _existing(path: str) -> str:
    """``path``, or its nearest existing parent (the cache directory may not exist yet)."""
    path = os.path.abspath(path)
    while not os.path.isdir(path) and os.path.dirname(path) != path:
        path = os.path.dirname(path)
    return path


def _held(cache_dir: str) -> int:
    """Bytes the cache under ``cache_dir`` holds now: its shards and the bytes its downloads reserved."""
    total = 0
    with contextlib.suppress(OSError), os.scandir(os.path.join(cache_dir, CACHE_SUBDIR, "data")) as it:
        for e in it:
            if e.name.startswith(PART_PREFIX):
                size = e.name[len(PART_PREFIX):].partition(".")[2].partition(".")[0]
                total += int(size) if size.isdigit() else 0
            elif _KEY.match(e.name):
                with contextlib.suppress(OSError):
                    if e.is_file(follow_symlinks=False):
                        total += e.stat(follow_symlinks=False).st_size
    return total


def default_limit(cache_dir: str) -> tuple[int, str]:
    """The limit of a cache given none, and how it was derived (one phrase for logs and ``explain``):
    ``DEFAULT_LIMIT_SHARE`` of (the bytes free to this user on the file system of ``cache_dir`` + what the
    cache there already holds)."""
    cache_dir = os.path.abspath(cache_dir)
    where = _existing(cache_dir)
    try:
        st = os.statvfs(where)
    except OSError as exc:
        raise fault(where, exc) from None
    free, held = st.f_bavail * st.f_frsize, _held(cache_dir)
    limit = int((free + held) * DEFAULT_LIMIT_SHARE)
    return limit, (f"the default: {DEFAULT_LIMIT_SHARE:.0%} of {format_size(free)} free on the file system of "
                   f"{where} + {format_size(held)} the cache holds")
