"""The compiled LibSVM kernels (numba): one pass over a block's bytes parses every regular line into
preallocated arrays, counts bad lines by reason (codes from ``reasons``) and hands a line it cannot decide
exactly back to the caller (status FALLBACK) for the Python reference; plus the token helpers the sparse
kernel (``sparse_kernel``) shares. No Python objects are built here; ``block`` drives these kernels.

Numbers are parsed exactly on a fast path: ``[+-]digits[.digits][e[+-]digits]`` with a mantissa below 2**53
and a decimal exponent within +-22, which one multiplication or division by an exact power of ten rounds
correctly. Anything else (``nan``/``inf``, underscores, longer mantissas or exponents, signs on indices)
falls back, so results equal Python's ``float()``/``int()`` bit for bit.
"""
from __future__ import annotations

import numpy as np

from ..util.jit import njit
from .reasons import (
    BAD_TOKEN,
    DUPLICATE_INDEX,
    INDEX_TOO_LARGE,
    INDEX_ZERO,
    MISSING_INDEX,
    MISSING_VALUE,
    NON_ASCII,
    NONFINITE,
    NUL_BYTE,
    PAIR_COUNT,
    UNSORTED_INDEX,
)

__all__ = ["parse_kernel", "POW10", "DONE", "ROWS_FULL", "FALLBACK"]

# kernel exit statuses
DONE, ROWS_FULL, FALLBACK = 0, 1, 2
# number-scan statuses
_EXACT, _UNDECIDED, _EMPTY = 0, 1, 2

POW10 = np.array([10.0 ** k for k in range(23)], dtype=np.float64)  # all exact doubles
_MANT_LIMIT = 1 << 53


@njit(cache=True, nogil=True, inline="always")
def _is_ws(c):
    return c == 32 or c == 9 or c == 13 or c == 11 or c == 12


@njit(cache=True, nogil=True, inline="always")
def _is_delim(c):
    """Ends a token: whitespace, newline or the start of a comment."""
    return c == 32 or c == 9 or c == 13 or c == 11 or c == 12 or c == 10 or c == 35


@njit(cache=True, nogil=True, inline="always")
def _scan_float(buf, i, n, pow10):
    """Parse the token at ``i`` as ``[+-]digits[.digits][(e|E)[+-]digits]``, exactly.

    Returns (status, value, end): _EXACT = value is the correctly rounded float64 and the token ends at
    ``end``; _UNDECIDED = not decided here (irregular syntax, or not exactly convertible with one multiplication or
    division by an exact power of ten) — never 'bad'; _EMPTY = empty token."""
    a = i
    neg = False
    if i < n and (buf[i] == 43 or buf[i] == 45):
        neg = buf[i] == 45
        i += 1
    m = np.int64(0)
    nd = 0
    e10 = 0
    while i < n:
        c = buf[i]
        if c < 48 or c > 57:
            break
        m = m * 10 + (c - 48)
        if m >= _MANT_LIMIT:
            return _UNDECIDED, 0.0, i
        nd += 1
        i += 1
    if i < n and buf[i] == 46:
        i += 1
        while i < n:
            c = buf[i]
            if c < 48 or c > 57:
                break
            m = m * 10 + (c - 48)
            if m >= _MANT_LIMIT:
                return _UNDECIDED, 0.0, i
            nd += 1
            e10 -= 1
            i += 1
    if nd == 0:
        if i == a and (i >= n or _is_delim(buf[i])):
            return _EMPTY, 0.0, i
        return _UNDECIDED, 0.0, i
    if i < n and (buf[i] == 101 or buf[i] == 69):
        i += 1
        eneg = False
        if i < n and (buf[i] == 43 or buf[i] == 45):
            eneg = buf[i] == 45
            i += 1
        ne = 0
        ex = 0
        while i < n:
            c = buf[i]
            if c < 48 or c > 57:
                break
            ex = ex * 10 + (c - 48)
            ne += 1
            if ne > 4:
                return _UNDECIDED, 0.0, i
            i += 1
        if ne == 0:
            return _UNDECIDED, 0.0, i
        e10 += -ex if eneg else ex
    if i < n and not _is_delim(buf[i]):
        return _UNDECIDED, 0.0, i
    if m == 0:
        v = 0.0
    elif e10 == 0:
        v = float(m)
    elif 0 < e10 <= 22:
        v = float(m) * pow10[e10]
    elif -22 <= e10 < 0:
        v = float(m) / pow10[-e10]
    else:
        return _UNDECIDED, 0.0, i
    return _EXACT, -v if neg else v, i


@njit(cache=True, nogil=True)
def _scan_label(buf, i, n, pow10):
    """``_scan_float`` called, not inlined: for a line's label (once a row, so the call costs nothing), while
    the values' scan is inlined. Each inlined copy is compiled on its own: fewer copies, a shorter first
    compile."""
    return _scan_float(buf, i, n, pow10)


