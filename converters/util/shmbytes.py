"""Large arrays from worker processes to the main process through a shared-memory directory.

A process pool returns its results pickled through a pipe: a worker copies an array into the pickle and the
pipe, the main process copies it out and unpickles it, 64 KiB at a time with a context switch each (measured:
1.8 CPU-s more for the 640 MB of records of a 750 MB LibSVM conversion on two workers than on one). And a worker
killed while it writes a large result into the pipe leaves the pool's reader waiting for the rest of it for
ever (CPython's process pool, which notices a dead worker only between results). Here a worker writes each
large array once into a file of a directory in memory (``/dev/shm``) and sends only its name, so what goes
through the pipe is small (one write: far less likely to be cut by a kill); the main process maps the file
(no copy) and unlinks it at once, so its memory goes with the last view of the array.

* ``scratch_dir()``: a new private directory in ``/dev/shm`` for one run (None where there is none: the pipe it is);
* ``to_scratch(array, dir)`` in a worker: a ``ScratchArray`` naming the file, or the array itself when it is
  small or the directory cannot take it (full, gone): a result is never lost, only sent the slow way;
* ``from_scratch(value)`` in the main process: the array (mapped, read-only), whatever ``to_scratch`` returned;
* ``remove_scratch(dir)``: the directory and whatever a failed run left in it.

A run killed outright (``kill -9``, the OOM killer) cannot remove its directory; the next run removes such
leftovers: directories of this user named for a process that no longer exists and untouched for
``STALE_SECONDS`` (a live run's directory changes with every block).
"""
from __future__ import annotations

import itertools
import logging
import mmap
import os
import re
import shutil
import tempfile
import time
from dataclasses import dataclass

import numpy as np

from .fs import create_new

__all__ = ["ScratchArray", "scratch_dir", "to_scratch", "from_scratch", "remove_scratch", "remove_stale",
           "worth_sharing", "SHM_ROOT", "PREFIX", "MIN_SCRATCH_BYTES", "STALE_SECONDS"]

log = logging.getLogger(__name__)

SHM_ROOT = "/dev/shm"
MIN_SCRATCH_BYTES = 4 << 10  # smaller arrays go through the pipe (a message this small is one write)
STALE_SECONDS = 600
PREFIX = "tfpipe-"            # a scratch directory is PREFIX + the pid of the run + "-" + a random tail
_NAME = re.compile(re.escape(PREFIX) + r"(\d+)-[^/]+")
_names = itertools.count()


@dataclass(frozen=True)
class ScratchArray:
    """An array left by a worker in a scratch file: its bytes in C order, of ``dtype`` and ``shape``."""

    path: str
    dtype: str
    shape: tuple[int, ...]

    def __post_init__(self):
        if any(int(n) < 0 for n in self.shape):
            raise ValueError(f"shape must not be negative, got {self.shape!r}")
        np.dtype(self.dtype)    # a bad dtype is a TypeError naming it

    @property
    def nbytes(self) -> int:
        return int(np.prod(self.shape, dtype=np.int64)) * np.dtype(self.dtype).itemsize


def scratch_dir(root: str = SHM_ROOT) -> str | None:
    """A new private directory under ``root`` (a memory file system), or None when there is none to use."""
    if not os.path.isdir(root) or not os.access(root, os.W_OK | os.X_OK):
        return None
    remove_stale(root)
    try:
        return tempfile.mkdtemp(prefix=f"{PREFIX}{os.getpid()}-", dir=root)
    except OSError as exc:
        log.debug("no scratch directory in %s (%s): worker results go through the pipe", root, exc)
        return None


def worth_sharing(value) -> bool:
    """Whether ``value`` is a NumPy array of plain numbers of at least ``MIN_SCRATCH_BYTES``: one to hand over
    through shared memory rather than the pipe."""
    return isinstance(value, np.ndarray) and not value.dtype.hasobject and value.nbytes >= MIN_SCRATCH_BYTES


def to_scratch(array, directory: str | None):
    """``array`` (a NumPy array of plain numbers) written to a new file in ``directory``: its ``ScratchArray``;
    anything else, a small array, or one the directory cannot take (the partial file removed), as it is."""
    if directory is None or not worth_sharing(array):
        return array
    path = os.path.join(directory, f"{os.getpid()}-{next(_names)}")
    try:
        with create_new(path, 0o600) as f:
            f.write(memoryview(np.ascontiguousarray(array)).cast("B"))
    except OSError as exc:
        log.debug("scratch file %s not written (%s): the result goes through the pipe", path, exc)
        try:
            os.unlink(path)
        except OSError:
            pass
        return array
    return ScratchArray(path, array.dtype.str, tuple(int(n) for n in array.shape))


def from_scratch(value):
    """The array ``value`` stands for: a ``ScratchArray`` file mapped read-only and unlinked (its memory is
    freed with the array's last view), anything else as it is."""
    if not isinstance(value, ScratchArray):
        return value
    try:
        with open(value.path, "rb") as f:
            mm = mmap.mmap(f.fileno(), value.nbytes, flags=mmap.MAP_SHARED | getattr(mmap, "MAP_POPULATE", 0),
                           prot=mmap.PROT_READ)
        return np.frombuffer(mm, value.dtype).reshape(value.shape)
    finally:
        try:
            os.unlink(value.path)
        except FileNotFoundError:
            pass


def remove_scratch(directory: str | None) -> None:
    if directory is not None:
        shutil.rmtree(directory, ignore_errors=True)


def remove_stale(root: str = SHM_ROOT, *, now: float | None = None) -> list[str]:
    """Remove the scratch directories under ``root`` that runs killed outright left: this user's, named for a
    process that no longer exists, unchanged for ``STALE_SECONDS``. Returns the paths removed."""
    from .workerpool import alive

    now = time.time() if now is None else now
    removed = []
    try:
        names = os.listdir(root)
    except OSError:
        return removed
    for name in names:
        m = _NAME.fullmatch(name)
        if m is None or alive(int(m.group(1))):
            continue
        path = os.path.join(root, name)
        try:
            st = os.lstat(path)
        except OSError:
            continue
        if st.st_uid == os.getuid() and os.path.isdir(path) and not os.path.islink(path) \
                and now - st.st_mtime > STALE_SECONDS:
            shutil.rmtree(path, ignore_errors=True)
            log.info("removed %s, the scratch directory of a run that was killed", path)
            removed.append(path)
    return removed
