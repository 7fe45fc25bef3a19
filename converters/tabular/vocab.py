"""Exact categorical vocabularies in bounded memory.

Counting (the job's pre-pass, one task per input): each column's values are counted per block (values of at most 8
bytes by their keys, radix-sorted and counted in kernels: ``unique_keys``; longer ones by ``np.argsort``) and
merged into a sorted ``(values, counts)`` accumulator; when the task's accumulators pass their share of
``--memory`` (``budget.MemoryBudget.count_bytes``) they are written to the run's temporary area as a sorted run
and emptied, so a task's memory does not grow with rows or distinct values. ``merge_runs`` merges every task's
runs of a column in chunks (a k-way merge over sorted runs read piece by piece). The vocabulary keeps the values
seen at least ``min_count`` times, ids 1..V by descending count, ties by descending bytes (Keras
``StringLookup.adapt``'s and tf.Transform's order; ``vocabwrite`` streams it from the merge, never holding it);
the vocabulary file lists them in id order, one per line, so ``tf.keras.layers.StringLookup(vocabulary=file,
num_oov_indices=1)`` gives the same ids; everything else (missing, rarer, never seen) is id 0.

Values are fixed-width bytes arrays (numpy ``S``): a value's trailing NUL bytes are not part of it (no real
table has them), here and in ``--hash-buckets``' bins alike. Values longer than ``vocablong.LONG`` bytes are
counted, spilled, merged and looked up on a path of their own (``vocablong``), so the fixed-width arrays never
take the width of a rare long value: a long value costs its own length."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Iterator, Sequence, TypeVar

import numpy as np

from .vocablong import LONG, LongLookup, interleave, merge_long, put_long, servable_long, split_long

__all__ = ["sort_key", "unique_counts", "unique_keys", "servable", "merge_sorted", "ColumnCounter", "SortedRun",
           "CountRun", "merge_runs", "write_run", "table_keys", "Lookup", "short_keys"]

CHUNK = 1 << 16  # entries read from each run at a time by the merge
_RADIX_FROM = 1 << 12  # keys from which a block's column is radix-sorted (fewer: np.sort, no histogram to clear)


def sort_key(values: np.ndarray) -> np.ndarray:
    """A key that sorts like the values' bytes: values of at most 8 bytes (Criteo's hex strings) as big-endian
    uint64 (radix-sorted, several times faster than comparing bytes), longer ones as they are."""
    if values.dtype.itemsize <= 8:
        return np.ascontiguousarray(values.astype("S8")).view(">u8").astype(np.uint64)
    return values


def unique_counts(values: np.ndarray, counts: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray]:
    """Sorted unique values and their summed counts (``counts``: per value, default 1 each)."""
    if not values.size:
        return np.zeros(0, "S1"), np.zeros(0, np.int64)
    key = sort_key(values)
    if counts is None and key.dtype == np.uint64:  # a plain sort, no permutation: the keys give the values back
        key = np.sort(key)
        flag = np.ones(key.size, np.bool_)
        flag[1:] = key[1:] != key[:-1]
        idx = np.flatnonzero(flag)
        u = key[idx].astype(">u8").view("S8")
        return u.astype(f"S{max(values.dtype.itemsize, 1)}"), np.diff(np.append(idx, key.size)).astype(np.int64)
    order = np.argsort(key, kind="stable")
    key = key[order]
    flag = np.ones(key.size, np.bool_)
    flag[1:] = key[1:] != key[:-1]
    idx = np.flatnonzero(flag)
    if counts is None:
        c = np.diff(np.append(idx, key.size)).astype(np.int64)
    else:
        c = np.add.reduceat(counts[order], idx)
    return values[order[idx]], c


def unique_keys(keys: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The sorted distinct values (as ``S8``) and counts of values given by their uint64 keys, the empty value
    (key 0) and values a vocabulary file cannot hold (``servable``) left out."""
    from .countkernel import count_sorted, radix_sort

    u, counts = count_sorted(radix_sort(keys) if keys.size >= _RADIX_FROM else np.sort(keys))
    return u.astype(">u8").view("S8"), counts


