"""numba kernels of the vocabulary lookups: an open-addressing hash table of uint64 keys -> ids built
(``table_build``, ``table_slots`` sizes it) and probed (``table_get``, ``table_put`` writing into a column of
pass 1's array), and the lookup in blocks of a sorted table read from disk (``block_get``)."""
from __future__ import annotations

import numpy as np

from ..util.jit import intrinsic, njit

__all__ = ["table_build", "table_get", "table_put", "table_slots", "block_get"]


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
