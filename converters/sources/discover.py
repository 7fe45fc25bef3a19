"""Find inputs: files, directories (recursively, hidden entries skipped), globs and URLs, in a stable order.

A URL (``s3://bucket/prefix``, ``gs://...``: any scheme ``storage.objects`` reads) names every object under it
taken as a directory, with the same rules as a local directory (sorted by name, hidden names skipped, the
format's suffixes kept), or else the one object it names. Patterns in URLs are refused.

Only regular files are inputs. A directory walk or a glob skips FIFOs, devices, sockets and symbolic links
that do not lead to a regular file (reading them could hang or never end), counting them in a warning; a
non-regular file named explicitly is refused with what it is.
"""
from __future__ import annotations

import glob
import logging
import os
import stat
from typing import Iterable

from ..storage.objects import is_url, list_objects
from ..util.errors import MissingInputError, OverlapError, TfpipeError
from ..util.fs import file_kind
from .sniff import refuse_tfrecords
from .streams import COMPRESSED_SUFFIXES, compression_of

__all__ = ["expand_inputs", "refuse_inputs_in"]

log = logging.getLogger(__name__)


def expand_inputs(inputs: Iterable[str | os.PathLike], *, suffixes: tuple[str, ...] | None = None,
                  out: str | os.PathLike | None = None) -> list[str]:
    """Expand files, directories (recursively, hidden files skipped) and globs into a sorted, de-duplicated
    list of regular files. Order: the inputs in the order given, each expanded in sorted order. ``out``: the
    run's output location; an expanded input inside it (its temporary areas included) is refused
    (``refuse_inputs_in``): every converter and engine expands its inputs here, so none reads its own output."""
    found_all: list[str] = []
    seen: set[str] = set()
    inputs = [str(i) for i in inputs]
    if not inputs:
        raise TfpipeError("no inputs given")
    for item in inputs:
        if is_url(item):
            for f in _expand_url(item, suffixes):
                if f not in seen:
                    seen.add(f)
                    found_all.append(f)
            continue
        skipped: dict[str, int] = {}
        try:
            st = os.stat(item)
        except FileNotFoundError:
            st = None
        except OSError as exc:
            raise TfpipeError(f"input {item!r}: cannot access it: {exc.strerror}") from None
        listed: list[str] = []
        if st is not None and stat.S_ISDIR(st.st_mode):
            for root, dirs, files in os.walk(item):
                dirs[:] = sorted(d for d in dirs if not d.startswith("."))
                listed.extend(os.path.join(root, f) for f in files if not f.startswith("."))
            listed.sort()
            found = [f for f in listed if _matches(f, suffixes)] if suffixes else listed
            found = _regular_only(found, skipped)
        elif st is not None and stat.S_ISREG(st.st_mode):
            found = [item]
        elif st is not None:
            raise TfpipeError(f"input {item!r} is {file_kind(st.st_mode)}, not a regular file: tfpipe reads "
                              "regular files only")
        elif os.path.islink(item):
            raise MissingInputError(f"input {item!r} is a broken symbolic link (it leads to "
                                    f"{os.readlink(item)!r}, which does not exist)")
        elif any(c in item for c in "*?["):
            found = _regular_only(sorted(glob.glob(item, recursive=True)), skipped, dirs_too=False)
            if not found:
                raise MissingInputError(f"input pattern {item!r} matches no files")
        else:
            raise MissingInputError(f"input {item!r} does not exist")
        note = _describe(skipped)
        if note:
            log.warning("input %s: %s", item, note)
        if not found:
            raise MissingInputError(no_input_files(item, [os.path.relpath(f, item) for f in listed], suffixes,
                                                   note))
        refuse_tfrecords(found)
        for f in found:
            key = os.path.abspath(f)
            if key not in seen:
                seen.add(key)
                found_all.append(f)
    if out is not None:
        refuse_inputs_in(found_all, str(out))
    return found_all


