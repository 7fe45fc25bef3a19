"""Long categorical values (more than ``LONG`` bytes) on a path of their own, so that a long value costs its own
length, never the rows beside it times its length: the fixed-width arrays of the pre-pass (counting), its runs, their
merge and the lookup tables hold values of at most ``LONG`` bytes; the rare longer ones are counted in a dict,
spilled as sorted runs of their own (``.lv``: the values joined, ``.le``: int64 end offsets, ``.lc``: int64
counts or ids), merged with ``heapq.merge`` a few MiB of every run at a time, and woven back into the merge's
ascending byte order (``interleave``), chunks of both kinds then numpy ``object`` arrays of bytes. Their lookup
(``LongLookup``) is a dict within the column's memory, else a binary search of the sorted long table on disk.

Byte order is the same on both paths: Python compares bytes as numpy's fixed-width arrays do (unsigned,
lexicographic; a value never ends with NUL), and a long value's first ``LONG + 1`` bytes place it among values
of at most ``LONG`` bytes exactly (``_prefixes``)."""
from __future__ import annotations

import heapq
import os
from typing import Iterable, Iterator

import numpy as np

__all__ = ["LONG", "split_long", "servable_long", "put_long", "merge_long", "interleave", "value_lengths",
           "table_parts", "LongLookup"]

LONG = 128  # values of more bytes take the long path
_READ = os.O_RDONLY | getattr(os, "O_CLOEXEC", 0)


def split_long(values: np.ndarray) -> tuple[np.ndarray, list[bytes]]:
    """The values of at most ``LONG`` bytes of a bytes array (at the width of the longest of them), and the longer
    ones as bytes, each in its order."""
    if values.dtype.itemsize <= LONG:
        return values, []
    lens = np.char.str_len(values)
    long = lens > LONG
    if not long.any():
        return values.astype(f"S{max(int(lens.max(initial=0)), 1)}"), []
    short = ~long
    return values[short].astype(f"S{max(int(lens[short].max(initial=0)), 1)}"), values[long].tolist()


def servable_long(value: bytes) -> bool:
    """``vocab.servable``'s rule for one long value: no newline, no carriage return as its last byte."""
    return b"\n" not in value and not value.endswith(b"\r")


def put_long(area, key: str, values: list[bytes], counts) -> None:
    """Sorted long ``values`` and an int64 per value (a count, or an id) written to the temporary area."""
    ends = np.cumsum(np.fromiter(map(len, values), np.int64, len(values)))
    area.put_array(key + ".lv", np.frombuffer(b"".join(values), np.uint8))
    area.put_array(key + ".le", ends)
    area.put_array(key + ".lc", np.asarray(counts, np.int64))


def _entries(area, key: str, size: int, budget: int) -> Iterator[tuple[bytes, int]]:
    """A long run's ``(value, int)`` pairs in order, about ``budget`` bytes of values read at a time (at least
    one value)."""
    start = 0
    for at in range(0, size, 1 << 16):
        b = min(at + (1 << 16), size)
        ends = np.frombuffer(area.get_range(key + ".le", at * 8, b * 8), np.int64)
        counts = np.frombuffer(area.get_range(key + ".lc", at * 8, b * 8), np.int64).tolist()
        i = 0
        while i < ends.size:
            j = min(max(i + 1, int(np.searchsorted(ends, start + budget, side="right"))), ends.size)
            blob = area.get_range(key + ".lv", start, int(ends[j - 1]))
            prev = start
            for e, c in zip(ends[i:j].tolist(), counts[i:j]):
                yield blob[prev - start:e - start], c
                prev = e
            start, i = prev, j
            del blob


def objects(values: list) -> np.ndarray:
    """A numpy ``object`` array of bytes."""
    out = np.empty(len(values), object)
    out[:] = values
    return out


