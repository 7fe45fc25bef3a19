"""The commit's journal: what one ``commit_set`` is about to do, written (atomically, one PUT on S3) before it
touches anything, deleted as its very last step. A run killed inside a commit leaves it behind, and the next
run into that location reads it to bring back exactly one complete set (``commit.recover``): the new one when
its manifest was published (the ``index.json`` there has the journal's ``manifest_sha256``), else the old one,
byte for byte.

A journal names what it may touch and what each file must hold, so that recovery acts only on what it can
prove is its own: the set it was written for (``location``: the directory's device and inode on a local disk,
the URL of an object store; ``old_manifest_sha256``: the manifest it replaces, None for an empty location), each
new shard and part manifest with its size and sha256 (``moves``, ``parts``), each old file it deletes with its
size and sha256 (``retire``), and temporary names that carry its run id (a move's temporary name,
``.tfpipe-tmp-<run>-...`` or a file in the run's work area ``.tfpipe-tmp-<run>/``; an old file set aside,
``.tfpipe-tmp-old.<run>-<name>``).

Pure: the model, its JSON and its names; no I/O.
"""
from __future__ import annotations

import json
import posixpath
import re
from dataclasses import dataclass

from ..storage import TMP_PREFIX
from ..util.errors import IntegrityError
from ..util.fs import is_sha256
from ..util.safe_json import UnsafeFileError, loads_bounded
from .manifest import MANIFEST_NAME

__all__ = ["Journal", "journal_name", "is_journal", "aside_name", "ASIDE_PREFIX", "JOURNAL_PREFIX",
           "MAX_JOURNAL_BYTES", "run_prefix"]

ASIDE_PREFIX = f"{TMP_PREFIX}old."       # old files moved aside during a commit (no run id has a ".")
JOURNAL_PREFIX = f"{TMP_PREFIX}commit."  # ``.tfpipe-tmp-commit.<run>.json``
MAX_JOURNAL_BYTES = 64 << 20             # ~200,000 shards; a larger file is refused, never read
_RUN = re.compile(r"[A-Za-z0-9_-]{1,64}")
_VERSION = 2
_DEPTH = 4                               # object > list of entries > entry: 3 levels


def journal_name(run_id: str) -> str:
    return f"{JOURNAL_PREFIX}{run_id}.json"


def is_journal(name: str) -> bool:
    return name.startswith(JOURNAL_PREFIX) and name.endswith(".json") and "/" not in name


def run_prefix(run_id: str) -> str:
    """How the temporary names of run ``run_id``'s new shards begin (in their own directory; its work area is
    this without the last ``-``)."""
    return f"{TMP_PREFIX}{run_id}-"


def aside_name(name: str, run_id: str) -> str:
    """Where the old file ``name`` waits during a commit: the same directory, a temporary name."""
    head, base = posixpath.split(name)
    return posixpath.join(head, f"{ASIDE_PREFIX}{run_id}-{base}") if head else f"{ASIDE_PREFIX}{run_id}-{base}"


def _check_name(name, what: str) -> str:
    """A name relative to the location: no absolute path, no ``..``, no empty part, no control character."""
    if (not isinstance(name, str) or not name or len(name) > 4096 or name.startswith("/") or "\\" in name
            or any(p in ("", ".", "..") for p in name.split("/")) or any(ord(c) < 32 for c in name)):
        raise ValueError(f"{what} {name!r} is not a name inside the location")
    return name


def _check_record(entry, what: str, names: int) -> tuple:
    """``(name..., size, sha256)``: ``names`` names, then a size and a digest."""
    if not isinstance(entry, tuple) or len(entry) != names + 2:
        raise ValueError(f"a {what} entry must be ({'name, ' * names}size, sha256), got {entry!r}")
    size, sha = entry[-2:]
    if not isinstance(size, int) or isinstance(size, bool) or size < 0:
        raise ValueError(f"{what} {entry[0]!r}: size {size!r} is not a byte count")
    if not is_sha256(sha):
        raise ValueError(f"{what} {entry[0]!r}: {sha!r} is not a sha256 digest")
    return entry


def _base(name: str) -> str:
    return name.rsplit("/", 1)[-1]


