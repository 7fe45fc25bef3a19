"""Read a small JSON file that tfpipe itself wrote (a cache entry, a stored tuning result) with the care a
manifest gets: only a regular file (never a FIFO, a device, a directory or a link to one), at most
``max_bytes`` of it, nested at most ``max_depth`` levels. Anything else is one :class:`UnsafeFileError` naming
the file and what is wrong with it; nothing can hang the caller, grow it without end or overflow its stack.
"""
from __future__ import annotations

import json
import os
import re
import stat
from typing import Any

from .errors import TfpipeError
from .fs import file_kind

__all__ = ["read_bounded_json", "read_bounded", "loads_bounded", "json_depth", "UnsafeFileError",
           "MAX_JSON_BYTES", "MAX_JSON_DEPTH"]

MAX_JSON_BYTES = 1 << 20      # 1 MiB: a cache file of tfpipe's is a few KiB
MAX_JSON_DEPTH = 32           # tfpipe's own files nest 4 levels deep

_SPECIAL = re.compile(rb'["\\\[\]{}]')
_OPEN, _CLOSE = frozenset(b"[{"), frozenset(b"]}")
_QUOTE, _BACKSLASH = ord('"'), ord("\\")


class UnsafeFileError(TfpipeError, ValueError):
    """A file tfpipe reads as a cache is not one it could have written (its message names the file)."""


def read_bounded(path: str | os.PathLike, max_bytes: int = MAX_JSON_BYTES) -> bytes:
    """The bytes of the regular file at ``path`` (symbolic links followed to a regular file), at most
    ``max_bytes`` of them. The path is looked at before it is opened (so a FIFO or device is never opened)
    and the opened descriptor again (so a file swapped in between is caught), then at most ``max_bytes + 1``
    bytes are read; ``UnsafeFileError`` for anything else, ``OSError`` when it cannot be read at all."""
    where = os.fspath(path)
    before = os.stat(where)
    if not stat.S_ISREG(before.st_mode):
        raise UnsafeFileError(f"{where} is {file_kind(before.st_mode)}, not a regular file")
    fd = os.open(where, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_CLOEXEC", 0))
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode) or (st.st_dev, st.st_ino) != (before.st_dev, before.st_ino):
            raise UnsafeFileError(f"{where} changed while it was opened (now {file_kind(st.st_mode)})")
        if st.st_size > max_bytes:
            raise UnsafeFileError(f"{where} holds {st.st_size} bytes, more than the {max_bytes} a tfpipe file "
                                  f"of its kind can hold")
        os.set_blocking(fd, True)
        parts, left = [], max_bytes + 1
        while left > 0:
            chunk = os.read(fd, min(left, 1 << 16))
            if not chunk:
                break
            parts.append(chunk)
            left -= len(chunk)
    finally:
        os.close(fd)
    raw = b"".join(parts)
    if len(raw) > max_bytes:
        raise UnsafeFileError(f"{where} grew past {max_bytes} bytes while it was read")
    return raw


def json_depth(raw: bytes, limit: int | None = None) -> int:
    """How deeply the arrays and objects of the JSON text ``raw`` nest (brackets inside strings do not count);
    stops early and returns ``limit + 1`` once the nesting passes ``limit``. Linear in ``len(raw)``."""
    depth = deepest = 0
    in_string = False
    skip = -1                  # the position of a character escaped by a backslash inside a string
    for m in _SPECIAL.finditer(raw):
        at = m.start()
        if at == skip:
            continue
        c = raw[at]
        if in_string:
            if c == _BACKSLASH:
                skip = at + 1
            elif c == _QUOTE:
                in_string = False
        elif c == _QUOTE:
            in_string = True
        elif c in _OPEN:
            depth += 1
            if depth > deepest:
                deepest = depth
                if limit is not None and deepest > limit:
                    return deepest
        elif c in _CLOSE:
            depth -= 1
    return deepest


def loads_bounded(raw: bytes, where: str, *, max_depth: int = MAX_JSON_DEPTH) -> Any:
    """The JSON value of the bytes ``raw`` (read from ``where``, which the messages name), refused
    (``UnsafeFileError``) when they are not UTF-8 JSON or nest deeper than ``max_depth`` — checked before
    parsing, so a deeply nested text never reaches the recursive parser."""
    if json_depth(raw, max_depth) > max_depth:
        raise UnsafeFileError(f"{where} nests deeper than {max_depth} levels: not a file tfpipe wrote")
    try:
        return json.loads(raw.decode("utf-8"))
    except (UnicodeDecodeError, ValueError) as exc:
        raise UnsafeFileError(f"{where} is not valid JSON: {exc}") from None
    except RecursionError:  # pragma: no cover - the depth check comes first
        raise UnsafeFileError(f"{where} nests too deeply: not a file tfpipe wrote") from None


def read_bounded_json(path: str | os.PathLike, *, max_bytes: int = MAX_JSON_BYTES,
                      max_depth: int = MAX_JSON_DEPTH) -> Any:
    """The JSON value in the file at ``path``, read with :func:`read_bounded` and parsed with
    :func:`loads_bounded` (``UnsafeFileError`` naming the file)."""
    return loads_bounded(read_bounded(path, max_bytes), os.fspath(path), max_depth=max_depth)
