"""The sparse LibSVM layout's serializer: CSR rows -> TFRecord-framed ``tf.train.Example`` bytes in one compiled
pass, byte for byte what ``tfrecord.examples.serialize_batch`` writes for the same rows and schema.

Per row the kernel sizes the row's features (the ids' varints summed, the floats counted), writes the
Example — each ``Features.feature`` map entry's header, then its packed payload: ids as varints, floats'
bytes copied 8 at a time — and frames it (``crc.frame_into``). Features: ``label`` (a float32 per row, or a
list per row with multi-label), ``ids`` and ``values`` (variable length), optionally ``qid`` (an int64 per
row), in the schema's sorted-name order. The output buffer is allocated for the largest possible records
(untouched pages cost nothing), and the framed lengths come out of the same pass.
"""
from __future__ import annotations

import numpy as np

from ..tfrecord.crc import CRC_TABLE, FRAME_OVERHEAD, frame_into
from ..util.jit import njit
from ..util.shmring import out_buffer
from .emit import _copy, _put, _vlen

__all__ = ["serialize_csr"]

_LABEL, _IDS, _VALUES, _QID = 0, 1, 2, 3


@njit(cache=True, nogil=True, inline="always")
def _part(klen, p):
    """Bytes of one map entry of ``Features.feature`` (key ``klen`` bytes, packed payload ``p`` bytes), and
    its entry and Feature sizes."""
    lst = 0 if p == 0 else 1 + _vlen(p) + p
    feat = 1 + _vlen(lst) + lst
    entry = 1 + _vlen(klen) + klen + 1 + _vlen(feat) + feat
    return 1 + _vlen(entry) + entry, entry, feat, lst


@njit(cache=True, nogil=True, inline="always")
def _head(out, q, keys, koff, kind, tag, p):
    """Write the map entry's bytes up to its payload; returns the position of the payload."""
    klen = koff[kind + 1] - koff[kind]
    _, entry, feat, lst = _part(klen, p)
    out[q] = 0x0A
    q = _put(out, q + 1, entry)
    out[q] = 0x0A
    q = _put(out, q + 1, klen)
    for k in range(klen):
        out[q + k] = keys[koff[kind] + k]
    q += klen
    out[q] = 0x12
    q = _put(out, q + 1, feat)
    out[q] = tag
    q = _put(out, q + 1, lst)
    if p > 0:
        out[q] = 0x0A
        q = _put(out, q + 1, p)
    return q


@njit(cache=True, nogil=True, inline="always")
def _payload(kind, la, lb, a, b, pid, qid, r):
    """Bytes of a feature's packed payload: the row's labels (float32s), ids (``pid``: their varints), values
    (float32s) or qid (one varint)."""
    if kind == 0:
        return 4 * (lb - la)
    if kind == 1:
        return pid
    if kind == 2:
        return 4 * (b - a)
    return _vlen(qid[r])


@njit(cache=True, nogil=True)
def _emit_csr(table, out, lbytes, label_splits, ids, vbytes, row_splits, qid, order, keys, koff, lengths):
    """``label_splits`` is empty without multi-label (one label per row), ``qid`` empty without qids."""
    n = row_splits.shape[0] - 1
    multi = label_splits.shape[0] > 0
    pos = np.int64(0)  # not the literal 0: a call with it would compile a second time
    for r in range(n):
        a = row_splits[r]
        b = row_splits[r + 1]
        pid = 0
        for j in range(a, b):
            pid += _vlen(ids[j])
        la = label_splits[r] if multi else r
        lb = label_splits[r + 1] if multi else r + 1
        total = 0
        for kind in order:
            total += _part(koff[kind + 1] - koff[kind], _payload(kind, la, lb, a, b, pid, qid, r))[0]
        start = pos + 12
        out[start] = 0x0A
        q = _put(out, start + 1, total)
        for kind in order:
            q = _head(out, q, keys, koff, kind, 0x1A if kind == 1 or kind == 3 else 0x12,
                      _payload(kind, la, lb, a, b, pid, qid, r))
            if kind == 0:
                q = _copy(out, q, lbytes, 4 * la, 4 * (lb - la))
            elif kind == 1:
                for j in range(a, b):
                    q = _put(out, q, ids[j])
            elif kind == 2:
                q = _copy(out, q, vbytes, 4 * a, 4 * (b - a))
            else:
                q = _put(out, q, qid[r])
        end = frame_into(table, out, pos, start, q - start)
        lengths[r] = end - pos
        pos = end
    return pos


def serialize_csr(label: np.ndarray, label_splits: np.ndarray | None, ids: np.ndarray, values: np.ndarray,
                  row_splits: np.ndarray, qid: np.ndarray | None, keys: tuple[str, ...],
                  space: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray]:
    """``(framed, lengths)`` of sparse rows: equal to ``serialize_batch`` with ``libsvm_schema(None, ...)``.
    ``keys``: label, ids, values (and the qid's name, used when ``qid`` is given). ``framed`` is built at the
    start of ``space`` (``util.shmring.out_buffer``) if it has room."""
    n = row_splits.shape[0] - 1
    names = list(keys[:3]) + [keys[3] if qid is not None else ""]
    kinds = [k for k in range(4) if names[k]]
    order = np.array(sorted(kinds, key=lambda k: names[k]), dtype=np.int64)
    kb = [names[k].encode("utf-8") for k in range(4)]
    koff = np.cumsum([0] + [len(b) for b in kb]).astype(np.int64)
    nlab = label.shape[0]
    bound = (FRAME_OVERHEAD + 11 + 4 * (11 * 5) + int(koff[-1])) * n + 4 * nlab + 14 * ids.shape[0] + 10 * n
    out = out_buffer(space, bound)
    lengths = np.empty(n, dtype=np.int64)
    splits = np.zeros(0, np.int64) if label_splits is None else np.ascontiguousarray(label_splits, np.int64)
    end = _emit_csr(CRC_TABLE, out, np.ascontiguousarray(label, np.float32).view(np.uint8), splits,
                    np.ascontiguousarray(ids, np.int64), np.ascontiguousarray(values, np.float32).view(np.uint8),
                    np.ascontiguousarray(row_splits, np.int64),
                    np.zeros(0, np.int64) if qid is None else np.ascontiguousarray(qid, np.int64), order,
                    np.frombuffer(b"".join(kb), dtype=np.uint8), koff, lengths)
    return out[:end], lengths