@njit(cache=True, nogil=True)
def _token_end(buf, i, n):
    while i < n and not _is_delim(buf[i]):
        i += 1
    return i


@njit(cache=True, nogil=True)
def _line_check(buf, start, n):
    """Scan a whole line: returns (eol, reason, at) with reason NUL_BYTE for a NUL byte anywhere, NON_ASCII for
    a byte >= 0x80 before the first '#', -1 if neither."""
    p = start
    cmt = False
    nul = -1
    na = -1
    while p < n:
        c = buf[p]
        if c == 10:
            break
        if c == 0:
            if nul < 0:
                nul = p
        elif c == 35:
            cmt = True
        elif c >= 128 and not cmt and na < 0:
            na = p
        p += 1
    if nul >= 0:
        return p, NUL_BYTE, nul
    if na >= 0:
        return p, NON_ASCII, na
    return p, -1, -1


@njit(cache=True, nogil=True, inline="always")
def _scan_token(buf, t0, n):
    """End of the token at ``t0`` and the position of its first ':' (-1 if none)."""
    t1 = t0
    colon = -1
    while t1 < n and not _is_delim(buf[t1]):
        if buf[t1] == 58 and colon < 0:
            colon = t1
        t1 += 1
    return t1, colon


@njit(cache=True, nogil=True, inline="always")
def _is_qid(buf, t0, t1):
    """Whether the token ``[t0, t1)`` starts with ``qid:``."""
    return (t1 - t0 >= 4 and buf[t0] == 113 and buf[t0 + 1] == 105 and buf[t0 + 2] == 100
            and buf[t0 + 3] == 58)


@njit(cache=True, nogil=True, inline="always")
def _hides_bytes(buf, t0, t1):
    """Whether ``[t0, t1)`` holds a NUL or a byte >= 0x80 (which the Python reference must judge)."""
    for j in range(t0, t1):
        if buf[j] == 0 or buf[j] >= 128:
            return True
    return False


@njit(cache=True, nogil=True, inline="always")
def _index_reason(idx, prev, base, max_index):
    """Why the index ``idx`` (after ``prev`` on its line) is bad, or -1."""
    if idx == 0 and base == 1:
        return INDEX_ZERO
    if idx == prev:
        return DUPLICATE_INDEX
    if idx < prev:
        return UNSORTED_INDEX
    if max_index >= 0 and idx > max_index:
        return INDEX_TOO_LARGE
    return -1


@njit(cache=True, nogil=True, inline="always")
def _positional_reason(idx, base, max_index):
    """Why the positional id ``idx`` is bad, or -1: any order and repeats are data (``strict`` off)."""
    if idx == 0 and base == 1:
        return INDEX_ZERO
    if max_index >= 0 and idx > max_index:
        return INDEX_TOO_LARGE
    return -1


@njit(cache=True, nogil=True, inline="always")
def _irregular_reason(t0, colon):
    """A token that is not ``digits:...`` (and not a qid): BAD_TOKEN, MISSING_INDEX, or -1 (Python judges)."""
    if colon < 0:
        return BAD_TOKEN
    if colon == t0:
        return MISSING_INDEX
    return -1


@njit(cache=True, nogil=True, inline="always")
def _line_end(buf, start, q, n, bad, b0, b1):
    """After a line's tokens (``q`` at its newline, comment or the bad token): (eol, bad, b0, b1), where a
    NUL anywhere / non-ASCII before '#' takes precedence (as in the Python reference)."""
    if bad >= 0:
        eol, why, at = _line_check(buf, start, n)
        if why >= 0:
            return eol, why, max(start, at - 10), min(eol, at + 10)
        return eol, bad, b0, b1
    eol = q
    if q < n and buf[q] == 35:  # comment: only a NUL byte matters there
        eol, why, at = _line_check(buf, q, n)
        if why == NUL_BYTE:
            return eol, NUL_BYTE, max(start, at - 10), min(eol, at + 10)
    return eol, -1, b0, b1


_UNDECIDED_VALUE = -2  # _value_outcome: the Python reference must judge the line


@njit(cache=True, nogil=True, inline="always")
def _value_outcome(st, v, allow_nonfinite):
    """What a scanned value (``_scan_float``'s status and number) means: (-1, float32) for a good value,
    (MISSING_VALUE or NONFINITE, 0) for a bad one, (_UNDECIDED_VALUE, 0) when Python must judge it."""
    if st == _UNDECIDED:
        return _UNDECIDED_VALUE, np.float32(0.0)
    if st == _EMPTY:
        return MISSING_VALUE, np.float32(0.0)
    v32 = np.float32(v)
    if not allow_nonfinite and not np.isfinite(v32):
        return NONFINITE, v32
    return -1, v32


