"""Open inputs as byte streams (.gz, .bz2, .zst, plain) and read them in line-aligned blocks.

Compression is chosen by extension and checked against the file's magic bytes, so a plain file named
``.zst`` gives a clear error instead of garbage. ``.zst`` streams are read across frames to the end.
"""
from __future__ import annotations

import bz2
import gzip
import io
from typing import BinaryIO, Iterator

from ..util.errors import InputError

__all__ = ["open_input", "compression_of", "iter_blocks", "COMPRESSED_SUFFIXES"]

COMPRESSED_SUFFIXES = {".gz": "gzip", ".bz2": "bz2", ".zst": "zstd"}
_MAGIC = {"gzip": b"\x1f\x8b", "bz2": b"BZh", "zstd": b"\x28\xb5\x2f\xfd"}
_BLOCK = 8 << 20  # 8 MiB


def compression_of(path: str) -> str | None:
    for suffix, kind in COMPRESSED_SUFFIXES.items():
        if str(path).endswith(suffix):
            return kind
    return None


def open_input(path: str) -> BinaryIO:
    """Open ``path`` for binary reading, decompressing by extension after checking its magic bytes."""
    kind = compression_of(path)
    try:
        raw = open(path, "rb")
    except OSError as exc:
        raise InputError(f"cannot open: {exc.strerror}", path=path) from exc
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
    if kind == "gzip":
        return gzip.GzipFile(fileobj=raw, mode="rb")  # type: ignore[return-value]
    if kind == "bz2":
        return bz2.BZ2File(raw, mode="rb")  # type: ignore[return-value]
    return _ZstdReader(raw)  # type: ignore[return-value]


class _ZstdReader(io.RawIOBase):
    """Multi-frame zstd decompression that reads every frame to the end of the file and raises OSError on a
    truncated last frame (zstandard's stream reader would end silently)."""

    def __init__(self, raw: BinaryIO):
        import zstandard

        self._zstd = zstandard
        self._raw = raw
        self._dctx = zstandard.ZstdDecompressor(max_window_size=1 << 31)
        self._obj = self._dctx.decompressobj()
        self._in_frame = False
        self._buf = b""
        self._eof = False
        self._error: OSError | None = None

    def readable(self) -> bool:
        return True

    def _fill(self, want: int) -> None:
        while len(self._buf) < want and not self._eof:
            chunk = self._raw.read(1 << 20)
            if not chunk:
                self._eof = True
                if self._in_frame:
                    raise OSError("zstd stream ends inside a frame")
                return
            out = []
            while chunk:
                try:
                    out.append(self._obj.decompress(chunk))
                except self._zstd.ZstdError as exc:
                    raise OSError(f"corrupt zstd data: {exc}") from exc
                self._in_frame = True
                if self._obj.eof:
                    chunk = self._obj.unused_data
                    self._obj = self._dctx.decompressobj()
                    self._in_frame = False
                else:
                    chunk = b""
            self._buf += b"".join(out)

    def read(self, size: int = -1) -> bytes:
        if size is None or size < 0:
            chunks = []
            while True:
                c = self.read(_BLOCK)
                if not c:
                    return b"".join(chunks)
                chunks.append(c)
        if self._error is not None and not self._buf:
            raise self._error
        try:
            self._fill(size)
        except OSError as exc:
            if not self._buf:
                raise
            self._error = exc  # hand out what was decoded before the damage first; raise on the next read
        data, self._buf = self._buf[:size], self._buf[size:]
        return data

    def readinto(self, b) -> int:
        data = self.read(len(b))
        b[: len(data)] = data
        return len(data)

    def close(self) -> None:
        self._raw.close()
        super().close()


def iter_blocks(path: str, block_size: int = _BLOCK) -> Iterator[tuple[bytes, int, int]]:
    """Yield ``(block, first_line_number, byte_offset)`` with each block ending at a newline (the last one
    may lack it). Memory stays at about one block. Decompression errors become InputError naming the file
    and the uncompressed byte offset reached. A stream that ends in the middle of compressed data
    (truncated file) is an error, not a silent short read."""
    line = 1
    offset = 0
    carry = b""
    with open_input(path) as f:
        while True:
            try:
                chunk = f.read(block_size)
            except (OSError, EOFError, gzip.BadGzipFile) as exc:
                raise InputError(f"cannot decompress ({exc}); the file is truncated or corrupt", path=path,
                                 offset=offset + len(carry)) from exc
            if not chunk:
                if carry:
                    yield carry, line, offset
                return
            data = carry + chunk if carry else chunk
            cut = data.rfind(b"\n") + 1
            if cut == 0:
                carry = data
                continue
            block, carry = data[:cut], data[cut:]
            yield block, line, offset
            line += block.count(b"\n")
            offset += len(block)
