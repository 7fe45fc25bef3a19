"""Parse ``tf.train.Example`` records of fixed-width ``int64`` / ``float32`` features into columns, without
TensorFlow: a compiled walk over the protobuf (``Example.features`` -> map entries -> ``Int64List`` /
``FloatList``, packed or not), what ``tf.io.parse_example`` with ``FixedLenFeature`` specs returns for such
records. Features the schema does not name are skipped, as TensorFlow skips them; a record that lacks a feature,
holds another number of values, another kind of list, or is not a well-formed Example is a ``ValueError`` naming
the record's index and the feature. Used to re-lay rows (``sharding.relayout``)."""
from __future__ import annotations

import numpy as np

from ..util.jit import njit
from .schema import Schema

__all__ = ["parse_examples"]

_OK, _BAD, _MISSING, _WIDTH, _KIND = 0, 1, 2, 3, 4


@njit(cache=True, nogil=True)
def _varint(buf, pos, end):
    v = np.uint64(0)
    shift = 0
    while pos < end and shift < 64:
        b = buf[pos]
        pos += 1
        v |= np.uint64(b & 0x7F) << np.uint64(shift)
        if b < 0x80:
            return v, pos
        shift += 7
    return v, -1


@njit(cache=True, nogil=True)
def _skip(buf, pos, end, wire):
    """The position after a field of wire type ``wire`` at ``pos`` (-1: malformed)."""
    if wire == 0:
        _, pos = _varint(buf, pos, end)
        return pos
    if wire == 1:
        return pos + 8 if pos + 8 <= end else -1
    if wire == 5:
        return pos + 4 if pos + 4 <= end else -1
    if wire == 2:
        n, pos = _varint(buf, pos, end)
        if pos < 0 or pos + np.int64(n) > end:
            return -1
        return pos + np.int64(n)
    return -1


@njit(cache=True, nogil=True)
def _find(buf, pos, end, number):
    """The next length-delimited field ``number`` in ``buf[pos:end]``, other fields skipped: (its payload's start,
    end); (end, end) when there is none; (-1, -1) when the bytes are malformed."""
    while pos < end:
        tag, pos = _varint(buf, pos, end)
        if pos < 0:
            return -1, -1
        wire = np.int64(tag & np.uint64(7))
        if np.int64(tag >> np.uint64(3)) == number and wire == 2:
            n, pos = _varint(buf, pos, end)
            if pos < 0 or pos + np.int64(n) > end:
                return -1, -1
            return pos, pos + np.int64(n)
        pos = _skip(buf, pos, end, wire)
        if pos < 0:
            return -1, -1
    return end, end


@njit(cache=True, nogil=True)
def _match(buf, a, b, keys, keyoffs):
    for k in range(keyoffs.shape[0] - 1):
        ka, kb = keyoffs[k], keyoffs[k + 1]
        if kb - ka == b - a:
            same = True
            for j in range(b - a):
                if buf[a + j] != keys[ka + j]:
                    same = False
                    break
            if same:
                return k
    return -1


@njit(cache=True, nogil=True)
def _value(buf, pos, end, is_int):
    """One value at ``pos``: a varint (int64) or 4 little-endian bytes (float32 bits); (bits, next position or
    -1)."""
    if is_int:
        return _varint(buf, pos, end)
    if pos + 4 > end:
        return np.uint64(0), -1
    v = (np.uint64(buf[pos]) | np.uint64(buf[pos + 1]) << np.uint64(8)
         | np.uint64(buf[pos + 2]) << np.uint64(16) | np.uint64(buf[pos + 3]) << np.uint64(24))
    return v, pos + 4


@njit(cache=True, nogil=True)
def _values(buf, pos, end, is_int, out, row, col, width):
    """Read the one list of a Feature (field ``pos:end``) into ``out[row, col:col + width]``; the status."""
    want = 3 if is_int else 2
    count = 0
    seen = False
    while pos < end:
        tag, pos = _varint(buf, pos, end)
        if pos < 0:
            return _BAD, 0
        field, wire = np.int64(tag >> np.uint64(3)), np.int64(tag & np.uint64(7))
        if field != want or wire != 2:
            if field in (1, 2, 3) and field != want:
                return _KIND, 0
            pos = _skip(buf, pos, end, wire)
            if pos < 0:
                return _BAD, 0
            continue
        seen = True
        n, pos = _varint(buf, pos, end)
        if pos < 0 or pos + np.int64(n) > end:
            return _BAD, 0
        lend = pos + np.int64(n)
        while pos < lend:  # the list: field 1, packed (wire 2) or one value per field (0: varint, 5: fixed32)
            tag, pos = _varint(buf, pos, lend)
            if pos < 0:
                return _BAD, 0
            field, wire = np.int64(tag >> np.uint64(3)), np.int64(tag & np.uint64(7))
            if field != 1:
                pos = _skip(buf, pos, lend, wire)
                if pos < 0:
                    return _BAD, 0
                continue
            if wire == 2:  # packed: the values up to the field's end
                m, pos = _varint(buf, pos, lend)
                if pos < 0 or pos + np.int64(m) > lend:
                    return _BAD, 0
                vend = pos + np.int64(m)
            elif (wire == 0 and is_int) or (wire == 5 and not is_int):  # one value
                vend = lend
            else:
                return _BAD, 0
            while pos < vend:
                v, pos = _value(buf, pos, vend, is_int)
                if pos < 0:
                    return _BAD, 0
                if count < width:
                    out[row, col + count] = v
                count += 1
                if wire != 2:
                    break
    if not seen and width > 0:
        return _MISSING, 0
    return _OK, count


