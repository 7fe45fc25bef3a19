"""The compiled sparse LibSVM kernel (numba): one pass over a block's bytes writes every regular line as CSR
arrays (``ids``/``values`` end to end, ``row_splits`` per row), its label(s) (``labels`` + ``label_splits``,
one per row unless multi-label) and, with ``keep_qid``, its ``qid``. Same exact number parsing, same bad-line
codes and the same FALLBACK hand-over to the Python reference as the fixed-width kernel (``kernel``), whose
token helpers it shares.

Multi-label (scikit-learn's ``multilabel=True``): the first token is ``y1,y2,...`` (each a float; sorted
ascending with a stable sort on the float64 values, as Python's ``sorted`` does), or no label at all when it
is already an ``index:value`` token. A NaN label falls back (Python orders it its own way).
"""
from __future__ import annotations

import numpy as np

from ..util.jit import njit
from .kernel import (
    _EMPTY,
    _EXACT,
    _MANT_LIMIT,
    _UNDECIDED_VALUE,
    DONE,
    FALLBACK,
    ROWS_FULL,
    _blank_line,
    _hides_bytes,
    _index_reason,
    _irregular_reason,
    _is_delim,
    _is_qid,
    _is_ws,
    _line_end,
    _record_bad,
    _scan_float,
    _scan_label,
    _scan_token,
    _token_end,
    _value_outcome,
)
from .reasons import BAD_LABEL, MISSING_QID, NONFINITE

__all__ = ["parse_sparse_kernel", "DONE", "ROWS_FULL", "FALLBACK", "NNZ_FULL", "LABELS_FULL"]

# more exit statuses (grow that array and call again); the line at state[0] is then parsed again
NNZ_FULL, LABELS_FULL = 3, 4


@njit(cache=True, nogil=True, inline="always")
def _read_int(buf, a, b):
    """``[+-]digits`` filling ``[a, b)`` exactly, at most 18 digits: (ok, value). Anything else is not
    decided here (Python's ``int`` has more syntax: underscores, longer numbers)."""
    neg = False
    if a < b and (buf[a] == 43 or buf[a] == 45):
        neg = buf[a] == 45
        a += 1
    if b - a < 1 or b - a > 18:
        return False, np.int64(0)
    v = np.int64(0)
    for j in range(a, b):
        c = buf[j]
        if c < 48 or c > 57:
            return False, np.int64(0)
        v = v * 10 + (c - 48)
    return True, -v if neg else v


