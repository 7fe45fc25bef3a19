"""Open inputs as byte streams (.gz, .bz2, .zst, plain) and read them in line-aligned blocks.

Compression is chosen by extension and checked against the file's magic bytes, so a plain file named
``.zst`` gives a clear error instead of garbage. Only regular files are opened (a FIFO or a device named as
input is refused, never read). Every compressed format is decoded by one incremental reader that reads the
file in small pieces, reads every member / frame / stream to the end of the file, hands out all the data
decoded before any damage, and only then raises, naming the uncompressed offset where decoding failed (a
truncated or corrupt file loses only what follows the damage).
"""
from __future__ import annotations

import bz2
import io
import os
import zlib
from typing import BinaryIO, Callable, Iterator

from ..storage.objects import is_url, object_size, open_object
from ..util.errors import InputError
from ..util.fs import open_regular

__all__ = ["open_input", "open_raw", "input_size", "compression_of", "iter_blocks", "read_range", "read_lines",
           "line_start", "COMPRESSED_SUFFIXES", "MAX_LINE_BYTES"]

COMPRESSED_SUFFIXES = {".gz": "gzip", ".bz2": "bz2", ".zst": "zstd"}
_MAGIC = {"gzip": b"\x1f\x8b", "bz2": b"BZh", "zstd": b"\x28\xb5\x2f\xfd"}
_BLOCK = 8 << 20           # 8 MiB
_RAW_PIECE = 64 << 10      # compressed bytes decoded at a time: damage is found within this much
MAX_LINE_BYTES = 1 << 30   # 1 GiB: a longer "line" is not line-oriented data (e.g. a binary file)


def compression_of(path: str) -> str | None:
    for suffix, kind in COMPRESSED_SUFFIXES.items():
        if str(path).endswith(suffix):
            return kind
    return None


def open_raw(path: str, *, stream: bool = False) -> BinaryIO:
    """A regular local file, or an object named by a URL (``s3://``, ``gs://``, ...: ``storage.objects``), as a
    seekable binary file object, not decompressed. A missing object is FileNotFoundError("no such object").
    ``stream``: the file will be read from start to end (an object is then fetched ``_BLOCK`` bytes at a time)."""
    if not is_url(path):
        return open_regular(path)
    return open_object(path, _BLOCK) if stream else open_object(path)


def input_size(path: str) -> int:
    """The size in bytes of a local file or of the object a URL names (OSError if it cannot be found)."""
    if not is_url(path):
        return os.path.getsize(path)
    return object_size(path)


def open_input(path: str) -> BinaryIO:
    """Open ``path`` (a local file or a URL) for binary reading, decompressing by extension after checking its
    magic bytes."""
    kind = compression_of(path)
    try:
        raw = open_raw(path, stream=True)
    except OSError as exc:
        raise InputError(f"cannot open: {exc.strerror or exc}", path=path) from None
    if kind is None:
        return raw
    head = raw.read(4)
    raw.seek(0)
    if not head.startswith(_MAGIC[kind]):
        raw.close()
        actual = next((k for k, m in _MAGIC.items() if head.startswith(m)), None)
        what = f"{actual} data" if actual else ("an empty file" if not head else "not compressed data")
        raise InputError(f"named like a {kind} file but holds {what}: rename it or recompress it", path=path,
                         offset=0)
    return _DecodedReader(raw, kind)  # type: ignore[return-value]


def _decoder_factory(kind: str) -> tuple[Callable[[], object], tuple[type[BaseException], ...]]:
    """A new decompressor for one gzip member / bz2 stream / zstd frame, and the errors it raises."""
    if kind == "gzip":
        return (lambda: zlib.decompressobj(wbits=16 + zlib.MAX_WBITS)), (zlib.error,)
    if kind == "bz2":
        return bz2.BZ2Decompressor, (OSError, EOFError)
    import zstandard

    dctx = zstandard.ZstdDecompressor(max_window_size=1 << 31)
    return dctx.decompressobj, (zstandard.ZstdError,)