@njit(cache=True, nogil=True)
def _parse(buf, starts, ends, keys, keyoffs, is_int, widths, cols, out):
    """Every record ``buf[starts[i]:ends[i]]`` into ``out`` (uint64 bits: int64 values, float32 bits); returns
    (status, record, feature) of the first problem, status 0 when none."""
    nf = widths.shape[0]
    found = np.zeros(nf, np.int64)
    for i in range(starts.shape[0]):
        found[:] = -1
        pos, end = starts[i], ends[i]
        while pos < end:  # Example: field 1 = Features
            fa, fb = _find(buf, pos, end, 1)
            if fa < 0:
                return _BAD, i, -1
            pos = fb
            while fa < fb:  # Features: field 1 = map entry {1: key, 2: Feature}
                ea, eb = _find(buf, fa, fb, 1)
                if ea < 0:
                    return _BAD, i, -1
                fa = eb
                ka, kb = _find(buf, ea, eb, 1)
                va, vb = _find(buf, ea, eb, 2)
                if ka < 0 or va < 0:
                    return _BAD, i, -1
                k = _match(buf, ka, kb, keys, keyoffs)
                if k >= 0:
                    status, count = _values(buf, va, vb, is_int[k], out, i, cols[k], widths[k])
                    if status != _OK:
                        return status, i, k
                    found[k] = count
        for k in range(nf):
            if found[k] < 0:
                return _MISSING, i, k
            if found[k] != widths[k]:
                return _WIDTH, i, k
    return _OK, -1, -1


def parse_examples(records: list[bytes], schema: Schema) -> dict[str, np.ndarray]:
    """Columns of ``records`` (serialized ``tf.train.Example``): for each feature of ``schema`` (fixed width,
    ``int64`` or ``float32``) an array of shape ``(n, *feature.shape)`` of its dtype. A ValueError names the
    record (its index in ``records``) and the feature of the first record that does not fit."""
    feats = schema.features
    for f in feats:
        if f.varlen or f.dtype not in ("int64", "float32"):
            raise ValueError(f"feature {f.name!r}: only fixed-width int64 and float32 features parse here")
    n = len(records)
    offs = np.zeros(n + 1, np.int64)
    np.cumsum([len(r) for r in records], out=offs[1:])
    buf = np.frombuffer(b"".join(records), np.uint8) if n else np.zeros(0, np.uint8)
    key_bytes = [f.name.encode() for f in feats]
    keyoffs = np.zeros(len(feats) + 1, np.int64)
    np.cumsum([len(k) for k in key_bytes], out=keyoffs[1:])
    keys = np.frombuffer(b"".join(key_bytes), np.uint8)
    widths = np.array([f.width for f in feats], np.int64)
    cols = np.concatenate([[0], np.cumsum(widths)[:-1]]).astype(np.int64)
    out = np.zeros((n, int(widths.sum())), np.uint64)
    status, row, k = _parse(buf, offs[:-1], offs[1:], keys, keyoffs,
                            np.array([f.dtype == "int64" for f in feats]), widths, cols, out)
    if status != _OK:
        name = repr(feats[k].name) if k >= 0 else "-"
        why = {_BAD: "is not a well-formed tf.train.Example", _MISSING: f"has no feature {name}",
               _WIDTH: f"holds another number of values than the {int(widths[k]) if k >= 0 else 0} of "
                       f"feature {name}",
               _KIND: f"holds feature {name} as another kind of list than {feats[k].dtype if k >= 0 else ''}"}
        raise ValueError(f"record {int(row)} {why[int(status)]}")
    result = {}
    for f, c, w in zip(feats, cols, widths):
        block = np.ascontiguousarray(out[:, c:c + w])
        values = block.view(np.int64) if f.dtype == "int64" else block.astype(np.uint32).view(np.float32)
        result[f.name] = values.reshape((n, *f.shape))
    return result
