"""The compiled LibSVM kernels (numba): one pass over a block's bytes parses every regular line into
preallocated arrays, counts bad lines by reason (codes from ``reasons``) and hands a line it cannot decide
exactly back to the caller (status FALLBACK) for the Python reference. Also the ``--index-base auto``
scanners. No Python objects are built here; ``block`` drives these kernels.

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

__all__ = ["parse_kernel", "min_index_kernel", "has_zero_index_kernel", "POW10", "DONE", "ROWS_FULL", "FALLBACK"]

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


@njit(cache=True, nogil=True)
def parse_kernel(buf, state, field_size, base, pad, truncate, allow_nonfinite, max_index,
                  labels, ids, values, counts, ex, pow10):
    """Parse lines from state[0] on, one pass over the bytes. state = [pos, line, row, blank, n_examples].
    Returns DONE, ROWS_FULL (grow the arrays and call again) or FALLBACK (the line at state[0] needs the
    Python reference; the caller parses it, advances state and calls again)."""
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
        q = pos
        while q < n and _is_ws(buf[q]):
            q += 1
        if q >= n or buf[q] == 10 or buf[q] == 35:  # blank or comment-only line
            eol, why, at = _line_check(buf, q, n)
            if why >= 0:
                _record_bad(counts, ex, state, why, line, max(start, at - 10), min(eol, at + 10))
            else:
                state[3] += 1
            pos = eol + 1
            line += 1
            continue
        t0 = q
        st, lab, q = _scan_float(buf, q, n, pow10)
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
        first = True
        fallback = False
        while bad < 0:
            while q < n and _is_ws(buf[q]):
                q += 1
            if q >= n or buf[q] == 10 or buf[q] == 35:
                break
            t0 = q
            idx = np.int64(0)
            nd = 0
            while q < n:
                c = buf[q]
                if c < 48 or c > 57:
                    break
                if nd < 18:
                    idx = idx * 10 + (c - 48)
                nd += 1
                q += 1
            if nd == 0 or nd > 18 or q >= n or buf[q] != 58:
                # irregular token: qid, no colon, no index, or something Python must judge
                t1 = q
                colon = -1
                while t1 < n and not _is_delim(buf[t1]):
                    if buf[t1] == 58 and colon < 0:
                        colon = t1
                    t1 += 1
                if (first and t1 - t0 >= 4 and buf[t0] == 113 and buf[t0 + 1] == 105 and buf[t0 + 2] == 100
                        and buf[t0 + 3] == 58):
                    for j in range(t0, t1):  # qid:... ignored, unless it hides bytes Python must judge
                        if buf[j] == 0 or buf[j] >= 128:
                            fallback = True
                    first = False
                    q = t1
                    if fallback:
                        break
                    continue
                b0 = t0
                b1 = t1
                if colon < 0:
                    bad = BAD_TOKEN
                elif colon == t0:
                    bad = MISSING_INDEX
                else:
                    fallback = True
                break
            first = False
            q += 1  # past ':'
            if idx == 0 and base == 1:
                bad = INDEX_ZERO
            elif idx == prev:
                bad = DUPLICATE_INDEX
            elif idx < prev:
                bad = UNSORTED_INDEX
            elif max_index >= 0 and idx > max_index:
                bad = INDEX_TOO_LARGE
            if bad >= 0:
                b0 = t0
                b1 = _token_end(buf, q, n)
                break
            prev = idx
            st, v, q = _scan_float(buf, q, n, pow10)
            if st == _UNDECIDED:
                fallback = True
                break
            if st == _EMPTY:
                bad = MISSING_VALUE
                b0 = t0
                b1 = q
                break
            v32 = np.float32(v)
            if not allow_nonfinite and not np.isfinite(v32):
                bad = NONFINITE
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
        if bad >= 0:
            # a NUL anywhere / non-ASCII before '#' takes precedence (as in the Python reference)
            eol, why, at = _line_check(buf, start, n)
            if why >= 0:
                bad = why
                b0 = max(start, at - 10)
                b1 = min(eol, at + 10)
        else:
            eol = q
            if q < n and buf[q] == 35:  # comment: only a NUL byte matters there
                eol, why, at = _line_check(buf, q, n)
                if why == NUL_BYTE:
                    bad = NUL_BYTE
                    b0 = max(start, at - 10)
                    b1 = min(eol, at + 10)
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
        pos = eol + 1
        line += 1
    state[0] = min(pos, n)
    state[1] = line
    state[2] = row
    return DONE


@njit(cache=True, nogil=True)
def min_index_kernel(buf):
    """Smallest index (>= 0) among feature tokens ``[+-]digits:...`` outside comments; -1 if none."""
    n = buf.shape[0]
    best = np.int64(-1)
    q = 0
    while q < n:
        # label (first token of the line)
        while q < n and _is_ws(buf[q]):
            q += 1
        tok = 0
        while q < n:
            while q < n and _is_ws(buf[q]):
                q += 1
            if q >= n or buf[q] == 10 or buf[q] == 35:
                break
            if tok > 0:
                j = q
                if buf[j] == 43 or buf[j] == 45:
                    j += 1
                v = np.int64(0)
                nd = 0
                while j < n and 48 <= buf[j] <= 57:
                    if nd < 18:
                        v = v * 10 + (buf[j] - 48)
                    nd += 1
                    j += 1
                if 0 < nd <= 18 and j < n and buf[j] == 58 and (best < 0 or v < best):
                    best = v
                    if best == 0:
                        return 0
                q = j
            while q < n and not _is_delim(buf[q]):
                q += 1
            tok += 1
        while q < n and buf[q] != 10:  # rest of the line (a comment)
            q += 1
        q += 1
    return best


@njit(cache=True, nogil=True)
def has_zero_index_kernel(buf):
    """True if some feature token (not a label, not in a comment) has index 0 (``0:``, ``00:``, ``+0:``)."""
    n = buf.shape[0]
    for i in range(1, n):
        if buf[i] != 58 or buf[i - 1] != 48:
            continue
        j = i - 1
        while j >= 0 and buf[j] == 48:
            j -= 1
        if j >= 0 and (buf[j] == 43 or buf[j] == 45):
            j -= 1
        if j >= 0 and not (_is_ws(buf[j]) or buf[j] == 10):
            continue
        # the token starts at j + 1: an index only if a label precedes it on its line, outside a comment
        ls = j
        while ls >= 0 and buf[ls] != 10:
            ls -= 1
        seen = False
        comment = False
        for k in range(ls + 1, j + 1):
            if buf[k] == 35:
                comment = True
                break
            if not _is_ws(buf[k]):
                seen = True
        if seen and not comment:
            return True
    return False