def merge_sorted(parts: Sequence[tuple[np.ndarray, np.ndarray]]) -> tuple[np.ndarray, np.ndarray]:
    """Sorted unique values and summed counts of ``(values, counts)`` parts."""
    parts = [p for p in parts if p[0].size]
    if not parts:
        return np.zeros(0, "S1"), np.zeros(0, np.int64)
    if len(parts) == 1:
        return parts[0]
    return unique_counts(np.concatenate([p[0] for p in parts]), np.concatenate([p[1] for p in parts]))


def servable(values: np.ndarray) -> np.ndarray:
    """Which values a vocabulary file can hold so that StringLookup reads them back: not empty (missing), no
    newline, no trailing carriage return (TensorFlow's line reader drops it). ``countkernel._servable_key`` applies the
    same rule to a value's 8-byte key (``unique_keys``)."""
    ok = values != b""
    if values.dtype.itemsize > 0:
        ok &= ~np.char.endswith(values, b"\r") & (np.char.find(values, b"\n") < 0)
    return ok


@dataclass(frozen=True)
class SortedRun:
    """A sorted run of one column in the temporary area: ``key + '.v'`` (values of at most ``vocablong.LONG``
    bytes, ``width`` bytes each) and ``key + '.c'`` (an int64 beside each value), ``size`` entries; ``long``
    longer values in ``vocablong``'s files. What the int64s are is the run's kind (``CountRun``,
    ``vocabcopy.IdRun``); ``merge_runs`` merges runs of one kind, a value's int64s summed."""

    key: str
    width: int
    size: int
    long: int = 0


class CountRun(SortedRun):
    """A sorted run of one column's counts (``ColumnCounter``'s): the int64 beside each value is how many times
    it was seen."""


_R = TypeVar("_R", bound=SortedRun)


def write_run(kind: type[_R], area, key: str, values: np.ndarray, ints: np.ndarray,
              long: tuple[list[bytes], np.ndarray] | None = None) -> _R:
    """A sorted run of ``kind`` (``values`` ascending, an int64 per value; ``long``: the longer values,
    ascending, and theirs) written to the temporary area as ``key``."""
    area.put_array(key + ".v", np.frombuffer(values.tobytes(), np.uint8))
    area.put_array(key + ".c", np.asarray(ints, np.int64))
    if long and long[0]:
        put_long(area, key, *long)
    return kind(key, values.dtype.itemsize, int(values.size), len(long[0]) if long else 0)


class ColumnCounter:
    """One column's counts in one task: blocks in, sorted runs out (see the module docstring)."""

    def __init__(self, area, key: str, hold: int):
        self.area, self.key, self.hold = area, key, int(hold)  # bytes held before a merge (``budget.count_bytes``)
        self.parts: list[tuple[np.ndarray, np.ndarray]] = []
        self.nbytes = 0
        self.long: dict[bytes, int] = {}  # values longer than ``vocablong.LONG`` bytes -> counts
        self.runs: list[CountRun] = []

    def add(self, values: np.ndarray | None, keys: np.ndarray | None = None) -> None:
        """Count a block's values (a bytes array, or ``keys``: the uint64 keys of values of at most 8 bytes)."""
        if keys is not None:
            u, c = unique_keys(keys)  # servable ones only
        elif values.size:
            values, long = split_long(values)
            for v in long:
                if v in self.long:
                    self.long[v] += 1
                elif servable_long(v):
                    self.long[v] = 1
                    self.nbytes += len(v) + 96  # a dict entry and its bytes object
            if not values.size:
                self._check()
                return
            u, c = unique_counts(values)
            ok = servable(u)  # on the block's distinct values only
            u, c = u[ok], c[ok]
        else:
            return
        self.parts.append((u, c))
        self.nbytes += u.nbytes + c.nbytes
        self._check()

    def _check(self) -> None:
        if self.nbytes > self.hold:
            held = self.nbytes - sum(v.nbytes + c.nbytes for v, c in self.parts)  # the long values'
            self.parts = [merge_sorted(self.parts)]
            self.nbytes = held + self.parts[0][0].nbytes + self.parts[0][1].nbytes
            if self.nbytes > self.hold:
                self.spill()

    def spill(self) -> None:
        v, c = merge_sorted(self.parts)
        long = sorted(self.long.items())
        self.parts, self.nbytes, self.long = [], 0, {}
        if not v.size and not long:
            return
        self.runs.append(write_run(CountRun, self.area, f"{self.key}-r{len(self.runs):04d}", v, c,
                                   ([x for x, _ in long], np.array([n for _, n in long], np.int64))))

    def finish(self) -> list[CountRun]:
        self.spill()
        return self.runs


