"""Serialize ``tf.train.Example`` records straight into framed TFRecord bytes.

One compiled pass per batch writes the protobuf wire format of every Example (features in sorted key
order, so the bytes are deterministic and equal protobuf's own deterministic serialization) together with
the TFRecord framing and both CRC32Cs (``crc``: the processor's CRC32C instruction where there is one). No
protobuf objects are built. This is the general serializer (any schema; the text converter's); the LibSVM
layouts have one-pass serializers of their own (``libsvm.emit``, ``libsvm.emit_sparse``) that write the same
bytes.

Fixed-length features come as one array per feature (n rows); variable-length ones as CSR
``(values, row_splits)``: all rows' values end to end and ``n + 1`` offsets (row ``r`` is
``values[row_splits[r]:row_splits[r + 1]]``; an empty row is allowed and written as an empty list).
"""
from __future__ import annotations

import numpy as np

from ..util.jit import njit
from .crc import CRC_TABLE, FRAME_OVERHEAD, copy_into, frame_into
from .schema import FeatureSpec, Schema

__all__ = ["FeatureSpec", "Schema", "serialize_batch", "varint_lengths", "row_varint_bytes", "column_payloads",
           "framed_lengths", "varint_len", "put_varint"]

@njit(cache=True, nogil=True)
def varint_len(v):
    if v < 0:
        return 10
    n = 1
    while v >= 128:
        v >>= 7
        n += 1
    return n


@njit(cache=True, nogil=True)
def put_varint(out, pos, v):
    u = np.uint64(v)
    while u >= np.uint64(128):
        out[pos] = np.uint8((u & np.uint64(0x7F)) | np.uint64(0x80))
        u >>= np.uint64(7)
        pos += 1
    out[pos] = np.uint8(u)
    return pos + 1


@njit(cache=True, nogil=True, inline="always")
def _list_len(p):
    """FloatList/Int64List: one packed field 1, omitted when empty (as protobuf does)."""
    return 0 if p == 0 else 1 + varint_len(p) + p


@njit(cache=True, nogil=True)
def _sizes(ints, vints, vsplits, kinds, starts, ends, keylens, n):
    """Per record: Example size and Features size, plus per (record, feature) the list payload size. Kinds:
    0/1 = fixed int64/float32 columns ``[start, end)``; 2/3 = variable-length int64/float32, row ``start`` of
    ``vsplits``."""
    nf = kinds.shape[0]
    ex = np.empty(n, dtype=np.int64)
    features = np.empty(n, dtype=np.int64)
    payload = np.empty((n, nf), dtype=np.int64)
    for r in range(n):
        total = 0
        for f in range(nf):
            kind = kinds[f]
            if kind == 1:
                p = 4 * (ends[f] - starts[f])
            elif kind == 0:
                p = 0
                for c in range(starts[f], ends[f]):
                    p += varint_len(ints[r, c])
            elif kind == 3:
                p = 4 * (vsplits[starts[f], r + 1] - vsplits[starts[f], r])
            else:
                p = 0
                for c in range(vsplits[starts[f], r], vsplits[starts[f], r + 1]):
                    p += varint_len(vints[c])
            payload[r, f] = p
            lst = _list_len(p)
            feat = 1 + varint_len(lst) + lst       # Feature: oneof field 2 (float) or 3 (int64)
            entry = 1 + varint_len(keylens[f]) + keylens[f] + 1 + varint_len(feat) + feat
            total += 1 + varint_len(entry) + entry  # Features.feature map entry, field 1
        features[r] = total
        ex[r] = 1 + varint_len(total) + total      # Example.features, field 1
    return ex, features, payload


@njit(cache=True, nogil=True)
def _write(table, ints, fbytes, vints, vfbytes, vsplits, kinds, starts, ends, keys, keyoffs, features, payload,
           out):
    n = features.shape[0]
    nf = kinds.shape[0]
    pos = np.int64(0)  # not the literal 0: a call with it would compile a second time
    for r in range(n):
        data_start = pos + 12
        q = data_start
        out[q] = 0x0A
        q = put_varint(out, q + 1, features[r])
        for f in range(nf):
            p = payload[r, f]
            kind = kinds[f]
            klen = keyoffs[f + 1] - keyoffs[f]
            lst = _list_len(p)
            feat = 1 + varint_len(lst) + lst
            entry = 1 + varint_len(klen) + klen + 1 + varint_len(feat) + feat
            out[q] = 0x0A
            q = put_varint(out, q + 1, entry)
            out[q] = 0x0A
            q = put_varint(out, q + 1, klen)
            for k in range(klen):
                out[q + k] = keys[keyoffs[f] + k]
            q += klen
            out[q] = 0x12
            q = put_varint(out, q + 1, feat)
            out[q] = 0x12 if kind == 1 or kind == 3 else 0x1A
            q = put_varint(out, q + 1, lst)
            if p == 0:
                continue
            out[q] = 0x0A
            q = put_varint(out, q + 1, p)
            if kind == 1:
                b0 = 4 * starts[f]
                copy_into(out, q, fbytes, r * fbytes.shape[1] + b0, p)
                q += p
            elif kind == 0:
                for c in range(starts[f], ends[f]):
                    q = put_varint(out, q, ints[r, c])
            elif kind == 3:
                b0 = 4 * vsplits[starts[f], r]
                copy_into(out, q, vfbytes, b0, p)
                q += p
            else:
                for c in range(vsplits[starts[f], r], vsplits[starts[f], r + 1]):
                    q = put_varint(out, q, vints[c])
        pos = frame_into(table, out, pos, data_start, q - data_start)
    return pos


