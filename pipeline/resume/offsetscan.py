"""The record-offset walk as a numba kernel: jump from record header to record header of an uncompressed
TFRecord file mapped in memory, checking each header's length CRC, never reading the record data.

Imported lazily by ``pipeline.resume.offsets`` (importing this module imports numba; the kernel is compiled once per
machine into numba's cache, see ``converters.util.jit``).
"""
from __future__ import annotations

import numpy as np

from converters.tfrecord.crc import CRC_TABLE, FRAME_OVERHEAD, read_header
from converters.util.jit import njit

__all__ = ["walk_chunk", "WALK_OK", "WALK_BAD_HEADER", "WALK_TRUNCATED"]

WALK_OK, WALK_BAD_HEADER, WALK_TRUNCATED = 0, 1, 2


@njit(cache=True, nogil=True)
def _walk(table, buf, pos, size, out, overhead):
    """Record start offsets from byte ``pos`` of ``buf[:size]`` into ``out`` until it is full or the file
    ends. Returns (records found, next position, status): status WALK_BAD_HEADER / WALK_TRUNCATED with the
    position of the bad record."""
    n = 0
    cap = out.shape[0]
    while n < cap and pos < size:
        if size - pos < 12:
            return n, pos, 2
        length, ok = read_header(table, buf, pos)
        if not ok:
            return n, pos, 1
        if size - pos < overhead or length > np.uint64(size - pos - overhead):
            return n, pos, 2
        out[n] = pos
        n += 1
        pos = pos + overhead + np.int64(length)
    return n, pos, 0


def walk_chunk(buf: np.ndarray, pos: int, out: np.ndarray) -> tuple[int, int, int]:
    """Fill ``out`` (uint64) with the start offsets of the records of ``buf`` (a whole file's bytes, uint8)
    from byte ``pos``: (records found, next position, status)."""
    n, nxt, status = _walk(CRC_TABLE, buf, np.int64(pos), np.int64(buf.shape[0]), out, np.int64(FRAME_OVERHEAD))
    return int(n), int(nxt), int(status)
