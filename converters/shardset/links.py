"""A set holds its own files: on a local disk no name of a set (a shard, a part's manifest, a side file such as
``vocab/C1.txt``) may pass through a symbolic link in any of its components, or reading it could read, and
replacing or deleting it could change, files outside the set. ``verify``, ``--vocab-from`` and every commit
ask here; an object store has no links."""
from __future__ import annotations

import os
import stat
from typing import Iterable

from ..util.errors import IntegrityError

__all__ = ["linked_component", "link_problem", "check_no_links", "LINKED"]

LINKED = "is a symbolic link; a shard set holds its own files"


def linked_component(root: str, name: str) -> str | None:
    """The first leading part of ``name`` (relative to the directory ``root``, ``/``-separated) that is a
    symbolic link, or None (parts that do not exist are no link)."""
    parts = [p for p in str(name).split("/") if p]
    path = root
    for i, part in enumerate(parts):
        path = os.path.join(path, part)
        try:
            mode = os.lstat(path).st_mode
        except OSError:  # missing, or a parent that is not a directory: nothing to follow
            return None
        if stat.S_ISLNK(mode):
            return "/".join(parts[:i + 1])
    return None


def link_problem(storage, name: str) -> str | None:
    """Why the set at ``storage`` cannot hold ``name`` through links (``"vocab/C1.txt: vocab is a symbolic
    link; ..."``), or None (no link, or not a local disk)."""
    root = storage.local_path("")
    if root is None:
        return None
    part = linked_component(root, name)
    if part is None:
        return None
    return f"{name}: {LINKED}" if part == name.strip("/") else f"{name}: {part} {LINKED}"


def check_no_links(storage, names: Iterable[str], where: str) -> None:
    """Raise IntegrityError naming the first of ``names`` that passes through a link at ``storage``."""
    for name in dict.fromkeys(names):
        problem = link_problem(storage, name)
        if problem:
            raise IntegrityError(f"{where}/{problem}; tfpipe touched nothing")