def serialize_batch(schema: Schema, columns: dict[str, np.ndarray | tuple[np.ndarray, np.ndarray]]
                    ) -> tuple[np.ndarray, np.ndarray]:
    """Serialize n records given as one array per fixed feature (shape (n,) or (n, k)) and one
    ``(values, row_splits)`` pair per variable-length feature (``row_splits``: n + 1 non-decreasing offsets
    from 0 to ``len(values)``).

    Returns ``(framed, lengths)``: the TFRecord-framed bytes of all n Examples as one uint8 array, and
    each framed record's length (int64, so ``lengths.sum() == framed.size``).
    """
    strings = [f.name for f in schema.features if f.dtype == "string"]
    if strings or schema.raw:  # only adopted sets have them; tfpipe never writes such records
        raise ValueError(f"cannot serialize {'string features ' + str(strings) if strings else 'a raw schema'}: "
                         "only int64 and float32 features")
    missing = [f.name for f in schema.features if f.name not in columns]
    if missing:
        raise ValueError(f"missing columns for features {missing}")
    n = None
    int_cols, float_cols, kinds, starts, ends = [], [], [], [], []
    vint, vflt, vsplits = [], [], []
    ni = nfl = nvi = nvf = 0
    for f in schema.features:
        if f.varlen:
            values, splits = _csr(f, columns[f.name])
            rows = splits.shape[0] - 1
        else:
            a = np.asarray(columns[f.name])
            a = a.reshape(a.shape[0], -1)
            if a.shape[1] != f.width:
                raise ValueError(f"feature {f.name!r}: expected width {f.width}, got array of shape {a.shape}")
            rows = a.shape[0]
        if n is None:
            n = rows
        elif rows != n:
            raise ValueError(f"feature {f.name!r}: {rows} rows, expected {n}")
        if f.varlen:
            kinds.append(2 if f.dtype == "int64" else 3); starts.append(len(vsplits)); ends.append(0)
            if f.dtype == "int64":
                vint.append(values.astype(np.int64, copy=False)); vsplits.append(splits + nvi); nvi += values.size
            else:
                vflt.append(values.astype(np.float32, copy=False)); vsplits.append(splits + nvf); nvf += values.size
        elif f.dtype == "int64":
            int_cols.append(a.astype(np.int64, copy=False))
            kinds.append(0); starts.append(ni); ends.append(ni + f.width); ni += f.width
        else:
            float_cols.append(a.astype(np.float32, copy=False))
            kinds.append(1); starts.append(nfl); ends.append(nfl + f.width); nfl += f.width
    ints = _side_by_side(int_cols, n, np.int64)
    floats = _side_by_side(float_cols, n, np.float32)
    fbytes = floats.view(np.uint8).reshape(n, nfl * 4)
    vints = _joined(vint, np.int64)
    vfbytes = _joined(vflt, np.float32).view(np.uint8)
    vsp = np.ascontiguousarray(np.stack(vsplits)) if vsplits else np.zeros((0, n + 1), np.int64)
    key_bytes = [f.name.encode("utf-8") for f in schema.features]
    keyoffs = np.zeros(len(key_bytes) + 1, dtype=np.int64)
    keyoffs[1:] = np.cumsum([len(k) for k in key_bytes])
    keys = np.frombuffer(b"".join(key_bytes), dtype=np.uint8)
    kinds_a = np.asarray(kinds, dtype=np.int64)
    starts_a = np.asarray(starts, dtype=np.int64)
    ends_a = np.asarray(ends, dtype=np.int64)
    ex, features, payload = _sizes(ints, vints, vsp, kinds_a, starts_a, ends_a, np.diff(keyoffs), n)
    lengths = ex + FRAME_OVERHEAD
    out = np.empty(int(lengths.sum()), dtype=np.uint8)
    _write(CRC_TABLE, ints, fbytes, vints, vfbytes, vsp, kinds_a, starts_a, ends_a, keys, keyoffs, features,
           payload, out)
    return out, lengths


