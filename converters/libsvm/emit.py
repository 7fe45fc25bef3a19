"""The fixed-width LibSVM layout's serializer: parsed rows -> TFRecord-framed ``tf.train.Example`` bytes in one
compiled pass, byte for byte what ``tfrecord.examples.serialize_batch`` writes for the same rows and schema.

The general serializer handles any schema in two passes (every record's sizes first, then the bytes) over
columns stacked into one int and one float matrix. This layout has three features of known kinds (a float32
label, ``field_size`` int64 ids, ``field_size`` float32 values), so almost every byte of a record is fixed:
the label's and the values' map entries up to their payload are constants (``_templates``, built once per
block in Python), and only the ids' entry depends on the row (its varints' total length). Per row the kernel
sums the ids' varint lengths, writes the record (the constants copied, the ids as varints, the floats' bytes
copied 8 at a time) and frames it (``crc.frame_into``: length, both masked CRC32Cs). The output buffer is
allocated for the largest possible records (untouched pages cost nothing) and the framed lengths come out of
the same pass, so no sizing pass is needed.
"""
from __future__ import annotations

import numpy as np

from ..tfrecord.crc import CRC_TABLE, FRAME_OVERHEAD, frame_into, load_u64
from ..tfrecord.examples import put_varint, varint_len
from ..util.jit import njit
from ..util.protowire import varint
from ..util.shmring import out_buffer

__all__ = ["serialize_fixed", "max_record_bytes"]

_LABEL, _IDS, _VALUES = 0, 1, 2


def _entry_head(key: bytes, feature_tag: int, payload: int) -> bytes:
    """A ``Features.feature`` map entry's bytes up to its packed payload (``payload`` bytes, > 0)."""
    lst = 1 + len(varint(payload)) + payload
    feat = 1 + len(varint(lst)) + lst
    entry = 1 + len(varint(len(key))) + len(key) + 1 + len(varint(feat)) + feat
    return (b"\x0a" + varint(entry) + b"\x0a" + varint(len(key)) + key + b"\x12" + varint(feat)
            + bytes([feature_tag]) + varint(lst) + b"\x0a" + varint(payload))


def _templates(keys: tuple[str, str, str], field_size: int):
    """``(order, heads, head_offsets, ids_key, fixed)``: the features in the schema's (sorted) order as kinds;
    the label's and the values' entry heads (by kind; the ids' slot empty); the ids key's bytes; and the bytes of
    a record's Features that do not depend on the row (the two float entries, payloads included)."""
    names = dict(zip((_LABEL, _IDS, _VALUES), keys))
    order = np.array(sorted(names, key=lambda k: names[k]), dtype=np.int64)
    heads = [b"", b"", b""]
    heads[_LABEL] = _entry_head(names[_LABEL].encode("utf-8"), 0x12, 4)
    heads[_VALUES] = _entry_head(names[_VALUES].encode("utf-8"), 0x12, 4 * field_size)
    offsets = np.cumsum([0] + [len(h) for h in heads]).astype(np.int64)
    fixed = len(heads[_LABEL]) + 4 + len(heads[_VALUES]) + 4 * field_size
    return (order, np.frombuffer(b"".join(heads), dtype=np.uint8), offsets,
            np.frombuffer(names[_IDS].encode("utf-8"), dtype=np.uint8), fixed)


def max_record_bytes(keys: tuple[str, str, str], field_size: int) -> int:
    """An upper bound of one framed record's bytes (every id a 10-byte varint)."""
    ids_entry = 5 * 11 + len(keys[1].encode("utf-8")) + 10 * field_size  # 5 tags + varints, the key, the ids
    return FRAME_OVERHEAD + 11 + _templates(keys, field_size)[4] + ids_entry


@njit(cache=True, nogil=True, inline="always")
def _vlen(v):
    if 0 <= v < 2097152:  # the common ids: no loop
        return 1 if v < 128 else 2 if v < 16384 else 3
    return varint_len(v)


