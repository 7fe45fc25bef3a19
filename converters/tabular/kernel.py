"""numba kernels of the tabular format: one pass over a block of complete lines (each line's status, label,
integer columns and categorical keys: ``parse_block``); the fields' offsets and a categorical column's bytes
for values longer than 8 bytes (``split_fields``, ``gather``); the counting pass's sort and count of a block's
keys (``radix_sort``, ``count_sorted``); the vocabulary file's lines (``join_lines``); the vocabulary lookup
tables (``table_build``, ``table_get``, ``table_put``) and the lookup in blocks of a sorted table read from disk
(``block_get``)."""
from __future__ import annotations

import numpy as np

from ..util.jit import intrinsic, njit

__all__ = ["split_fields", "parse_block", "gather", "table_build", "table_get", "table_put", "block_get",
           "count_sorted", "radix_sort", "join_lines", "table_slots", "TABLE_LOAD", "OK", "BAD_FIELDS", "NOT_INT",
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
def _slot(k, cap):
    """Key ``k``'s home slot among ``cap`` (< 2**32): the top half of its splitmix64 hash scaled to the range."""
    x = k + np.uint64(0x9E3779B97F4A7C15)
    x = (x ^ (x >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
    x = (x ^ (x >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
    x = x ^ (x >> np.uint64(31))
    return np.int64(((x >> np.uint64(32)) * np.uint64(cap)) >> np.uint64(32))


TABLE_LOAD = 0.85  # keys per slot of a lookup table: 12 bytes a slot, about 14 bytes a vocabulary value


def table_slots(keys: int) -> int:
    """The slots of a lookup table of ``keys`` keys (at load ``TABLE_LOAD``; 12 bytes each)."""
    return int(keys / TABLE_LOAD) + 1


@njit(cache=True, nogil=True)
def table_build(keys, ids, cap):
    """An open-addressing (linear probing) hash table of uint64 ``keys`` -> ``ids`` (each 1..2**32 - 1) in
    ``cap`` slots (more than ``keys.size``): one uint32 array of ``(key high, key low, id)`` triples, so a probe
    touches one cache line; id 0 marks an empty slot."""
    t = np.zeros(3 * cap, np.uint32)
    for i in range(keys.size):
        s = _slot(keys[i], cap)
        while t[3 * s + 2] != 0:
            s = s + 1 if s + 1 < cap else 0
        t[3 * s] = np.uint32(keys[i] >> np.uint64(32))
        t[3 * s + 1] = np.uint32(keys[i] & np.uint64(0xFFFFFFFF))
        t[3 * s + 2] = np.uint32(ids[i])
    return t


@njit(cache=True, nogil=True)
def _probe(t, q, cap):
    """Key ``q``'s id in table ``t`` of ``cap`` slots, 0 where it is not there (key 0, the empty value, never is)."""
    if q == 0:
        return 0
    hi = np.uint32(q >> np.uint64(32))
    lo = np.uint32(q & np.uint64(0xFFFFFFFF))
    s = _slot(q, cap)
    while t[3 * s + 2] != 0:
        if t[3 * s + 1] == lo and t[3 * s] == hi:
            return np.int64(t[3 * s + 2])
        s = s + 1 if s + 1 < cap else 0
    return 0


@njit(cache=True, nogil=True)
def table_get(t, query):
    """The id of every query key, 0 where it is not in the table (key 0, the empty value, never is)."""
    cap = t.size // 3
    out = np.zeros(query.size, np.int64)
    for i in range(query.size):
        out[i] = _probe(t, query[i], cap)
    return out


@intrinsic
def _prefetch(typingctx, arr, i):
    """Ask the CPU to bring element ``i`` of ``arr`` into its caches (``llvm.prefetch``, a hint: no fault, no
    effect on results). With an LLVM older than 17 (typed pointers) it does nothing."""
    from numba import types

    def codegen(context, builder, signature, args):
        from llvmlite import binding, ir
        from numba.core import cgutils

        if binding.llvm_version_info[0] >= 17:
            ary = context.make_array(signature.args[0])(context, builder, args[0])
            ptr = builder.bitcast(builder.gep(ary.data, [args[1]]), ir.IntType(8).as_pointer())
            i32 = ir.IntType(32)
            fn = cgutils.get_or_insert_function(
                builder.module, ir.FunctionType(ir.VoidType(), [ir.IntType(8).as_pointer(), i32, i32, i32]),
                "llvm.prefetch.p0")
            builder.call(fn, [ptr, ir.Constant(i32, 0), ir.Constant(i32, 3), ir.Constant(i32, 1)])  # read, keep, data
        return context.get_dummy_value()

    return types.none(arr, types.intp), codegen


_AHEAD = 16  # queries between a slot's prefetch and its probe: a memory read's latency of other probes


@njit(cache=True, nogil=True)
def table_put(t, query, out, col, offset):
    """``table_get`` written into column ``col`` of ``out`` (uint32 or int64), ``offset`` added to each id (id
    0 included): a block's ids land in the compact array pass 1 keeps, with no array per column."""
    cap = t.size // 3
    n = query.size
    for i in range(n):
        if i + _AHEAD < n and query[i + _AHEAD] != 0:  # a rare value's slot is rarely cached: fetch it early
            _prefetch(t, 3 * _slot(query[i + _AHEAD], cap))
        out[i, col] = _probe(t, query[i], cap) + offset


@njit(cache=True, nogil=True)
def block_get(keys, ids, lens, rows, query):
    """The id of every query key in its block: ``keys[rows[i], :lens[rows[i]]]`` ascending, ``ids`` beside
    them; 0 where it is not there."""
    out = np.zeros(query.size, np.int64)
    for i in range(query.size):
        r, q = rows[i], query[i]
        lo, hi = 0, lens[r]
        while lo < hi:  # the first key >= q
            mid = (lo + hi) >> 1
            if keys[r, mid] < q:
                lo = mid + 1
            else:
                hi = mid
        if lo < lens[r] and keys[r, lo] == q:
            out[i] = np.int64(ids[r, lo])
    return out


@njit(cache=True, nogil=True)
def _servable_key(key):
    """Whether the value of a nonzero key (``cat_keys``'s: at most 8 bytes, big-endian, zero-padded) can be a
    vocabulary file's line: ``vocab.servable``'s rule (no newline in it, no carriage return as its last byte) on
    the key's bytes, so that a block's keys are filtered in the same pass that counts them."""
    last = 0
    for q in range(8):
        b = (key >> np.uint64(56 - 8 * q)) & np.uint64(0xFF)
        if b == 10:
            return False
        if b != 0:
            last = b
    return last != 13


@njit(cache=True, nogil=True)
def join_lines(grid, lens):
    """The lines of fixed-width values joined: row ``i`` of ``grid`` (uint8, n x width) cut to ``lens[i] - 1``
    bytes, then a newline."""
    out = np.empty(lens.sum(), np.uint8)
    at = 0
    for i in range(grid.shape[0]):
        m = lens[i] - 1
        for q in range(m):
            out[at + q] = grid[i, q]
        out[at + m] = 10
        at += m + 1
    return out


_DIGIT = 11  # bits a radix pass sorts by: 2,048 buckets, six passes cover 64 bits


@njit(cache=True, nogil=True)
def radix_sort(keys):
    """``keys`` (uint64) sorted ascending, a new array: least significant digit first, ``_DIGIT`` bits a pass,
    every pass's histogram from one read, a pass whose digit every key shares skipped. Linear: several times
    ``np.sort`` on a block's column of keys."""
    n = keys.size
    passes = (64 + _DIGIT - 1) // _DIGIT
    mask = np.uint64((1 << _DIGIT) - 1)
    hist = np.zeros((passes, 1 << _DIGIT), np.int64)
    for i in range(n):
        k = keys[i]
        for p in range(passes):
            hist[p, (k >> np.uint64(_DIGIT * p)) & mask] += 1
    src = keys.copy()
    dst = np.empty_like(src)
    for p in range(passes):
        at = 0
        shared = False
        for d in range(1 << _DIGIT):
            c = hist[p, d]
            shared = shared or c == n
            hist[p, d] = at
            at += c
        if shared:
            continue
        shift = np.uint64(_DIGIT * p)
        for i in range(n):
            k = src[i]
            d = (k >> shift) & mask
            dst[hist[p, d]] = k
            hist[p, d] += 1
        src, dst = dst, src
    return src


@njit(cache=True, nogil=True)
def count_sorted(keys):
    """The distinct keys of ascending ``keys`` and how many times each occurs, key 0 (the empty value) and keys
    of values no vocabulary file can hold (``_servable_key``) left out."""
    u = np.empty(keys.size, np.uint64)
    c = np.empty(keys.size, np.int64)
    m = 0
    i = 0
    while i < keys.size:
        j = i + 1
        while j < keys.size and keys[j] == keys[i]:
            j += 1
        if keys[i] != 0 and _servable_key(keys[i]):
            u[m] = keys[i]
            c[m] = j - i
            m += 1
        i = j
    return u[:m].copy(), c[:m].copy()


@njit(cache=True, nogil=True)
def cat_keys(buf, starts, ends, rows, cols):
    """Columns ``cols`` of lines ``rows`` as big-endian uint64 keys of their first 8 bytes, zero-padded (the
    key sorts like the bytes; it is the value itself when the value has at most 8 bytes), one row per column,
    and each column's longest value in bytes."""
    keys = np.zeros((cols.size, rows.size), np.uint64)
    widths = np.zeros(cols.size, np.int64)
    for k in range(rows.size):
        r = rows[k]
        for j in range(cols.size):
            a = starts[r, cols[j]]
            n = ends[r, cols[j]] - a
            if n > widths[j]:
                widths[j] = n
            key = np.uint64(0)
            for i in range(8):
                key = key << np.uint64(8)
                if i < n:
                    key = key | np.uint64(buf[a + i])
            keys[j, k] = key
    return keys, widths


@njit(cache=True, nogil=True)
def parse_block(buf, ncols, delim, role, slot, nnum, ncat):
    """One pass over a block of complete lines: per line its status, label, integer columns (``values``,
    ``missing``, the bad column in ``errcol``), categorical uint64 keys (``cat_keys``'s) and each categorical
    column's longest value; ``role[f]``: 0 ignored, 1 label, 2 numeric, 3 categorical field, ``slot[f]`` its
    index among its role's columns. ``begins``: each line's first byte (and the end of the last)."""
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
                        if bad != OK:
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
                        st = BAD_LABEL
            f += 1
            a = i + 1
            if c == 10:
                break
            i += 1
        counts[r] = f
        status[r] = BLANK if st == BLANK else BAD_FIELDS if f != ncols else st
        pos = i + 1
    begins[n] = pos
    return status, labels, values, missing, errcol, counts, keys, widths, begins