class _Reader:
    def __init__(self, area, run: SortedRun, chunk: int):
        self.area, self.run, self.chunk, self.at = area, run, chunk, 0
        self.v = np.zeros(0, f"S{run.width}")
        self.c = np.zeros(0, np.int64)

    @property
    def more(self) -> bool:
        return self.at < self.run.size

    def fill(self) -> None:
        if self.v.size or not self.more:
            return
        a, b, w = self.at, min(self.at + self.chunk, self.run.size), self.run.width
        self.v = np.frombuffer(self.area.get_range(self.run.key + ".v", a * w, b * w), f"S{w}")
        self.c = np.frombuffer(self.area.get_range(self.run.key + ".c", a * 8, b * 8), np.int64)
        self.at = b

    def take(self, bound) -> tuple[np.ndarray, np.ndarray]:
        k = self.v.size if bound is None else int(np.searchsorted(self.v, bound, side="right"))
        out = (self.v[:k], self.c[:k])
        self.v, self.c = self.v[k:], self.c[k:]
        return out


def merge_runs(area, runs: Sequence[SortedRun], chunk: int = CHUNK) -> Iterator[tuple[np.ndarray, np.ndarray]]:
    """The merged ``(values, int64s)`` of sorted runs of one kind (counts, or ids), in ascending value order,
    equal values' int64s summed, chunk by chunk: at most about ``chunk`` entries of every run are held at a
    time (of the long values, about ``chunk * vocablong.LONG`` bytes of every run, at least one value; a chunk
    with long values is an ``object`` array)."""
    short = _merge_short(area, runs, chunk)
    long = [r for r in runs if r.long]
    if not long:
        return short
    return interleave(short, merge_long(area, long, chunk * LONG, chunk))


def _merge_short(area, runs: Sequence[SortedRun], chunk: int) -> Iterator[tuple[np.ndarray, np.ndarray]]:
    readers = [_Reader(area, r, chunk) for r in runs if r.size]
    while True:
        for r in readers:
            r.fill()
        live = [r for r in readers if r.v.size]
        if not live:
            return
        pending = [r for r in live if r.more]  # runs with entries still on disk bound what is final
        bound = min(r.v[-1] for r in pending) if pending else None
        v, c = merge_sorted([r.take(bound) for r in live])
        if v.size:
            yield v, c


def table_keys(values: np.ndarray, width: int) -> np.ndarray:
    """The keys of a sorted lookup table whose longest value has ``width`` bytes: uint64 (``sort_key``) when
    ``width`` is at most 8, else the values as ``S<width>`` (both sort like the values' bytes)."""
    if width <= 8:
        return sort_key(values.astype("S8"))
    return values.astype(f"S{width}")


def short_keys(column: np.ndarray) -> np.ndarray:
    """The uint64 keys of a bytes column's values of at most 8 bytes; 0 (no vocabulary value) for longer ones."""
    if column.dtype.itemsize <= 8:
        return sort_key(column)
    short = np.char.str_len(column) <= 8
    keys = np.zeros(column.size, np.uint64)
    keys[short] = sort_key(column.astype("S8")[short])  # cut first: no copy of the long values
    return keys