@njit(cache=True, nogil=True, inline="always")
def _put(out, q, v):
    if 0 <= v < 2097152:  # the common ids: one to three bytes, no loop
        if v < 128:
            out[q] = np.uint8(v)
            return q + 1
        out[q] = np.uint8((v & 0x7F) | 0x80)
        if v < 16384:
            out[q + 1] = np.uint8(v >> 7)
            return q + 2
        out[q + 1] = np.uint8(((v >> 7) & 0x7F) | 0x80)
        out[q + 2] = np.uint8(v >> 14)
        return q + 3
    return put_varint(out, q, v)


@njit(cache=True, nogil=True, inline="always")
def _copy(out, q, src, a, n):
    """out[q:q+n] = src[a:a+n], 8 bytes at a time (both uint8 arrays)."""
    k = 0
    while k + 8 <= n:
        w = load_u64(src, a + k)
        for b in range(8):
            out[q + k + b] = np.uint8((w >> np.uint64(8 * b)) & np.uint64(0xFF))
        k += 8
    while k < n:
        out[q + k] = src[a + k]
        k += 1
    return q + n


@njit(cache=True, nogil=True)
def _emit_row(table, out, pos, label_bytes, ids, vbytes, row, order, heads, hoff, idkey, fixed):
    """Write row ``row`` as one framed record at ``out[pos:]``; returns the position after it.
    ``label_bytes``: the labels' float32 bytes (4 a row); ``vbytes``: the values' bytes (4 * field_size a row)."""
    f = ids.shape[1]
    p = 0
    for j in range(f):
        p += _vlen(ids[row, j])
    klen = idkey.shape[0]
    lst = 1 + _vlen(p) + p
    feat = 1 + _vlen(lst) + lst
    entry = 1 + _vlen(klen) + klen + 1 + _vlen(feat) + feat
    total = fixed + 1 + _vlen(entry) + entry
    start = pos + 12
    out[start] = 0x0A
    q = _put(out, start + 1, total)
    for kind in order:
        if kind == 1:
            out[q] = 0x0A
            q = _put(out, q + 1, entry)
            out[q] = 0x0A
            q = _put(out, q + 1, klen)
            for k in range(klen):
                out[q + k] = idkey[k]
            q += klen
            out[q] = 0x12
            q = _put(out, q + 1, feat)
            out[q] = 0x1A
            q = _put(out, q + 1, lst)
            out[q] = 0x0A
            q = _put(out, q + 1, p)
            for j in range(f):
                q = _put(out, q, ids[row, j])
        else:
            q = _copy(out, q, heads, hoff[kind], hoff[kind + 1] - hoff[kind])
            if kind == 0:
                q = _copy(out, q, label_bytes, 4 * row, 4)
            else:
                q = _copy(out, q, vbytes, 4 * f * row, 4 * f)
    return frame_into(table, out, pos, start, q - start)


@njit(cache=True, nogil=True)
def _emit_rows(table, out, label_bytes, ids, vbytes, order, heads, hoff, idkey, fixed, lengths):
    pos = np.int64(0)  # not the literal 0: a call with it would compile a second time
    for r in range(ids.shape[0]):
        end = _emit_row(table, out, pos, label_bytes, ids, vbytes, r, order, heads, hoff, idkey, fixed)
        lengths[r] = end - pos
        pos = end
    return pos


def serialize_fixed(label: np.ndarray, ids: np.ndarray, values: np.ndarray, keys: tuple[str, str, str],
                    space: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray]:
    """``(framed, lengths)`` of fixed-width rows (float32 ``label`` [n], int64 ``ids`` [n, f], float32
    ``values`` [n, f]) with feature names ``keys`` (label, ids, values): equal to ``serialize_batch`` with
    ``libsvm_schema(f, *keys)``. ``framed`` is built at the start of ``space`` (``out_buffer``) if it has room."""
    n, f = ids.shape
    order, heads, hoff, idkey, fixed = _templates(keys, f)
    out = out_buffer(space, n * max_record_bytes(keys, f))
    lengths = np.empty(n, dtype=np.int64)
    label_bytes = np.ascontiguousarray(label, dtype=np.float32).view(np.uint8)
    vbytes = np.ascontiguousarray(values, dtype=np.float32).reshape(n * f).view(np.uint8)
    ids = np.ascontiguousarray(ids, dtype=np.int64)
    end = _emit_rows(CRC_TABLE, out, label_bytes, ids, vbytes, order, heads, hoff, idkey, fixed, lengths)
    return out[:end], lengths