def merge_long(area, runs, budget: int, chunk: int) -> Iterator[tuple[np.ndarray, np.ndarray]]:
    """The merged long ``(values, counts)`` of sorted runs (``vocab.SortedRun``s with a long part) in ascending order,
    equal values summed, at most ``chunk`` values or about ``budget`` bytes a chunk; every run read about
    ``budget`` bytes at a time."""
    vals: list[bytes] = []
    counts: list[int] = []
    nbytes = 0
    for v, c in heapq.merge(*(_entries(area, r.key, r.long, budget) for r in runs)):
        if vals and vals[-1] == v:
            counts[-1] += c
            continue
        if len(vals) >= chunk or nbytes >= budget:
            yield objects(vals), np.array(counts, np.int64)
            vals, counts, nbytes = [], [], 0
        vals.append(v)
        counts.append(c)
        nbytes += len(v)
    if vals:
        yield objects(vals), np.array(counts, np.int64)


def _prefixes(values: np.ndarray) -> np.ndarray:
    """Long values cut to ``LONG + 1`` bytes: they sort among values of at most ``LONG`` bytes as the whole
    values do (a cut value equal to a short one once numpy drops its trailing NULs is the larger)."""
    return np.array([v[:LONG + 1] for v in values.tolist()], f"S{LONG + 1}")


def _below(long_value: bytes, short_value: bytes) -> bool:
    return long_value < bytes(short_value)


def _mix(sv, sc, lv, lc) -> tuple[np.ndarray, np.ndarray]:
    """Two sorted chunks (short ``sv``, long ``lv``, disjoint) woven into one in ascending order."""
    if not lv.size:
        return sv, sc
    if not sv.size:
        return lv, lc
    at = np.searchsorted(sv, _prefixes(lv), side="right")
    return np.insert(sv.astype(object), at, lv), np.insert(sc, at, lc)


def interleave(short: Iterable, long: Iterable) -> Iterator[tuple[np.ndarray, np.ndarray]]:
    """Two merged streams of non-empty ``(values, counts)`` chunks in ascending order (values of at most ``LONG``
    bytes; longer ones, ``object`` arrays) as one stream in ascending order."""
    s_it, l_it = iter(short), iter(long)
    s = next(s_it, None)
    lg = next(l_it, None)
    while s is not None or lg is not None:
        if lg is None or s is None:
            yield s if lg is None else lg
            if lg is None:
                s = next(s_it, None)
            else:
                lg = next(l_it, None)
            continue
        (sv, sc), (lv, lc) = s, lg
        if _below(lv[-1], sv[-1]):  # the long chunk ends first: all of it, and the short values below its last
            k = int(np.searchsorted(sv, _prefixes(lv[-1:]), side="right")[0])
            yield _mix(sv[:k], sc[:k], lv, lc)
            s = (sv[k:], sc[k:]) if k < sv.size else next(s_it, None)
            lg = next(l_it, None)
        else:  # all of the short chunk, and the long values below its last
            m = int(np.searchsorted(_prefixes(lv), sv[-1:], side="left")[0])
            yield _mix(sv, sc, lv[:m], lc[:m])
            lg = (lv[m:], lc[m:]) if m < lv.size else next(l_it, None)
            s = next(s_it, None)


def value_lengths(values: np.ndarray) -> np.ndarray:
    """Each value's bytes (a bytes array, or an ``object`` array of bytes)."""
    if values.dtype == object:
        return np.fromiter(map(len, values), np.int64, values.size)
    return np.char.str_len(values).astype(np.int64) if values.size else np.zeros(0, np.int64)


def table_parts(values: np.ndarray, ids: np.ndarray, width: int, keys_of) -> list[tuple[np.ndarray, np.ndarray]]:
    """A chunk of a lookup table (ascending ``values``, their ``ids``) as the short table's ``(keys, ids)``
    (``keys_of(short values, width)``; ``width``: the short table's) and the long values' ``(object array, ids)``."""
    if values.dtype != object:
        return [(keys_of(values, width), ids)]
    long = value_lengths(values) > LONG
    short = np.array(values[~long].tolist(), f"S{max(width, 1)}")
    return [(keys_of(short, width), ids[~long]), (values[long], ids[long])]


