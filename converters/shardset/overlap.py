"""Overlaps between what a run reads and where it writes, refused before anything is touched.

* ``within(inner, outer)``: pure — is location ``inner`` the location ``outer`` or inside it? Local paths and
  ``scheme://bucket/prefix`` URLs compare by path components (``s3://b/data`` holds ``s3://b/data/x`` but not
  ``s3://b/data2``); a local path never overlaps a URL.
* ``resolve(location)``: the form ``within`` compares — a local path absolute with its symbolic links followed
  (as far as it exists), a URL with its slashes normalized.
* ``check_disjoint(out, sources)``: refuse an output inside a source or a source inside the output (an
  ``OverlapError`` naming both), and an output that is a part of a group (``G/label=<v>`` while ``G/index.json``
  lists it): the group would stop agreeing with its part.
"""
from __future__ import annotations

import os
import posixpath
import re
from typing import Iterable

from ..util.errors import OverlapError
from .manifest import MANIFEST_NAME

__all__ = ["within", "resolve", "check_disjoint", "OverlapError", "group_of_part"]

_SCHEME = re.compile(r"^[A-Za-z][A-Za-z0-9+.-]*://")


def _parts(location: str) -> tuple[str, ...]:
    m = _SCHEME.match(location)
    if m:
        scheme = m.group(0).lower()
        return (scheme,) + tuple(p for p in location[m.end():].split("/") if p)
    return ("",) + tuple(p for p in location.split(os.sep) if p)


def within(inner: str, outer: str) -> bool:
    """Pure: is ``inner`` the same location as ``outer`` or inside it (both as ``resolve`` gives them)?"""
    a, b = _parts(str(inner)), _parts(str(outer))
    return len(a) >= len(b) and a[:len(b)] == b


def resolve(location: str | os.PathLike) -> str:
    """A location in the form ``within`` compares: local paths absolute, symbolic links followed."""
    location = str(location)
    m = _SCHEME.match(location)
    if m:
        return m.group(0).lower() + posixpath.normpath("/" + location[m.end():]).lstrip("/")
    return os.path.realpath(location)


def group_of_part(out: str, **storage_options) -> str | None:
    """The group ``out`` is a part of (``G`` when ``out`` is ``G/label=<v>`` and ``G/index.json`` is a group
    manifest listing that part), else None."""
    from ..storage import open_storage
    from .group import is_group

    out = str(out).rstrip("/")
    parent, name = (posixpath.split(out) if _SCHEME.match(out) else os.path.split(os.path.abspath(out)))
    if not name.startswith("label=") or not parent or parent.endswith("://"):
        return None
    try:
        raw = open_storage(parent, **storage_options).read_bytes(MANIFEST_NAME)
    except (OSError, ValueError):
        return None
    except Exception:  # noqa: BLE001 - an unreadable parent (no bucket, no access) holds no group we can see
        return None
    import json

    try:
        data = json.loads(raw)
    except (ValueError, RecursionError):
        return None
    if not is_group(data):
        return None
    paths = {p.get("path") for p in data.get("parts", []) if isinstance(p, dict)}
    return parent if name in paths else None


def check_disjoint(out: str, sources: Iterable[str], *, what: str = "input", **storage_options) -> None:
    """Refuse (``OverlapError``) an output that is, or is inside, one of ``sources``, a source inside the
    output, or an output that is a part of a group; call it before anything is created or claimed."""
    target = resolve(out)
    for src in sources:
        s = resolve(src)
        if within(target, s):
            if within(s, target):
                raise OverlapError(f"output {out} is the input ({what} {src}; an input inside the output would be "
                                   "destroyed): choose another location")
            raise OverlapError(f"output {out} is inside the {what} {src}: writing there would destroy what is "
                               "read; choose an output outside it")
        if within(s, target):
            raise OverlapError(f"the {what} {src} is inside the output {out}: replacing the output would destroy "
                               "it; choose an output that does not hold it")
    group = group_of_part(out, **storage_options)
    if group is not None:
        raise OverlapError(f"output {out} is a part of the group {group} (its index.json lists it): writing the "
                           "part alone would leave the group disagreeing with it; write the whole group "
                           f"({group}) or choose another output")
