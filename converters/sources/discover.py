"""Find inputs: files, directories (recursively, hidden entries skipped) and globs, in a stable order."""
from __future__ import annotations

import glob
import os
from typing import Iterable

from ..util.errors import TfpipeError
from .streams import compression_of

__all__ = ["expand_inputs"]


def expand_inputs(inputs: Iterable[str | os.PathLike], *, suffixes: tuple[str, ...] | None = None) -> list[str]:
    """Expand files, directories (recursively, hidden files skipped) and globs into a sorted, de-duplicated
    list of files. Order: the inputs in the order given, each expanded in sorted order."""
    out: list[str] = []
    seen: set[str] = set()
    inputs = [str(i) for i in inputs]
    if not inputs:
        raise TfpipeError("no inputs given")
    for item in inputs:
        if os.path.isdir(item):
            found = []
            for root, dirs, files in os.walk(item):
                dirs[:] = sorted(d for d in dirs if not d.startswith("."))
                found.extend(os.path.join(root, f) for f in files if not f.startswith("."))
            found.sort()
            if suffixes:
                found = [f for f in found if _matches(f, suffixes)]
        elif os.path.isfile(item):
            found = [item]
        elif any(c in item for c in "*?["):
            found = sorted(p for p in glob.glob(item, recursive=True) if os.path.isfile(p))
            if not found:
                raise TfpipeError(f"input pattern {item!r} matches no files")
        else:
            raise TfpipeError(f"input {item!r} does not exist")
        if not found:
            raise TfpipeError(f"input directory {item!r} holds no input files")
        for f in found:
            key = os.path.abspath(f)
            if key not in seen:
                seen.add(key)
                out.append(f)
    return out


def _matches(path: str, suffixes: tuple[str, ...]) -> bool:
    base = path
    kind = compression_of(path)
    if kind:
        base = path[: path.rfind(".")]
    return any(base.endswith(s) for s in suffixes)
