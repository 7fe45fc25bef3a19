"""What a commit journal may touch: the identity of a set's location, what a file there holds (size and
sha256), whether a journal found there belongs to the set (``commit.recover`` acts on nothing else), and the
journal read with a cap. The recovery itself is ``commit``'s (the one module that renames shards)."""
from __future__ import annotations

import hashlib
import os
import stat

from ..storage import Storage
from ..storage.download import read_object
from ..util.digest import file_digest
from ..util.errors import IntegrityError
from ..util.safe_json import read_bounded
from .journal import MAX_JOURNAL_BYTES, Journal, aside_name, journal_name
from .manifest import MANIFEST_NAME

__all__ = ["location_id", "digest", "holds", "read_journal", "foreign_reason", "published", "ABSENT"]

ABSENT = None
_CHUNK = 8 << 20
_NOT_REGULAR = (-1, "")


def location_id(storage: Storage) -> str:
    """The identity of the location: ``local:<device>:<inode>`` of its directory (a copy of the directory is
    another location, the directory renamed is the same one), else its URL."""
    local = storage.local_path("")
    if local is None:
        return f"url:{storage.url.rstrip('/')}"
    try:
        st = os.stat(local)
    except OSError:
        return "local:missing"
    return f"local:{st.st_dev}:{st.st_ino}"


def digest(storage: Storage, name: str) -> tuple[int, str] | None:
    """``(size, sha256)`` of the file ``name`` at the location, None when there is none; a local name that is
    not a regular file (a link, a FIFO, a directory) gives ``(-1, "")``, which matches no record."""
    local = storage.local_path(name)
    sha = hashlib.sha256()
    if local is not None:
        try:
            mode = os.lstat(local).st_mode
        except FileNotFoundError:
            return ABSENT
        if not stat.S_ISREG(mode):
            return _NOT_REGULAR
        return file_digest(local)
    if not storage.exists(name):
        return ABSENT
    if not hasattr(storage, "size"):  # a file system without a size call: the whole object
        data = storage.read_bytes(name)
        return len(data), hashlib.sha256(data).hexdigest()
    size = storage.size(name)
    for start in range(0, size, _CHUNK):
        sha.update(storage.read_range(name, start, min(size, start + _CHUNK)))
    return size, sha.hexdigest()


def _size(storage: Storage, name: str) -> int | None:
    local = storage.local_path(name)
    try:
        if local is not None:
            st = os.lstat(local)
            return st.st_size if stat.S_ISREG(st.st_mode) else -1
        if not storage.exists(name):
            return None
        return storage.size(name) if hasattr(storage, "size") else len(storage.read_bytes(name))
    except FileNotFoundError:
        return None


def holds(storage: Storage, name: str, record: tuple[int, str] | None) -> bool:
    """Whether the file ``name`` holds exactly ``record`` (size, sha256); the size is compared first."""
    if record is None or _size(storage, name) != record[0]:
        return False
    return digest(storage, name) == tuple(record)


def read_journal(storage: Storage, name: str, where: str) -> Journal:
    """The journal ``name`` at the location, read with a cap (``MAX_JOURNAL_BYTES``; a regular file only on a
    local disk): ``TfpipeError`` naming it for anything else."""
    local = storage.local_path(name)
    raw = read_bounded(local, MAX_JOURNAL_BYTES) if local is not None else read_object(storage, name,
                                                                                     cap=MAX_JOURNAL_BYTES)
    journal = Journal.from_bytes(raw, f"{where}/{name}")
    if name != journal_name(journal.run):
        raise IntegrityError(f"{where}/{name}: the commit journal names run {journal.run!r}, not its own; tfpipe "
                             "touched nothing there: look at it before removing anything")
    return journal


def _sha(storage: Storage, name: str) -> str | None:
    found = digest(storage, name)
    return None if found is None else found[1]


def published(storage: Storage, journal: Journal) -> bool:
    """Whether the new manifest of ``journal`` is the one at the location (the commit happened)."""
    return _sha(storage, MANIFEST_NAME) == journal.manifest_sha256


def foreign_reason(storage: Storage, journal: Journal) -> str | None:
    """Why the journal ``journal`` found at the location was not written for the set there, or None when it was:
    the location's identity must be the one it recorded, and the manifest there (or set aside by its run) the
    new one it names or the old one it replaces (no manifest at all only when it replaced none)."""
    here = location_id(storage)
    if journal.location != here:
        return f"it was written for another location ({journal.where or journal.location}), this is {here}"
    current = _sha(storage, MANIFEST_NAME)
    if current == journal.manifest_sha256:
        return None
    held = _sha(storage, aside_name(MANIFEST_NAME, journal.run))
    found = {s for s in (current, held) if s is not None}
    old = journal.old_manifest_sha256
    if found - {old} or (old is not None and not found):
        return (f"the manifest here ({(current or held or 'none')[:12]}) is neither the old one it replaces "
                f"({(old or 'none')[:12]}) nor the new one ({journal.manifest_sha256[:12]})")
    return None
