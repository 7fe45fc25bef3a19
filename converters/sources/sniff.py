"""Refuse TFRecord files given as line input (LibSVM, text): their first 12 bytes are a record header whose
masked CRC32C matches (``tfrecord.reader.is_record_header``), also inside a gzip stream. Such a file would be
read as lines and rejected line by line (``nul_byte``), and ``--on-error skip`` would skip all of it; the way
to use it is to adopt it, as it is, with ``tfpipe index``."""
from __future__ import annotations

import os
import zlib

from ..storage.objects import is_url
from ..util.errors import InputError

__all__ = ["refuse_tfrecords", "tfrecord_kind"]

_GZIP = b"\x1f\x8b"
_HEAD = 1 << 12  # compressed bytes read to find the first 12 bytes of a gzip stream


def tfrecord_kind(path: str) -> str | None:
    """"TFRecord" or "gzip-compressed TFRecord" when the local file ``path`` starts like one, else None (also
    when it cannot be read: the reader reports that with its own error)."""
    from ..tfrecord.reader import is_record_header  # lazily: the reader loads numba, which `tfpipe --help` must not

    try:
        with open(path, "rb") as f:
            head = f.read(_HEAD)
    except OSError:
        return None
    if head.startswith(_GZIP):
        try:
            return "gzip-compressed TFRecord" if is_record_header(zlib.decompressobj(31).decompress(head, 12)) \
                else None
        except zlib.error:
            return None
    return "TFRecord" if is_record_header(head) else None


def refuse_tfrecords(paths: list[str]) -> None:
    """Raise an ``InputError`` naming the first of the local ``paths`` that is a TFRecord file, and the command
    that adopts it (``tfpipe index``); URLs are not read here."""
    for p in paths:
        if is_url(p):
            continue
        kind = tfrecord_kind(p)
        if kind is not None:
            raise InputError(f"{p} is a {kind} file, not lines of text: adopt it as a shard set with "
                             f"`tfpipe index {p}` (or the folder that holds it)", reason="tfrecord_input")