def _side_by_side(cols: list[np.ndarray], n: int, dtype) -> np.ndarray:
    """The fixed-width columns of one dtype side by side, C-contiguous (no copy for one contiguous column)."""
    if not cols:
        return np.zeros((n, 0), dtype)
    return np.ascontiguousarray(cols[0] if len(cols) == 1 else np.hstack(cols))


def _joined(parts: list[np.ndarray], dtype) -> np.ndarray:
    """The variable-length values of one dtype end to end (no copy for a single contiguous feature)."""
    if len(parts) == 1:
        return np.ascontiguousarray(parts[0])
    return np.concatenate(parts) if parts else np.zeros(0, dtype)


def _csr(f: FeatureSpec, column) -> tuple[np.ndarray, np.ndarray]:
    """A variable-length feature's ``(values, row_splits)``, checked."""
    if not (isinstance(column, tuple) and len(column) == 2):
        raise ValueError(f"feature {f.name!r} has variable length: give (values, row_splits), got "
                         f"{type(column).__name__}")
    values = np.asarray(column[0]).reshape(-1)
    splits = np.asarray(column[1], dtype=np.int64).reshape(-1)
    if splits.size < 1 or splits[0] != 0 or splits[-1] != values.size or (np.diff(splits) < 0).any():
        raise ValueError(f"feature {f.name!r}: row_splits must rise from 0 to len(values) = {values.size}, got "
                         f"{splits[:3].tolist()}...{splits[-2:].tolist()} ({splits.size} entries)")
    return values, splits


# -- sizes without serializing: what a planner needs to place records in shards -----------------------------

def varint_lengths(values) -> np.ndarray:
    """Bytes of each value as a protobuf varint (int64 semantics: a negative value takes 10 bytes)."""
    a = np.asarray(values).astype(np.int64, copy=False)
    return _varint_lengths(np.ascontiguousarray(a).reshape(-1)).reshape(a.shape)


@njit(cache=True, nogil=True)
def _varint_lengths(a):
    out = np.empty(a.size, np.int64)
    for i in range(a.size):
        out[i] = varint_len(a[i])
    return out


def row_varint_bytes(a: np.ndarray) -> np.ndarray:
    """Per row of a 2-D integer array, the bytes of its values as protobuf varints (an Int64List's payload);
    int64, or uint32 as it is (no widened copy)."""
    a = np.asarray(a)
    a = np.ascontiguousarray(a, dtype=a.dtype if a.dtype == np.uint32 else np.int64)
    return _row_varint_bytes(a.reshape(a.shape[0], -1))


@njit(cache=True, nogil=True)
def _row_varint_bytes(a):
    n, k = a.shape
    out = np.empty(n, dtype=np.int64)
    for r in range(n):
        total = 0
        for c in range(k):
            total += varint_len(a[r, c])
        out[r] = total
    return out


def column_payloads(schema: Schema, columns: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """Per feature, the packed-list payload bytes of each record (int64 arrays): ``4 * width`` for float32
    features, the sum of the varint lengths of the row for int64 features."""
    out: dict[str, np.ndarray] = {}
    for f in schema.features:
        a = np.asarray(columns[f.name])
        if f.dtype == "float32":
            out[f.name] = np.full(a.shape[0], 4 * f.width, dtype=np.int64)
        else:
            out[f.name] = _row_varint_bytes(np.ascontiguousarray(a.reshape(a.shape[0], -1), dtype=np.int64))
    return out


def framed_lengths(schema: Schema, payloads: dict[str, np.ndarray | int]) -> np.ndarray:
    """Framed TFRecord length of each record from its per-feature payload bytes (see ``column_payloads``):
    equal to the ``lengths`` ``serialize_batch`` returns for the same records, without building any bytes.
    Payloads are arrays (one per record) or ints (the same for every record; at least one must be an array)."""
    total = None
    for f in schema.features:
        p = np.asarray(payloads[f.name], dtype=np.int64)
        klen = len(f.name.encode("utf-8"))
        lst = 1 + varint_lengths(p) + p
        feat = 1 + varint_lengths(lst) + lst
        entry = 1 + int(varint_lengths(klen)) + klen + 1 + varint_lengths(feat) + feat
        part = 1 + varint_lengths(entry) + entry
        total = part if total is None else total + part
    return np.atleast_1d(1 + varint_lengths(total) + total + FRAME_OVERHEAD).astype(np.int64)