@dataclass(frozen=True)
class Journal:
    """One commit: ``moves`` (temporary name, final name, size, sha256 of the new shard) in the order they are
    published; ``parts`` (name, size, sha256: a group's part manifests written after them); ``aside``: the old
    names moved aside first, in that order (``index.json`` first when there are any); ``retire`` (name, size,
    sha256): old files the new set does not list, deleted once it is committed; ``dirs``: directories the
    commit creates (a local disk), removed again on roll-back when empty. ``location``: the identity of the
    set's location; ``where``: how the run named it (for messages)."""

    run: str
    manifest_sha256: str
    location: str
    old_manifest_sha256: str | None = None
    where: str = ""
    moves: tuple[tuple[str, str, int, str], ...] = ()
    parts: tuple[tuple[str, int, str], ...] = ()
    aside: tuple[str, ...] = ()
    retire: tuple[tuple[str, int, str], ...] = ()
    dirs: tuple[str, ...] = ()

    def __post_init__(self):
        if not isinstance(self.run, str) or not _RUN.fullmatch(self.run):
            raise ValueError(f"run id {self.run!r} is not a run id")
        for key in ("manifest_sha256", "old_manifest_sha256"):
            value = getattr(self, key)
            if not is_sha256(value) and not (value is None and key == "old_manifest_sha256"):
                raise ValueError(f"{key} {value!r} is not a sha256 digest")
        if not isinstance(self.location, str) or not self.location or len(self.location) > 4096:
            raise ValueError(f"location {self.location!r} is not a location")
        if not isinstance(self.where, str) or len(self.where) > 4096:
            raise ValueError(f"where {self.where!r} is not a location")
        mine = run_prefix(self.run)
        for entry in self.moves:
            tmp, final = _check_record(entry, "move", 2)[:2]
            if not any(p.startswith(mine) or p == mine[:-1] for p in _check_name(tmp, "temporary name").split("/")):
                raise ValueError(f"temporary name {tmp!r} is not one of run {self.run}'s ({mine}..., or inside "
                                 f"{mine[:-1]}/)")
            base = _base(_check_name(final, "final name"))
            if base.startswith(TMP_PREFIX) or base == MANIFEST_NAME:
                raise ValueError(f"final name {final!r} cannot be a shard")
        for entry in self.parts:
            name = _check_name(_check_record(entry, "part", 1)[0], "part manifest")
            if "/" not in name or _base(name) != MANIFEST_NAME:
                raise ValueError(f"part manifest {name!r} is not <part>/{MANIFEST_NAME}")
        for i, name in enumerate(self.aside):
            _check_name(name, "old name")
            if _base(name).startswith(TMP_PREFIX) or (name == MANIFEST_NAME and i != 0):
                raise ValueError(f"old name {name!r} cannot be set aside")
        for entry in self.retire:
            name = _check_name(_check_record(entry, "retired file", 1)[0], "retired file")
            if name == MANIFEST_NAME or _base(name).startswith(TMP_PREFIX):
                raise ValueError(f"retired file {name!r} cannot be retired")
        parents = {posixpath.dirname(n) for n in self.finals}
        for name in self.dirs:
            if _check_name(name, "directory") not in parents:
                raise ValueError(f"directory {name!r} holds none of the commit's new files")

    @property
    def finals(self) -> set[str]:
        return {m[1] for m in self.moves} | {p[0] for p in self.parts}

    def new_record(self, name: str) -> tuple[int, str] | None:
        """(size, sha256) the commit's new file ``name`` holds (a shard or a part manifest), or None."""
        for entry in self.moves:
            if entry[1] == name:
                return entry[2], entry[3]
        for entry in self.parts:
            if entry[0] == name:
                return entry[1], entry[2]
        return None

    def to_bytes(self) -> bytes:
        doc = {"format_version": _VERSION, "run": self.run, "manifest_sha256": self.manifest_sha256,
               "old_manifest_sha256": self.old_manifest_sha256, "location": self.location, "where": self.where,
               "moves": [list(m) for m in self.moves], "parts": [list(p) for p in self.parts],
               "aside": list(self.aside), "retire": [list(r) for r in self.retire], "dirs": list(self.dirs)}
        return json.dumps(doc, sort_keys=True, separators=(",", ":")).encode()

    @classmethod
    def from_bytes(cls, raw: bytes, where: str) -> "Journal":
        """The journal stored at ``where``; ``IntegrityError`` naming it when it is not one (of this version)."""
        try:
            doc = loads_bounded(raw, where, max_depth=_DEPTH)
            if not isinstance(doc, dict) or doc.get("format_version") != _VERSION:
                raise ValueError(f"format_version {doc.get('format_version') if isinstance(doc, dict) else doc!r}"
                                 f" is not {_VERSION}")
            lists = {k: doc.get(k, []) for k in ("moves", "parts", "aside", "retire", "dirs")}
            if not all(isinstance(v, list) for v in lists.values()):
                raise ValueError("a list field is not a list")

            def rows(key):
                return tuple(tuple(m) if isinstance(m, list) else m for m in lists[key])

            return cls(run=doc.get("run"), manifest_sha256=doc.get("manifest_sha256"),
                       location=doc.get("location"), old_manifest_sha256=doc.get("old_manifest_sha256"),
                       where=doc.get("where", ""), moves=rows("moves"), parts=rows("parts"),
                       aside=tuple(lists["aside"]), retire=rows("retire"), dirs=tuple(lists["dirs"]))
        except UnsafeFileError as exc:
            raise IntegrityError(f"not a tfpipe commit journal: {exc}; tfpipe touched nothing there") from None
        except (ValueError, UnicodeDecodeError, TypeError) as exc:
            raise IntegrityError(f"{where}: not a tfpipe commit journal ({exc}); tfpipe touched nothing there: "
                                 "look at the .tfpipe-tmp-old.* files there (an old set moved aside) before "
                                 "removing anything") from None