@njit(cache=True, nogil=True)
def _record_bad(counts, ex, state, reason, line, t0, t1):
    counts[reason] += 1
    k = state[4]
    if k < ex.shape[0]:
        ex[k, 0] = line
        ex[k, 1] = reason
        ex[k, 2] = t0
        ex[k, 3] = t1
        state[4] = k + 1


@njit(cache=True, nogil=True, inline="always")
def _blank_line(buf, start, n, counts, ex, state, line):
    """Skip the whitespace at ``start``: (first token, -1), or for a blank/comment-only line (counted in
    state[3], or as bad if it holds a NUL / a non-ASCII byte before '#') (eol, start of the next line)."""
    q = start
    while q < n and _is_ws(buf[q]):
        q += 1
    if q < n and buf[q] != 10 and buf[q] != 35:
        return q, -1
    eol, why, at = _line_check(buf, q, n)
    if why >= 0:
        _record_bad(counts, ex, state, why, line, max(start, at - 10), min(eol, at + 10))
    else:
        state[3] += 1
    return eol, eol + 1


@njit(cache=True, nogil=True)
def parse_kernel(buf, state, field_size, base, pad, truncate, allow_nonfinite, max_index, strict,
                  labels, ids, values, counts, ex, pow10):
    """Parse lines from state[0] on, one pass over the bytes. state = [pos, line, row, blank, n_examples,
    unordered]. ``strict``: ids must increase along a line (else UNSORTED_INDEX / DUPLICATE_INDEX); without it
    they are positional and a written row whose ids do not increase is counted in state[5]. Returns DONE, ROWS_FULL
    (grow the arrays and call again) or FALLBACK (the line at state[0] needs the Python reference; the caller
    parses it, advances state and calls again)."""
    n = buf.shape[0]
    cap = labels.shape[0]
    pos = state[0]
    line = state[1]
    row = state[2]
    while pos < n:
        if row >= cap:
            state[0] = pos
            state[1] = line
            state[2] = row
            return ROWS_FULL
        start = pos
        q, nxt = _blank_line(buf, start, n, counts, ex, state, line)
        if nxt >= 0:
            pos = nxt
            line += 1
            continue
        t0 = q
        st, lab, q = _scan_label(buf, q, n, pow10)
        if st != _EXACT:
            state[0] = start
            state[1] = line
            state[2] = row
            return FALLBACK
        lab32 = np.float32(lab)
        bad = -1
        b0 = t0
        b1 = q
        if not allow_nonfinite and not np.isfinite(lab32):
            bad = NONFINITE
        labels[row] = lab32
        k = 0
        prev = np.int64(-1)
        unordered = False
        first = True
        fallback = False
        while bad < 0:
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
                # irregular token: qid, no colon, no index, or something Python must judge
                t1, colon = _scan_token(buf, t0, n)
                if first and _is_qid(buf, t0, t1):
                    fallback = _hides_bytes(buf, t0, t1)  # qid:... ignored, unless it hides such bytes
                    first = False
                    q = t1
                    if fallback:
                        break
                    continue
                b0 = t0
                b1 = t1
                bad = _irregular_reason(t0, colon)
                fallback = bad < 0
                break
            first = False
            q += 1  # past ':'
            if strict:
                bad = _index_reason(idx, prev, base, max_index)
            else:
                bad = _positional_reason(idx, base, max_index)
                unordered = unordered or idx <= prev
            if bad >= 0:
                b0 = t0
                b1 = _token_end(buf, q, n)
                break
            prev = idx
            # the value's common shape '[+-]digits[.digits]' then a delimiter, written out here (as in
            # sparse_kernel: as an inlined helper it measured half as fast); anything else: the general scanner
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
            if k < field_size:
                ids[row, k] = idx - base
                values[row, k] = v32
            k += 1
        if fallback:
            state[0] = start
            state[1] = line
            state[2] = row
            return FALLBACK
        eol, bad, b0, b1 = _line_end(buf, start, q, n, bad, b0, b1)
        if bad < 0 and k != field_size:
            if k < field_size and pad:
                for j in range(k, field_size):
                    ids[row, j] = 0
                    values[row, j] = 0.0
            elif not (k > field_size and truncate):
                bad = PAIR_COUNT
                b0 = -1  # no token: the example carries the pair count instead
                b1 = k
        if bad >= 0:
            _record_bad(counts, ex, state, bad, line, b0, b1)
        else:
            row += 1
            if unordered:
                state[5] += 1
        pos = eol + 1
        line += 1
    state[0] = min(pos, n)
    state[1] = line
    state[2] = row
    return DONE
