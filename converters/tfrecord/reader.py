"""TFRecord files: the streaming reader with CRC checks.

The reader never trusts a file: every length and payload CRC is checked, and a problem is reported with
its byte offset (in the uncompressed stream for GZIP shards). The CRCs are computed by ``crc``'s kernel: the
processor's CRC32C instruction where there is one (``crc.HARDWARE_CRC``), tables elsewhere.
"""
from __future__ import annotations

import gzip
import io
import os
from dataclasses import dataclass
from typing import BinaryIO, Iterable, Iterator

import numpy as np

from ..util.errors import IntegrityError
from ..util.fs import HashingReader
from ..util.jit import njit
from .crc import CRC_TABLE, FRAME_OVERHEAD, _crc_update, _mask, read_header

__all__ = ["ScanResult", "RecordChunk", "iter_record_chunks", "scan_file", "iter_framed", "read_records",
           "open_shard_reader", "is_gzip", "gzip_head", "is_record_header", "FRAME_OVERHEAD", "MAX_RECORD_BYTES"]

_CHUNK = 16 << 20  # 16 MiB read size
MAX_RECORD_BYTES = 1 << 28  # 256 MiB: the longest record a header may claim (a tf.Example is far smaller)

# error codes of the scan kernel
_OK, _BAD_LEN_CRC, _BAD_DATA_CRC, _TRUNCATED = 0, 1, 2, 3
_MESSAGES = {
    _BAD_LEN_CRC: "corrupt record header (length CRC mismatch)",
    _BAD_DATA_CRC: "corrupt record data (data CRC mismatch)",
    _TRUNCATED: "truncated record (file ends inside a record)",
}


@njit(cache=True, nogil=True)
def _scan(table, buf, n_valid, starts, max_records):
    """Walk complete records in buf[:n_valid]. Returns (count, end, error_code, error_pos);
    starts[i] receives each record's payload offset."""
    pos = 0
    count = 0
    while count < max_records:
        if pos + 12 > n_valid:
            return count, pos, 0, pos
        length, ok = read_header(table, buf, pos)
        if not ok:
            return count, pos, 1, pos
        if length > np.uint64(n_valid):  # (also a length past int64) the caller judges a record this long
            return count, pos, 0, pos
        ln = np.int64(length)
        if pos + 16 + ln > n_valid:
            return count, pos, 0, pos
        d = pos + 12
        stored = np.uint32(0)
        for k in range(4):
            stored |= np.uint32(buf[d + ln + k]) << np.uint32(8 * k)
        if _mask(_crc_update(table, buf, d, d + ln, 0)) != stored:
            return count, pos, 2, pos
        starts[count] = d
        count += 1
        pos = d + ln + 4
    return count, pos, 0, pos


@dataclass(frozen=True)
class ScanResult:
    records: int
    bytes: int            # bytes on disk (compressed size for GZIP)
    sha256: str           # of the bytes on disk
    error: str | None = None
    error_offset: int | None = None   # byte offset of the first problem (uncompressed stream)


def gzip_head(head: bytes) -> bool:
    """Whether a file that starts with ``head`` (its first 12 bytes, or all of a shorter file) is a gzip file
    rather than plain TFRecord, decided by the framing: a valid record header (its length's CRC matches) means
    plain, whatever its first two bytes (a first record of 35,615 bytes starts with ``1f 8b``); otherwise the
    gzip magic ``1f 8b`` means gzip. The one test of compression for every reader of shards."""
    if len(head) >= 12:
        _, ok = read_header(CRC_TABLE, np.frombuffer(head[:12], dtype=np.uint8), 0)
        if ok:
            return False
    return head[:2] == b"\x1f\x8b"


def is_gzip(path: str | os.PathLike) -> bool:
    """``gzip_head`` of the file at ``path``."""
    with open(path, "rb") as f:
        return gzip_head(f.read(12))


def is_record_header(head: bytes) -> bool:
    """True when ``head`` starts with a TFRecord record header: 8 bytes of length (little-endian) and 4 of its
    masked CRC32C, matching (a text line passes by chance once in 2**32). Pure Python: no kernel to compile."""
    if len(head) < 12:
        return False
    crc = 0xFFFFFFFF
    for byte in head[:8]:
        crc = int(CRC_TABLE[0, (crc ^ byte) & 0xFF]) ^ (crc >> 8)
    crc ^= 0xFFFFFFFF
    masked = (((crc >> 15) | (crc << 17)) + 0xA282EAD8) & 0xFFFFFFFF
    return masked == int.from_bytes(head[8:12], "little")


def open_shard_reader(path: str | os.PathLike) -> BinaryIO:
    """Open a shard for reading its TFRecord stream, decompressing GZIP transparently."""
    if is_gzip(path):
        return gzip.open(path, "rb")
    return open(path, "rb")


@dataclass(frozen=True)
class RecordChunk:
    """The complete, CRC-checked records found in one chunk of a TFRecord stream.

    Record k's payload is ``data[starts[k]:starts[k] + lengths[k]]``; ``data[starts[0] - 12:end]`` is exactly these
    records with their framing (framed lengths ``lengths + 16``); ``offset`` is where ``data`` begins in the stream.
    """

    data: bytes
    starts: np.ndarray
    lengths: np.ndarray
    end: int
    offset: int

    def framed(self) -> tuple[np.ndarray, np.ndarray]:
        """(framed bytes, framed lengths) of the records, ready for ``ShardSetWriter.write``."""
        buf = np.frombuffer(self.data, dtype=np.uint8)
        return buf[int(self.starts[0]) - 12:self.end], self.lengths + FRAME_OVERHEAD

    def payloads(self) -> list[bytes]:
        return [self.data[s:s + n] for s, n in zip(self.starts.tolist(), self.lengths.tolist())]