def _expand_url(item: str, suffixes: tuple[str, ...] | None) -> list[str]:
    """The objects a URL names: those under it as a directory (hidden names skipped, ``suffixes`` kept, sorted
    by name, as a local directory), else the object itself (taken whatever its name, as a local file)."""
    if any(c in item for c in "*?["):
        raise TfpipeError(f"input {item!r}: patterns are not supported in URLs; name an object or a prefix")
    found = [url for url, _ in list_objects(item)]
    if not found:
        raise MissingInputError(f"input {item!r} does not exist")
    if found == [item]:
        return found
    base = item.rstrip("/") + "/"
    odd = [u for u in found if _odd_key(u[len(base):])]
    if odd:
        log.warning("input %s: %d object(s) not converted: their keys cannot name a file (a '.' or '..' part, an "
                    "empty part, or a trailing '/' on an object that holds data): %s%s; rename them to convert them",
                    item, len(odd), ", ".join(odd[:5]), ", ..." if len(odd) > 5 else "")
    listed = [u for u in found if u not in set(odd)
              and not any(part.startswith(".") for part in u[len(base):].split("/"))]
    found = [u for u in listed if _matches(u, suffixes)] if suffixes else listed
    if not found:
        raise MissingInputError(no_input_files(item, [u[len(base):] for u in listed], suffixes, ""))
    return found


def refuse_inputs_in(paths: list[str], out: str) -> None:
    """Raise ``OverlapError`` if an input lies inside the output location ``out`` (its set, or a run's temporary
    area under it): the run would read files it is about to replace."""
    if "://" in str(out):
        base = str(out).rstrip("/") + "/"
        for p in paths:
            if str(p).startswith(base):
                raise _inside(p, out)
        return
    root = os.path.realpath(out)
    real_dirs: dict[str, str] = {}  # many inputs share a directory: resolve each directory once
    for p in paths:
        if is_url(p):
            continue
        if os.path.islink(p):
            real = os.path.realpath(p)
        else:
            head, tail = os.path.split(os.path.abspath(p))
            if head not in real_dirs:
                real_dirs[head] = os.path.realpath(head)
            real = os.path.join(real_dirs[head], tail)
        if real == root or real.startswith(root.rstrip(os.sep) + os.sep):
            raise _inside(p, out)


def _inside(path: str, out) -> OverlapError:
    return OverlapError(f"input {path!r} is inside the output {out}: the run would read what it is about to "
                        "replace; choose an output outside the inputs")


def no_input_files(item: str, listed: list[str], suffixes: tuple[str, ...] | None, note: str) -> str:
    """Why directory ``item`` gave no input: what it holds (a count, the first few names, relative to it) and
    the suffixes the format accepts."""
    shown = ", ".join(listed[:_SHOWN]) + (", ..." if len(listed) > _SHOWN else "")
    holds = f"it holds {len(listed)} file(s) ({shown})" if listed else "it holds no files"
    if listed and suffixes:
        accepted = ", ".join(f"*{s}" for s in suffixes)
        packed = "/".join(COMPRESSED_SUFFIXES)
        holds += f", none named like an input of this format ({accepted}, each also as {packed})"
    return f"input directory {item!r} holds no input files: {holds}{f' ({note})' if note else ''}"


_SHOWN = 5  # names listed in an error


def _regular_only(paths: list[str], skipped: dict[str, int], *, dirs_too: bool = True) -> list[str]:
    """The regular files among ``paths`` (symlinks followed); the others are counted in ``skipped`` by kind
    (directories matched by a glob are silently left out, as before)."""
    keep = []
    for p in paths:
        try:
            mode = os.stat(p).st_mode
        except OSError:
            kind = "broken symbolic link" if os.path.islink(p) else "unreadable entry"
            skipped[kind] = skipped.get(kind, 0) + 1
            continue
        if stat.S_ISREG(mode):
            keep.append(p)
        elif stat.S_ISDIR(mode) and not dirs_too:
            continue
        else:
            kind = file_kind(mode).removeprefix("a ")
            skipped[kind] = skipped.get(kind, 0) + 1
    return keep


def _describe(skipped: dict[str, int]) -> str:
    if not skipped:
        return ""
    kinds = ", ".join(f"{k}: {n}" for k, n in sorted(skipped.items()))
    return f"skipped {sum(skipped.values())} entr{'y' if sum(skipped.values()) == 1 else 'ies'} that are not " \
           f"regular files ({kinds})"


def _odd_key(rel: str) -> bool:
    """A key (below the input prefix) that no file path could have: ``.``/``..`` or empty parts, or a trailing
    ``/`` (an object holding data under a directory's name)."""
    return any(part in ("", ".", "..") for part in rel.split("/"))


def _matches(path: str, suffixes: tuple[str, ...]) -> bool:
    base = path
    kind = compression_of(path)
    if kind:
        base = path[: path.rfind(".")]
    return any(base.endswith(s) for s in suffixes)
