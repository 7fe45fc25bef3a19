"""numba kernels that parse the tabular format's text: one pass over a block of complete lines (each line's
status, label, integer columns and categorical keys: ``parse_block``, counts written as integral decimals read
off the fast path: ``_decimal``), the fields' offsets and a categorical column's bytes for values longer than 8
bytes (``split_fields``, ``gather``), and one field of a bad line (``field_span``)."""
from __future__ import annotations

import numpy as np

from ..util.jit import njit

__all__ = ["split_fields", "field_span", "parse_block", "gather", "OK", "BAD_FIELDS", "NOT_INT",
           "OVERFLOW", "BAD_LABEL", "BLANK"]

OK, BAD_FIELDS, NOT_INT, OVERFLOW, BAD_LABEL, BLANK = 0, 1, 2, 3, 4, 5
_LIMIT = np.uint64(9223372036854775807)


@njit(cache=True, nogil=True)
def _line_end(buf, pos):
    """``(end, stop)`` of the line starting at ``pos``: ``end`` its LF, ``stop`` past its last byte (a CR
    before the LF left out)."""
    end = pos
    while buf[end] != 10:
        end += 1
    stop = end
    if stop > pos and buf[stop - 1] == 13:
        stop -= 1
    return end, stop


@njit(cache=True, nogil=True)
def split_fields(buf, ncols, delim):
    """``buf``: complete lines, each ending with ``\\n``. Per line: the first ``ncols`` fields' ``[start, end)``
    offsets (a trailing ``\\r`` dropped), the line's field count and a status (``OK``, ``BAD_FIELDS``,
    ``BLANK`` for an empty line)."""
    n = 0
    for i in range(buf.size):
        if buf[i] == 10:
            n += 1
    starts = np.zeros((n, ncols), np.int64)
    ends = np.zeros((n, ncols), np.int64)
    counts = np.zeros(n, np.int64)
    status = np.zeros(n, np.int8)
    pos = 0
    for r in range(n):
        end, stop = _line_end(buf, pos)
        if stop == pos:
            status[r] = BLANK
        else:
            f = 0
            s = pos
            for i in range(pos, stop + 1):
                if i == stop or buf[i] == delim:
                    if f < ncols:
                        starts[r, f] = s
                        ends[r, f] = i
                    f += 1
                    s = i + 1
            counts[r] = f
            if f != ncols:
                status[r] = BAD_FIELDS
        pos = end + 1
    return starts, ends, counts, status


@njit(cache=True, nogil=True)
def gather(buf, starts, ends, rows, col, width):
    """Column ``col`` of lines ``rows`` as an (n, width) uint8 array of their bytes, zero-padded."""
    out = np.zeros((rows.size, max(width, 1)), np.uint8)
    for k in range(rows.size):
        r = rows[k]
        a = starts[r, col]
        for i in range(ends[r, col] - a):
            out[k, i] = buf[a + i]
    return out


@njit(cache=True, nogil=True)
def field_span(buf, a, e, delim, k):
    """``[start, end)`` of field ``k`` of the line ``buf[a:e]`` (no newline), ``(-1, -1)`` if it has fewer
    fields: a bad line's field found without copying or splitting the line."""
    f = 0
    s = a
    for i in range(a, e + 1):
        if i == e or buf[i] == delim:
            if f == k:
                return s, i
            f += 1
            s = i + 1
    return -1, -1


