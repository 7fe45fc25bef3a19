"""CRC32C (Castagnoli) and TFRecord framing as numba-compiled kernels.

TFRecord frame: uint64 length (LE) | uint32 masked_crc32c(length bytes) | data | uint32 masked_crc32c(data).
"""
from __future__ import annotations

import numpy as np

from ..util.jit import njit

__all__ = ["CRC_TABLE", "crc32c", "masked_crc32c", "frame_into", "frame_size", "FRAME_OVERHEAD"]

FRAME_OVERHEAD = 16  # bytes of framing per TFRecord record
_POLY = 0x82F63B78


def _make_tables() -> np.ndarray:
    t = np.zeros((8, 256), dtype=np.uint32)
    for i in range(256):
        c = i
        for _ in range(8):
            c = (c >> 1) ^ _POLY if c & 1 else c >> 1
        t[0, i] = c
    for i in range(256):
        c = int(t[0, i])
        for k in range(1, 8):
            c = int(t[0, c & 0xFF]) ^ (c >> 8)
            t[k, i] = c
    return t


CRC_TABLE = _make_tables()


@njit(cache=True, nogil=True)
def _crc_update(table, buf, start, end, crc):
    c = np.uint32(crc) ^ np.uint32(0xFFFFFFFF)
    i = start
    while i + 8 <= end:
        c ^= (np.uint32(buf[i]) | (np.uint32(buf[i + 1]) << np.uint32(8))
              | (np.uint32(buf[i + 2]) << np.uint32(16)) | (np.uint32(buf[i + 3]) << np.uint32(24)))
        c = (table[7, c & np.uint32(0xFF)] ^ table[6, (c >> np.uint32(8)) & np.uint32(0xFF)]
             ^ table[5, (c >> np.uint32(16)) & np.uint32(0xFF)] ^ table[4, c >> np.uint32(24)]
             ^ table[3, buf[i + 4]] ^ table[2, buf[i + 5]] ^ table[1, buf[i + 6]] ^ table[0, buf[i + 7]])
        i += 8
    while i < end:
        c = table[0, (c ^ np.uint32(buf[i])) & np.uint32(0xFF)] ^ (c >> np.uint32(8))
        i += 1
    return c ^ np.uint32(0xFFFFFFFF)


@njit(cache=True, nogil=True)
def _mask(crc):
    crc = np.uint32(crc)
    return np.uint32(((crc >> np.uint32(15)) | (crc << np.uint32(17))) + np.uint32(0xA282EAD8))


@njit(cache=True, nogil=True)
def _put_u32(out, pos, v):
    v = np.uint32(v)
    for k in range(4):
        out[pos + k] = np.uint8((v >> np.uint32(8 * k)) & np.uint32(0xFF))


@njit(cache=True, nogil=True)
def frame_into(table, out, pos, data_start, data_len):
    """Write the header at out[pos:pos+12] and the footer after the data, which must already be at
    out[data_start:data_start+data_len] with data_start == pos + 12. Returns the position after the footer."""
    n = np.uint64(data_len)
    for k in range(8):
        out[pos + k] = np.uint8((n >> np.uint64(8 * k)) & np.uint64(0xFF))
    _put_u32(out, pos + 8, _mask(_crc_update(table, out, pos, pos + 8, 0)))
    end = data_start + data_len
    _put_u32(out, end, _mask(_crc_update(table, out, data_start, end, 0)))
    return end + 4


@njit(cache=True, nogil=True)
def _frame_many(table, data, offsets, out):
    pos = 0
    for r in range(offsets.shape[0] - 1):
        a = offsets[r]
        b = offsets[r + 1]
        ln = b - a
        out[pos + 12:pos + 12 + ln] = data[a:b]
        pos = frame_into(table, out, pos, pos + 12, ln)
    return pos


def frame_size(payload_len: int) -> int:
    return payload_len + FRAME_OVERHEAD


def crc32c(data: bytes | np.ndarray) -> int:
    buf = np.frombuffer(data, dtype=np.uint8) if not isinstance(data, np.ndarray) else data
    return int(_crc_update(CRC_TABLE, buf, 0, buf.shape[0], 0))


def masked_crc32c(data: bytes | np.ndarray) -> int:
    return int(_mask(crc32c(data)))


def frame_payloads(data: np.ndarray, offsets: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Frame concatenated payloads ``data`` split at ``offsets`` (n+1 entries).
    Returns (framed uint8 array, framed lengths int64 array)."""
    offsets = np.asarray(offsets, dtype=np.int64)
    lengths = np.diff(offsets) + FRAME_OVERHEAD
    out = np.empty(int(lengths.sum()), dtype=np.uint8)
    _frame_many(CRC_TABLE, np.ascontiguousarray(data, dtype=np.uint8), offsets, out)
    return out, lengths