class Lookup:
    """Value -> id of one column's vocabulary. Values of at most 8 bytes are looked up by their uint64 keys: in
    a hash table (``lookupkernel.table_build``) or, past the column's memory, a sorted table read from disk
    (``disklookup.DiskLookup``). A vocabulary with longer values is a sorted copy and ``searchsorted``, or,
    past the column's memory, its sorted table of fixed-width values on disk. Values longer than
    ``vocablong.LONG`` bytes are looked up in ``long`` (``vocablong.LongLookup``, set by the caller), if any."""

    long: LongLookup | None = None

    def __init__(self, values: np.ndarray, keys: np.ndarray | None = None, ids: np.ndarray | None = None):
        from .lookupkernel import table_build, table_slots

        self.size = int(values.size if keys is None else keys.size)
        self.disk = None
        key = sort_key(values) if keys is None else keys
        if key.dtype == np.uint64:  # values of at most 8 bytes: a hash table of their keys, nothing else kept
            if key.size >= 1 << 32:
                raise ValueError(f"a vocabulary of {key.size:,} values: at most 2**32 - 1 per column")
            cap = table_slots(key.size)
            ids = np.arange(1, key.size + 1, dtype=np.int64) if ids is None else ids.astype(np.int64)
            self.table = table_build(key, ids, cap)
            return
        self.table = None
        order = np.argsort(key, kind="stable")
        self.sorted = values[order]
        self.ids = (order + 1).astype(np.int64)

    @classmethod
    def of_table(cls, keys: np.ndarray, ids: np.ndarray) -> "Lookup":
        """The lookup of a vocabulary of values of at most 8 bytes given by its uint64 keys and their ids. The
        keys go into the hash table in id order, the most frequent first: they take their home slots, so the
        lookups most rows make probe once."""
        order = np.argsort(ids, kind="stable")
        return cls(np.zeros(0, "S1"), np.asarray(keys, np.uint64)[order], np.asarray(ids)[order])

    @classmethod
    def of_sorted(cls, values: np.ndarray, ids: np.ndarray) -> "Lookup":
        """The lookup of a vocabulary with values longer than 8 bytes given by its sorted table (``values``
        ascending, their ids beside them)."""
        lk = cls.__new__(cls)
        lk.size, lk.disk, lk.table = int(values.size), None, None
        lk.sorted, lk.ids = values, np.asarray(ids, np.int64)
        return lk

    @classmethod
    def of_disk(cls, disk) -> "Lookup":
        """The lookup over a ``disklookup.DiskLookup``."""
        lk = cls.__new__(cls)
        lk.size, lk.disk, lk.table = disk.size, disk, None
        return lk

    def _get(self, keys: np.ndarray) -> np.ndarray:
        if not self.size:
            return np.zeros(keys.size, np.int64)
        if self.disk is not None:
            return self.disk.get(keys)
        from .lookupkernel import table_get

        return table_get(self.table, keys)

    @property
    def by_key(self) -> bool:
        return self.table is not None or (self.disk is not None and self.disk.by_key)

    def of(self, rows, j: int) -> np.ndarray:
        """The ids of column ``j`` of a block of ``Rows``."""
        key = rows.key(j)
        if key is not None and self.by_key:
            return self._get(key)  # key 0: the empty value, never in a vocabulary
        return self(rows.cat(j))

    def put(self, rows, j: int, out: np.ndarray, col: int, offset: int) -> None:
        """Column ``j``'s ids of a block of ``Rows``, ``offset`` added, into column ``col`` of ``out``: straight from
        the hash table when the block has the column's keys, else through ``of``."""
        key = rows.key(j)
        if key is not None and self.table is not None and self.size:
            from .lookupkernel import table_put

            table_put(self.table, key, out, col, offset)
        else:
            out[:, col] = self.of(rows, j) + offset

    def __call__(self, column: np.ndarray) -> np.ndarray:
        out = self._short(column)
        if self.long is not None and self.long.size and column.dtype.itemsize > LONG:
            at = np.flatnonzero(np.char.str_len(column) > LONG)
            if at.size:
                out[at] = self.long.get(column[at].tolist())
        return out

    def _short(self, column: np.ndarray) -> np.ndarray:
        """The ids of the values of at most ``vocablong.LONG`` bytes (0 for longer ones)."""
        if not self.size:
            return np.zeros(column.size, np.int64)
        if self.by_key:  # longer values than 8 bytes have key 0: none is in the vocabulary
            return self._get(short_keys(column))
        if self.disk is not None:
            return self.disk.get(column)
        w = self.sorted.dtype.itemsize
        if column.dtype.itemsize > w:  # longer values are not in the table: compared at its width
            column = np.where(np.char.str_len(column) <= w, column.astype(f"S{w}"), b"")
        at = np.minimum(np.searchsorted(self.sorted, column), self.size - 1)
        hit = (self.sorted[at] == column) & (column != b"")
        return np.where(hit, self.ids[at], 0)