@njit(cache=True, nogil=True)
def _decimal(buf, a, e):
    """Field ``buf[a:e]`` as an integral decimal, ``[+-]digits[.digits][(e|E)[+-]digits]`` (``260.0``,
    ``-1.0``, ``1e3``, ``5.``): ``(value, OK)``; ``(0, NOT_INT)`` for other text or a nonzero fractional part
    (``2.5``, ``1e-3``); ``(0, OVERFLOW)`` past int64."""
    i = a
    neg = False
    if i < e and (buf[i] == 45 or buf[i] == 43):
        neg = buf[i] == 45
        i += 1
    ds = i
    while i < e and 48 <= buf[i] <= 57:
        i += 1
    nint = i - ds
    fs = i
    if i < e and buf[i] == 46:
        i += 1
        fs = i
        while i < e and 48 <= buf[i] <= 57:
            i += 1
    nfrac = i - fs if fs > ds + nint else 0
    if nint + nfrac == 0:
        return np.int64(0), NOT_INT
    exp = 0
    if i < e and (buf[i] == 101 or buf[i] == 69):
        i += 1
        eneg = False
        if i < e and (buf[i] == 45 or buf[i] == 43):
            eneg = buf[i] == 45
            i += 1
        if i == e:
            return np.int64(0), NOT_INT
        while i < e and 48 <= buf[i] <= 57:
            if exp < 1000000:
                exp = exp * 10 + (buf[i] - 48)
            i += 1
        if eneg:
            exp = -exp
    if i != e:
        return np.int64(0), NOT_INT
    keep = nint + exp  # the digits before the decimal point once the exponent is applied
    lim = _LIMIT + np.uint64(1) if neg else _LIMIT
    acc = np.uint64(0)
    over = False
    for q in range(nint + nfrac):
        d = np.uint64(buf[ds + q] if q < nint else buf[fs + q - nint]) - np.uint64(48)
        if q >= keep:
            if d != 0:
                return np.int64(0), NOT_INT
        elif not over:
            if acc > (lim - d) // np.uint64(10):
                over = True
            else:
                acc = acc * np.uint64(10) + d
    for _ in range(nint + nfrac, keep):  # trailing zeros an exponent adds
        if acc == 0 or over:
            break
        if acc > lim // np.uint64(10):
            over = True
        else:
            acc = acc * np.uint64(10)
    if over:
        return np.int64(0), OVERFLOW
    if neg:
        return (-np.int64(acc - np.uint64(1)) - 1 if acc > 0 else np.int64(0)), OK
    return np.int64(acc), OK


@njit(cache=True, nogil=True)
def _redo(buf, pos, ncols, delim, role, slot, r, labels, values, errcol):
    """The label and counts of line ``r`` (at ``pos``) read again as decimals (``_decimal``), where the fast
    path of ``parse_block`` found a field that is not plain digits: the line's status (its first bad field's,
    the bad count's column in ``errcol``)."""
    f = 0
    a = pos
    i = pos
    while True:
        c = buf[i]
        if c == delim or c == 10:
            e = i - 1 if c == 10 and i > a and buf[i - 1] == 13 else i
            if f < ncols and role[f] == 1:
                v, st = _decimal(buf, a, e)
                if st != OK or (v != 0 and v != 1):
                    return BAD_LABEL
                labels[r] = v
            elif f < ncols and role[f] == 2 and e > a:
                v, st = _decimal(buf, a, e)
                if st != OK:
                    errcol[r] = slot[f]
                    return st
                values[r, slot[f]] = v
            f += 1
            a = i + 1
            if c == 10:
                return OK
        i += 1


@njit(cache=True, nogil=True)
def _finish(buf, pos, ncols, delim, role, slot, r, labels, values, missing, errcol, f, st, redo, pad):
    """The status of line ``r`` of ``f`` fields that ``parse_block``'s fast path left unfinished: its label or
    counts read again as decimals (``redo``), its missing trailing fields read as empty (``pad``), else a
    wrong field count."""
    if redo:
        st = _redo(buf, pos, ncols, delim, role, slot, r, labels, values, errcol)
    if pad and st == OK and f < ncols:
        for g in range(f, ncols):
            if role[g] == 2:
                missing[r, slot[g]] = True
            elif role[g] == 1:
                st = BAD_LABEL
        f = ncols
    return BAD_FIELDS if f != ncols else st


