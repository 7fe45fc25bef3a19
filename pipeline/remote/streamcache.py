"""The per-host shard cache shared by that host's readers (processes), coordinated through the file system.

Everything the cache creates lives under ``<cache_dir>/tfpipe-stream/`` and it deletes nothing else:

* ``lock`` — an ``fcntl`` lock held for a few file operations at a time (the kernel drops it with its process);
* ``data/<key>`` — verified shards (``key`` = ``<sha256[:32]>-<name>``), what TensorFlow opens; the file's
  mtime is a stamp derived from its sha256, so a file changed behind the cache's back is hashed again; its
  atime is the last use (eviction order);
* ``data/.part.<owner>.<bytes>.<key>`` — a download in progress; its name holds the bytes it reserved and its
  owner (``<pid>-<process start time>``), so the space is counted before the bytes arrive and a part whose owner
  died is removed by the next reader. It sits beside the finished shards, so one directory listing sees a
  download and its result never both (whoever samples the bytes under ``cache_dir`` sees at most the limit);
* ``lease/<owner>.<key>`` — an empty file while a reader process uses (or is about to use) the shard: a leased
  shard is never evicted; leases of dead owners are removed.

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
import threading
import time
from dataclasses import dataclass

from converters.util.digest import file_digest
from converters.util.errors import TfpipeError
from converters.util.units import format_size

from ..spec.streamopts import CACHE_SUBDIR

__all__ = ["ShardCache", "Acquired", "owner_id", "CACHE_SUBDIR", "stamp_of", "PART_PREFIX"]

log = logging.getLogger(__name__)

PART_PREFIX = ".part."                            # downloads in progress, beside the finished shards
_KEY = re.compile(r"^[0-9a-f]{32}-[^/]+$")      # ShardRef.key: <sha256[:32]>-<name>
_OWNER = re.compile(r"^[0-9]+-[0-9]+$")         # owner_id(): <pid>-<start time>
_STAMP_BASE = 1_000_000_000  # 2001-09-09: stamps are seconds after it, taken from the sha256


def stamp_of(sha256: str) -> int:
    """The mtime (whole seconds) the cache gives a verified shard: fixed by its content."""
    return _STAMP_BASE + int(sha256[:5], 16)


def _start_time(pid: int) -> str:
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            return f.read().rsplit(b")", 1)[1].split()[19].decode()
    except (OSError, IndexError):
        return "0"


def owner_id(pid: int | None = None) -> str:
    """``<pid>-<start time>``: who holds a lease or a part (a reused pid has another start time)."""
    pid = os.getpid() if pid is None else pid
    return f"{pid}-{_start_time(pid)}"


def _alive(owner: str) -> bool:
    pid_s, _, start = owner.partition("-")
    try:
        pid = int(pid_s)
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    except (ValueError, OverflowError):
        return False
    return start in ("0", _start_time(pid))


@dataclass
class Acquired:
    """What ``try_acquire`` decided: ``ready`` (the verified file), ``download`` (a reserved part to fill), or
    ``wait`` (another reader is downloading it, or no room yet) with the reason."""

    state: str
    path: str = ""
    why: str = ""


class ShardCache:
    """One process's handle on a host's cache directory (thread-safe; leases counted per process)."""

    def __init__(self, cache_dir: str, limit: int | None):
        self.cache_dir = os.path.abspath(cache_dir)
        check_writable(self.cache_dir)
        self.root = os.path.join(self.cache_dir, CACHE_SUBDIR)
        self.limit = limit
        for sub in ("data", "lease"):
            os.makedirs(os.path.join(self.root, sub), exist_ok=True)
        self._lock_path = os.path.join(self.root, "lock")
        self._tlock = threading.RLock()
        self._fd = None
        self._counts: dict[str, int] = {}
        self.owner = owner_id()
        self.evicted = 0

    # -- the host-wide lock ----------------------------------------------------------------------------
    @contextlib.contextmanager
    def locked(self):
        with self._tlock:
            if self._fd is None or self._owner_changed():
                self._fd = os.open(self._lock_path, os.O_RDWR | os.O_CREAT, 0o644)
                self.owner = owner_id()
            fcntl.flock(self._fd, fcntl.LOCK_EX)
            try:
                yield
            finally:
                fcntl.flock(self._fd, fcntl.LOCK_UN)

    def _owner_changed(self) -> bool:  # a forked child gets its own lock and identity
        return not self.owner.startswith(f"{os.getpid()}-")

    def data_path(self, key: str) -> str:
        return os.path.join(self.root, "data", key)

    # -- state on disk (call with the lock held) -----------------------------------------------------
    def _scan(self) -> tuple[dict[str, int], dict[str, tuple[str, str]], set[str]]:
        """(data sizes by key, live parts by key -> (owner, path), leased keys); stale parts and leases removed."""
        data, parts, reserved = {}, {}, 0
        for e in os.scandir(os.path.join(self.root, "data")):
            if e.name.startswith(PART_PREFIX):
                owner, _, rest = e.name[len(PART_PREFIX):].partition(".")
                size_s, _, key = rest.partition(".")
                if not _KEY.match(key) or not size_s.isdigit() or not _OWNER.match(owner):
                    continue  # not one of ours: never touched
                if not _alive(owner):
                    log.info("removing a partial download left by a dead reader: %s", e.path)
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
            if owner != self.owner and not _alive(owner):
                with contextlib.suppress(FileNotFoundError):
                    os.unlink(e.path)
                continue
            leased.add(key)
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
            with open(self._lease_path(key), "ab"):
                pass
        self._counts[key] = n + 1

    def release(self, key: str) -> None:
        """Drop one use of ``key`` by this process; the last one removes the lease and marks the shard used now."""
        with self._tlock:
            n = self._counts.get(key, 0)
            if n <= 0:
                return
            if n > 1:
                self._counts[key] = n - 1
                return
            del self._counts[key]
            with contextlib.suppress(FileNotFoundError):
                os.unlink(self._lease_path(key))
            with contextlib.suppress(OSError):
                st = os.stat(self.data_path(key))
                os.utime(self.data_path(key), ns=(time.time_ns(), st.st_mtime_ns))

    # -- acquire / commit ------------------------------------------------------------------------------
    def try_acquire(self, key: str, size: int, *, leased: bool = False) -> Acquired:
        """Lease ``key`` (unless ``leased``: this call repeats an earlier wait) and say what to do next."""
        with self.locked():
            if not leased:
                self._take_lease(key)
            data, parts, leases = self._scan()
            path = self.data_path(key)
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
                candidates.append((os.stat(self.data_path(key)).st_atime_ns, key))
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
        """Give a verified part its final name (stamped), so other readers see it ready."""
        stamp = stamp_of(sha256)
        os.utime(part, (time.time(), stamp))
        path = self.data_path(key)
        with self.locked():
            os.replace(part, path)
        return path

    def abandon(self, part: str) -> None:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(part)

    def check_ready(self, key: str, size: int, sha256: str) -> bool:
        """True when the ready file is the manifest's shard: size and stamp intact (else hashed again; a
        file that fails is removed, so the next acquire fetches it)."""
        path = self.data_path(key)
        try:
            st = os.stat(path)
        except FileNotFoundError:
            return False
        if st.st_size == size and int(st.st_mtime) == stamp_of(sha256):
            return True
        got = file_digest(path)
        if got == (size, sha256):
            with contextlib.suppress(OSError):
                os.utime(path, (st.st_atime, stamp_of(sha256)))
            return True
        log.warning("cached %s does not match the manifest (changed behind the cache's back): fetching it again",
                    path)
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
        raise TfpipeError(f"cache_dir {cache_dir}: cannot create it ({os.strerror(exc.errno or errno.EIO)})") from None
