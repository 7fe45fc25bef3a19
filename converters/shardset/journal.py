"""The commit's journal: what one ``commit_set`` is about to do, written (atomically, one PUT on S3) before it
touches anything, deleted as its very last step. A run killed inside a commit leaves it behind, and the next
run into that location reads it to bring back exactly one complete set (``commit.recover``): the new one when
its manifest was published (the ``index.json`` there has the journal's ``manifest_sha256``), else the old one,
byte for byte.

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

__all__ = ["Journal", "journal_name", "is_journal", "aside_name", "ASIDE_PREFIX", "JOURNAL_PREFIX"]

ASIDE_PREFIX = f"{TMP_PREFIX}old."       # old files moved aside during a commit (no run id has a ".")
JOURNAL_PREFIX = f"{TMP_PREFIX}commit."  # ``.tfpipe-tmp-commit.<run>.json``
_RUN = re.compile(r"[A-Za-z0-9_-]{1,64}")
_VERSION = 1


def journal_name(run_id: str) -> str:
    return f"{JOURNAL_PREFIX}{run_id}.json"


def is_journal(name: str) -> bool:
    return name.startswith(JOURNAL_PREFIX) and name.endswith(".json") and "/" not in name


def aside_name(name: str, run_id: str) -> str:
    """Where the old file ``name`` waits during a commit: the same directory, a temporary name."""
    head, base = posixpath.split(name)
    return posixpath.join(head, f"{ASIDE_PREFIX}{run_id}-{base}") if head else f"{ASIDE_PREFIX}{run_id}-{base}"


def _check_name(name, what: str) -> str:
    """A name relative to the location: no absolute path, no ``..``, no empty part, no control character."""
    if (not isinstance(name, str) or not name or name.startswith("/") or "\\" in name
            or any(p in ("", ".", "..") for p in name.split("/")) or any(ord(c) < 32 for c in name)):
        raise ValueError(f"commit journal: {what} {name!r} is not a name inside the location")
    return name


@dataclass(frozen=True)
class Journal:
    """One commit: ``moves`` (temporary name, final name) in the order they are published; ``parts`` (a
    group's part manifests written after them); ``aside``: the old names moved aside first, in that order
    (``index.json`` first when there are any); ``retire``: old names the new set does not list, deleted once it
    is committed; ``dirs``: directories the commit creates (a local disk), removed again on roll-back."""

    run: str
    manifest_sha256: str
    moves: tuple[tuple[str, str], ...] = ()
    parts: tuple[str, ...] = ()
    aside: tuple[str, ...] = ()
    retire: tuple[str, ...] = ()
    dirs: tuple[str, ...] = ()

    def __post_init__(self):
        if not isinstance(self.run, str) or not _RUN.fullmatch(self.run):
            raise ValueError(f"commit journal: run id {self.run!r} is not a run id")
        if not is_sha256(self.manifest_sha256):
            raise ValueError(f"commit journal: manifest_sha256 {self.manifest_sha256!r} is not a sha256 digest")
        for pair in self.moves:
            if not isinstance(pair, tuple) or len(pair) != 2:
                raise ValueError(f"commit journal: a move must be (temporary, final), got {pair!r}")
            _check_name(pair[0], "temporary name")
            _check_name(pair[1], "final name")
        for field in ("parts", "aside", "retire", "dirs"):
            for name in getattr(self, field):
                _check_name(name, field[:-1] if field.endswith("s") else field)

    @property
    def finals(self) -> set[str]:
        return {f for _, f in self.moves} | set(self.parts)

    def to_bytes(self) -> bytes:
        doc = {"format_version": _VERSION, "run": self.run, "manifest_sha256": self.manifest_sha256,
               "moves": [list(m) for m in self.moves], "parts": list(self.parts), "aside": list(self.aside),
               "retire": list(self.retire), "dirs": list(self.dirs)}
        return json.dumps(doc, sort_keys=True, separators=(",", ":")).encode()

    @classmethod
    def from_bytes(cls, raw: bytes, where: str) -> "Journal":
        """The journal stored at ``where``; ``IntegrityError`` naming it when it is not one."""
        try:
            doc = json.loads(raw.decode("utf-8"))
            if not isinstance(doc, dict) or doc.get("format_version") != _VERSION:
                raise ValueError(f"format_version {doc.get('format_version') if isinstance(doc, dict) else doc!r}"
                                 f" is not {_VERSION}")
            lists = {k: doc.get(k, []) for k in ("moves", "parts", "aside", "retire", "dirs")}
            if not all(isinstance(v, list) for v in lists.values()):
                raise ValueError("a list field is not a list")
            return cls(run=doc.get("run"), manifest_sha256=doc.get("manifest_sha256"),
                       moves=tuple(tuple(m) if isinstance(m, list) else m for m in lists["moves"]),
                       parts=tuple(lists["parts"]), aside=tuple(lists["aside"]), retire=tuple(lists["retire"]),
                       dirs=tuple(lists["dirs"]))
        except (ValueError, UnicodeDecodeError, TypeError) as exc:
            raise IntegrityError(f"{where}: not a tfpipe commit journal ({exc}); an interrupted commit cannot "
                                 "be recovered from it: look at the .tfpipe-tmp-old.* files there (the old set "
                                 "moved aside) before removing anything") from None