def iter_record_chunks(chunks: Iterable[bytes], *, name: str, total: int | None = None) -> Iterator[RecordChunk]:
    """CRC-check a TFRecord stream given as byte chunks of any size; yield the complete records chunk by chunk.

    The good records before a problem are yielded first; then IntegrityError is raised naming ``name``, the byte
    offset of the problem in the stream (``.offset``) and what is wrong (``.reason``). A record whose header
    (its CRC checked) claims more than ``MAX_RECORD_BYTES``, or more than the ``total`` bytes of the stream
    (when known: a plain file's size) can still hold, is refused at once, naming the length it claims: memory
    never grows with a length read from the file.
    """
    carry = b""
    base = 0
    pending: list[bytes] = []  # chunks held back while one long record is gathered
    need = 0
    for chunk in chunks:
        if not chunk:
            continue
        if need:
            pending.append(chunk)
            if sum(map(len, pending)) < need:
                continue
            chunk, pending, need = b"".join(pending), [], 0
        data = carry + chunk if carry else chunk
        buf = np.frombuffer(data, dtype=np.uint8)
        starts = np.empty(len(data) // FRAME_OVERHEAD + 1, dtype=np.int64)
        count, end, code, epos = _scan(CRC_TABLE, buf, len(data), starts, starts.shape[0])
        if count:
            starts = starts[:count]
            lengths = np.empty(count, dtype=np.int64)
            lengths[:-1] = starts[1:] - starts[:-1] - FRAME_OVERHEAD
            lengths[-1] = end - starts[-1] - 4
            yield RecordChunk(data, starts, lengths, int(end), base)
        if code:
            raise _damage(name, _MESSAGES[int(code)], base + int(epos))
        carry = data[end:]
        base += int(end)
        if len(carry) >= 12:  # a record that goes on past this chunk: is its length believable?
            claimed = int(read_header(CRC_TABLE, np.frombuffer(carry[:12], dtype=np.uint8), 0)[0])
            if claimed > MAX_RECORD_BYTES:
                raise _damage(name, f"record header claims {claimed} bytes, more than any record may hold "
                              f"({MAX_RECORD_BYTES >> 20} MiB): not a TFRecord stream (or a hostile one)", base)
            if total is not None and base + claimed + FRAME_OVERHEAD > total:
                raise _damage(name, f"truncated record (its header claims {claimed} bytes, the file holds "
                              f"{total - base - 12} after it)", base)
            need = claimed + FRAME_OVERHEAD - len(carry)
    if pending:
        carry += b"".join(pending)
    if carry:
        raise _damage(name, _MESSAGES[_TRUNCATED], base)


def _damage(name: str, reason: str, offset: int) -> IntegrityError:
    exc = IntegrityError(f"{name}: {reason} at byte {offset}")
    exc.reason, exc.offset = reason, offset
    return exc


def _read_chunks(stream: BinaryIO, size: int = _CHUNK) -> Iterator[bytes]:
    while chunk := stream.read(size):
        yield chunk


def scan_file(path: str | os.PathLike) -> ScanResult:
    """Read every record of one shard with CRC checks; return counts, on-disk size and sha256."""
    with open(path, "rb") as raw:
        gz = gzip_head(raw.read(12))
        raw.seek(0)
        hashed = HashingReader(raw)
        buffered = io.BufferedReader(hashed, buffer_size=_CHUNK)
        stream = gzip.GzipFile(fileobj=buffered, mode="rb") if gz else buffered
        records, error, error_offset = 0, None, None
        total = None if gz else os.fstat(raw.fileno()).st_size
        try:
            for chunk in iter_record_chunks(_read_chunks(stream), name=str(path), total=total):
                records += len(chunk.starts)
        except IntegrityError as exc:
            error, error_offset = exc.reason, exc.offset
        except (OSError, EOFError, gzip.BadGzipFile) as exc:
            error, error_offset = f"corrupt GZIP stream ({exc})", None
        while buffered.read(_CHUNK):  # hash the rest of the file
            pass
    return ScanResult(records, hashed.nbytes, hashed.sha.hexdigest(), error, error_offset)


def iter_framed(path: str | os.PathLike) -> Iterator[tuple[np.ndarray, np.ndarray]]:
    """Yield (framed bytes, framed lengths) of a shard's CRC-checked records, chunk by chunk: records copied with
    their framing as they are (for resharding), never re-serialized. Damage raises IntegrityError."""
    gz = is_gzip(path)
    with open_shard_reader(path) as stream:
        total = None if gz else os.fstat(stream.fileno()).st_size
        for chunk in iter_record_chunks(_read_chunks(stream), name=str(path), total=total):
            yield chunk.framed()


def read_records(path: str | os.PathLike) -> Iterator[bytes]:
    """Yield every record payload of a shard (plain or GZIP), checking CRCs; raise IntegrityError on damage."""
    gz = is_gzip(path)
    with open_shard_reader(path) as stream:
        total = None if gz else os.fstat(stream.fileno()).st_size
        for chunk in iter_record_chunks(_read_chunks(stream), name=str(path), total=total):
            yield from chunk.payloads()