class _DecodedReader(io.RawIOBase):
    """Incremental decompression of a whole file: every gzip member, bz2 stream or zstd frame to the end of
    the file (zero padding after a gzip member is allowed, as gzip does). Data decoded before damage is
    handed out first; the next read raises OSError (truncated or corrupt stream)."""

    def __init__(self, raw: BinaryIO, kind: str):
        self._raw = raw
        self._kind = kind
        self._new, self._errors = _decoder_factory(kind)
        self._dec = self._new()
        self._in_member = False
        self._buf = bytearray()
        self._pos = 0
        self._eof = False
        self._error: OSError | None = None

    def readable(self) -> bool:
        return True

    def _feed(self, data: bytes) -> None:
        while data:
            if not self._in_member and self._kind == "gzip":
                data = data.lstrip(b"\x00")
                if not data:
                    return
            try:
                out = self._dec.decompress(data)
            except self._errors as exc:
                raise OSError(f"corrupt {self._kind} data: {exc}") from exc
            self._in_member = True
            if out:
                self._buf += out
            if self._dec.eof:
                data = self._dec.unused_data
                self._dec = self._new()
                self._in_member = False
            else:
                data = b""

    def _fill(self, want: int) -> None:
        while len(self._buf) - self._pos < want and not self._eof:
            chunk = self._raw.read(_RAW_PIECE)
            if not chunk:
                self._eof = True
                if self._in_member:
                    raise OSError(f"{self._kind} stream ends before its end marker (file truncated)")
                return
            self._feed(chunk)

    def read(self, size: int = -1) -> bytes:
        if size is None or size < 0:
            chunks = []
            while c := self.read(_BLOCK):
                chunks.append(c)
            return b"".join(chunks)
        if self._error is not None and self._pos >= len(self._buf):
            raise self._error
        if self._error is None:
            try:
                self._fill(size)
            except OSError as exc:
                self._error = exc  # hand out what was decoded before the damage first; raise on the next read
                if self._pos >= len(self._buf):
                    raise
        with memoryview(self._buf) as mv:
            data = bytes(mv[self._pos:self._pos + size])
        self._pos += len(data)
        if self._pos >= len(self._buf):
            self._buf.clear()
            self._pos = 0
        elif self._pos > (8 << 20):
            del self._buf[:self._pos]
            self._pos = 0
        return data

    def readinto(self, b) -> int:
        data = self.read(len(b))
        b[: len(data)] = data
        return len(data)

    def close(self) -> None:
        self._raw.close()
        super().close()


def iter_blocks(path: str, block_bytes: int = _BLOCK, max_line: int = MAX_LINE_BYTES, *, count_lines: bool = True
                ) -> Iterator[tuple[bytes, int, int]]:
    """Yield ``(block, first_line_number, byte_offset)`` with each block ending at a newline (the last one
    may lack it). Memory stays at about one block (or the longest line; a line over ``max_line`` bytes is an
    error). Decompression errors become InputError naming the file and the uncompressed byte offset where
    decoding failed, after every complete line before it was yielded. A stream that ends in the middle of
    compressed data (truncated file) is an error, not a silent short read. ``count_lines=False``: the line
    numbers are not counted (each is 0; a caller that parses the blocks counts them itself, for free)."""
    line = 1 if count_lines else 0
    offset = 0
    carry: list = []  # pieces of an unfinished line (joined once, never re-copied per read)
    carried = 0
    with open_input(path) as f:
        while True:
            try:
                chunk = f.read(block_bytes)
            except (OSError, EOFError) as exc:
                raise InputError(f"cannot decompress ({exc}); the file is truncated or corrupt", path=path,
                                 offset=offset + carried) from None
            if not chunk:
                if carry:
                    yield b"".join(carry), line, offset
                return
            cut = chunk.rfind(b"\n") + 1
            if cut == 0:
                carry.append(chunk)
                carried += len(chunk)
                if carried > max_line:
                    where = f"line {line}" if count_lines else "a line"
                    raise InputError(f"{where} is longer than {max_line} bytes without a newline: not "
                                     "line-oriented text", path=path, offset=offset)
                continue
            with memoryview(chunk) as mv:  # the block is copied once (joined with the carried line's start)
                block = b"".join([*carry, mv[:cut]]) if carry else chunk if cut == len(chunk) else chunk[:cut]
                carry, carried = ([mv[cut:].tobytes()], len(chunk) - cut) if cut < len(chunk) else ([], 0)
            yield block, line, offset
            if count_lines:
                line += block.count(b"\n")
            offset += len(block)


def line_start(f, pos: int, size: int) -> int:
    """Offset of the first line of ``f`` that starts at or after ``pos`` (``size`` if none)."""
    if pos <= 0:
        return 0
    if pos >= size:
        return size
    f.seek(pos - 1)
    at = pos - 1
    while True:
        chunk = f.read(1 << 16)
        if not chunk:
            return size
        i = chunk.find(b"\n")
        if i >= 0:
            return at + i + 1
        at += len(chunk)


def read_range(path: str, start: int, stop: int) -> bytes:
    """The whole lines of a plain file (local, or an object named by a URL) that *start* in ``[start, stop)``:
    consecutive ranges partition the file into whole lines, so a worker can read its own block and nothing is
    sent to it but numbers."""
    with open_raw(path) as f:
        return read_lines(f, start, stop)


def read_lines(f, start: int, stop: int) -> bytes:
    """``read_range`` on a seekable binary file object."""
    size = f.seek(0, os.SEEK_END)
    a = line_start(f, start, size)
    b = line_start(f, stop, size)
    if b <= a:
        return b""
    f.seek(a)
    return f.read(b - a)