@njit(cache=True, nogil=True)
def parse_block(buf, ncols, delim, role, slot, nnum, ncat, pad=False):
    """One pass over a block of complete lines: per line its status, label, integer columns (``values``,
    ``missing``, the bad column in ``errcol``), categorical keys (a value's first 8 bytes as a big-endian uint64, zero-padded: it sorts like the bytes and is
    the value itself when the value has at most 8 bytes) and each categorical
    column's longest value; ``role[f]``: 0 ignored, 1 label, 2 numeric, 3 categorical field, ``slot[f]`` its
    index among its role's columns. ``begins``: each line's first byte (and the end of the last). A count
    is plain digits (the fast path) or an integral decimal (``_decimal``); the label 0 or 1 either way.
    ``pad``: a line with fewer than ``ncols`` fields reads as if its missing trailing fields were empty
    (``counts`` keeps the fields found)."""
    n = 0
    for i in range(buf.size):
        if buf[i] == 10:
            n += 1
    status = np.zeros(n, np.int8)
    labels = np.zeros(n, np.int8)
    values = np.zeros((n, nnum), np.int64)
    missing = np.zeros((n, nnum), np.bool_)
    errcol = np.zeros(n, np.int64)
    counts = np.zeros(n, np.int64)
    keys = np.zeros((ncat, n), np.uint64)
    widths = np.zeros(ncat, np.int64)
    begins = np.zeros(n + 1, np.int64)
    top = max(delim, 10)  # a byte above it ends no field: one comparison for most bytes
    pos = 0
    for r in range(n):
        begins[r] = pos
        f = 0
        a = pos
        st = OK
        redo = False
        i = pos
        while True:
            c = buf[i]
            if c > top or (c != delim and c != 10):
                i += 1
                continue
            e = i
            if c == 10 and e > a and buf[e - 1] == 13:
                e -= 1
            if c == 10 and f == 0 and e == a:
                st = BLANK
                break
            if f < ncols and st == OK:
                k = role[f]
                w = e - a
                if k == 3:
                    j = slot[f]
                    if w > widths[j]:
                        widths[j] = w
                    key = np.uint64(0)
                    for q in range(8):
                        key = key << np.uint64(8)
                        if q < w:
                            key = key | np.uint64(buf[a + q])
                    keys[j, r] = key
                elif k == 2:
                    j = slot[f]
                    if w == 0:
                        missing[r, j] = True
                    else:
                        b = a
                        neg = False
                        if buf[b] == 45 or buf[b] == 43:
                            neg = buf[b] == 45
                            b += 1
                        lim = _LIMIT + np.uint64(1) if neg else _LIMIT
                        acc = np.uint64(0)
                        bad = OK if b < e else NOT_INT
                        for q in range(b, e):
                            d = buf[q] - 48
                            if d < 0 or d > 9:
                                bad = NOT_INT
                                break
                            if bad == OK and acc > (lim - np.uint64(d)) // np.uint64(10):
                                bad = OVERFLOW
                            if bad == OK:
                                acc = acc * np.uint64(10) + np.uint64(d)
                        if bad == NOT_INT:  # not plain digits: maybe an integral decimal (``_redo``)
                            redo = True
                        elif bad != OK:
                            st = bad
                            errcol[r] = j
                        elif neg:
                            values[r, j] = -np.int64(acc - np.uint64(1)) - 1 if acc > 0 else 0
                        else:
                            values[r, j] = np.int64(acc)
                elif k == 1:
                    if w == 1 and (buf[a] == 48 or buf[a] == 49):
                        labels[r] = buf[a] - 48
                    else:
                        redo = True
            f += 1
            a = i + 1
            if c == 10:
                break
            i += 1
        counts[r] = f
        if st != BLANK and (redo or f != ncols):  # the rare lines: one test for the common one
            st = _finish(buf, pos, ncols, delim, role, slot, r, labels, values, missing, errcol, f, st, redo, pad)
        status[r] = st
        pos = i + 1
    begins[n] = pos
    return status, labels, values, missing, errcol, counts, keys, widths, begins