@njit(cache=True, nogil=True)
def parse_sparse_kernel(buf, state, base, allow_nonfinite, max_index, multilabel, keep_qid, labels, labels64,
                        label_splits, qids, ids, values, row_splits, counts, ex, pow10):
    """Parse lines from state[0] on. state = [pos, line, row, blank, n_examples, nnz, n_labels];
    ``row_splits[0]`` and ``label_splits[0]`` are 0. Returns DONE, ROWS_FULL / NNZ_FULL / LABELS_FULL (grow
    that array and call again) or FALLBACK (the line at state[0] needs the Python reference)."""
    n = buf.shape[0]
    rcap = row_splits.shape[0] - 1
    pos = state[0]
    line = state[1]
    row = state[2]
    nnz = state[5]
    nlab = state[6]
    status = DONE
    while pos < n:
        if row >= rcap:
            status = ROWS_FULL
            break
        start = pos
        q, nxt = _blank_line(buf, start, n, counts, ex, state, line)
        if nxt >= 0:
            pos = nxt
            line += 1
            continue
        bad = -1
        b0 = q
        b1 = q
        m = nlab
        fallback = False
        full = DONE
        features_first = False
        if multilabel:
            t1, colon = _scan_token(buf, q, n)
            features_first = colon >= 0  # 'i:v' first: no label at all
            p = q
            while not features_first:
                e = p
                while e < t1 and buf[e] != 44:  # ','
                    e += 1
                st, lab, _ = _scan_label(buf, p, e, pow10)
                if st == _EMPTY:
                    bad = BAD_LABEL
                elif st != _EXACT or np.isnan(lab):
                    fallback = True
                elif not allow_nonfinite and not np.isfinite(np.float32(lab)):
                    bad = NONFINITE
                elif m >= labels.shape[0]:
                    full = LABELS_FULL
                if bad >= 0 or fallback or full != DONE:
                    b1 = t1
                    break
                j = m  # stable insertion sort on the float64 values
                while j > nlab and labels64[j - 1] > lab:
                    labels64[j] = labels64[j - 1]
                    labels[j] = labels[j - 1]
                    j -= 1
                labels64[j] = lab
                labels[j] = np.float32(lab)
                m += 1
                if e >= t1:
                    break
                p = e + 1
            if not features_first:
                q = t1
        else:
            st, lab, q = _scan_label(buf, q, n, pow10)
            b1 = q
            if st != _EXACT:
                fallback = True
            elif not allow_nonfinite and not np.isfinite(np.float32(lab)):
                bad = NONFINITE
            elif m >= labels.shape[0]:
                full = LABELS_FULL
            else:
                labels[m] = np.float32(lab)
                m += 1
        k = nnz
        prev = np.int64(-1)
        first = True
        while bad < 0 and not fallback and full == DONE:
            while q < n and _is_ws(buf[q]):
                q += 1
            if q >= n or buf[q] == 10 or buf[q] == 35:
                break
            t0 = q
            idx = np.int64(0)
            while q < n:
                c = buf[q]
                if c < 48 or c > 57:
                    break
                idx = idx * 10 + (c - 48)  # wraps past 18 digits: such a token is irregular anyway
                q += 1
            nd = q - t0
            if nd == 0 or nd > 18 or q >= n or buf[q] != 58:
                t1, colon = _scan_token(buf, t0, n)
                if first and _is_qid(buf, t0, t1):
                    first = False
                    q = t1
                    fallback = _hides_bytes(buf, t0, t1)
                    if keep_qid and not fallback:
                        ok, qv = _read_int(buf, t0 + 4, t1)
                        fallback = not ok
                        qids[row] = qv
                    continue
                b0 = t0
                b1 = t1
                if first and keep_qid:
                    bad = MISSING_QID
                    b1 = t0  # no token to show
                    break
                bad = _irregular_reason(t0, colon)
                fallback = bad < 0
                break
            if first and keep_qid:
                bad = MISSING_QID
                b0 = b1 = t0
                break
            first = False
            q += 1  # past ':'
            if idx <= prev or (idx == 0 and base == 1) or (max_index >= 0 and idx > max_index):
                bad = _index_reason(idx, prev, base, max_index)
            if bad >= 0:
                b0 = t0
                b1 = _token_end(buf, q, n)
                break
            prev = idx
            # the value: '[+-]digits[.digits]' then a delimiter, written out here (as one inlined helper it
            # measured half as fast); anything else goes to the general scanner
            v0 = q
            neg = False
            if q < n and (buf[q] == 45 or buf[q] == 43):
                neg = buf[q] == 45
                q += 1
            mant = np.int64(0)
            d0 = q
            while q < n:
                c = buf[q]
                if c < 48 or c > 57:
                    break
                mant = mant * 10 + (c - 48)
                q += 1
            nd = q - d0
            e = 0
            if q < n and buf[q] == 46:
                q += 1
                f0 = q
                while q < n:
                    c = buf[q]
                    if c < 48 or c > 57:
                        break
                    mant = mant * 10 + (c - 48)
                    q += 1
                e = q - f0
                nd += e
            if 0 < nd <= 18 and mant < _MANT_LIMIT and e <= 22 and (q >= n or _is_delim(buf[q])):
                v32 = np.float32(float(mant) / pow10[e])  # below 2**53: always finite
                if neg:
                    v32 = -v32
            else:
                st, v, q = _scan_float(buf, v0, n, pow10)
                bad, v32 = _value_outcome(st, v, allow_nonfinite)
                if bad >= 0 or bad == _UNDECIDED_VALUE:
                    fallback = bad == _UNDECIDED_VALUE
                    b0 = t0
                    b1 = q
                    break
            if k >= ids.shape[0]:
                full = NNZ_FULL
                break
            ids[k] = idx - base
            values[k] = v32
            k += 1
        if fallback or full != DONE:
            status = FALLBACK if fallback else full
            pos = start
            break
        if bad < 0 and first and keep_qid:
            bad = MISSING_QID
            b0 = b1 = start
        eol, bad, b0, b1 = _line_end(buf, start, q, n, bad, b0, b1)
        if bad >= 0:
            _record_bad(counts, ex, state, bad, line, b0, b1)
        else:
            nnz = k
            nlab = m
            row += 1
            row_splits[row] = nnz
            label_splits[row] = nlab
        pos = eol + 1
        line += 1
    state[0] = min(pos, n)
    state[1] = line
    state[2] = row
    state[5] = nnz
    state[6] = nlab
    return status