class LongLookup:
    """Long value -> id from the long lookup table's files (``.lv``, ``.le``, ``.lc``: ascending values, their
    ends, ids; local paths): a dict when the values fit ``budget``; else, when 16 bytes a value fit half of it,
    the ends and each value's first 8 bytes (as a big-endian uint64) in memory, which narrow a query to the
    values sharing its first 8 bytes, read from the file (usually one); else a binary search of the files."""

    def __init__(self, values_path: str, ends_path: str, ids_path: str, budget: int):
        self.size = os.path.getsize(ends_path) // 8
        self.paths = (values_path, ends_path, ids_path)
        self.table = self.ends = self.prefix = None
        if os.path.getsize(values_path) + 96 * self.size <= budget:
            ids = np.fromfile(ids_path, np.int64).tolist()
            with open(values_path, "rb") as f:
                blob = f.read()
            ends = np.fromfile(ends_path, np.int64).tolist()
            self.table = {blob[a:b]: i for a, b, i in zip([0] + ends[:-1], ends, ids)}
        elif self.size * 16 <= budget // 2:
            self.ends = np.fromfile(ends_path, np.int64)
            self.prefix = self._prefixes(values_path)

    def _prefixes(self, values_path: str) -> np.ndarray:
        """Each value's first 8 bytes as a big-endian uint64 (every value has more), the file read 1 MiB at a
        time."""
        starts = np.concatenate([[0], self.ends[:-1]])
        out = np.zeros(self.size, np.uint64)
        fd = os.open(values_path, _READ)
        try:
            step = 1 << 20
            for a in range(0, int(self.ends[-1]) if self.size else 0, step):
                i, j = np.searchsorted(starts, [a, a + step])
                if i < j:
                    buf = np.frombuffer(os.pread(fd, step + 8, a), np.uint8)
                    grid = buf[(starts[i:j] - a)[:, None] + np.arange(8)]
                    out[i:j] = np.ascontiguousarray(grid).view(">u8").reshape(-1)
        finally:
            os.close(fd)
        return out

    def _end(self, fd, k: int) -> int:
        if k < 0:
            return 0
        if self.ends is not None:
            return int(self.ends[k])
        return int(np.frombuffer(os.pread(fd, 8, 8 * k), np.int64)[0])

    def get(self, values: list[bytes]) -> list[int]:
        if self.table is not None:
            return [self.table.get(v, 0) for v in values]
        if self.prefix is not None:
            keys = np.array([int.from_bytes(v[:8], "big") for v in values], np.uint64)
            los = np.searchsorted(self.prefix, keys, side="left").tolist()
            his = np.searchsorted(self.prefix, keys, side="right").tolist()
        else:
            los, his = [0] * len(values), [self.size] * len(values)
        fds = [os.open(p, _READ) for p in self.paths]
        try:
            return [self._find(fds, v, lo, hi) for v, lo, hi in zip(values, los, his)]
        finally:
            for fd in fds:
                os.close(fd)

    def _find(self, fds, v: bytes, lo: int, hi: int) -> int:
        """The id of ``v`` among the values ``[lo, hi)``, 0 where it is not there."""
        end = hi
        while lo < hi:  # the first value >= v
            mid = (lo + hi) >> 1
            a, b = self._end(fds[1], mid - 1), self._end(fds[1], mid)
            if os.pread(fds[0], min(b - a, len(v) + 1), a) < v:  # as the whole value compares
                lo = mid + 1
            else:
                hi = mid
        if lo >= end:
            return 0
        a, b = self._end(fds[1], lo - 1), self._end(fds[1], lo)
        if b - a != len(v) or os.pread(fds[0], b - a, a) != v:
            return 0
        return int(np.frombuffer(os.pread(fds[2], 8, 8 * lo), np.int64)[0])
