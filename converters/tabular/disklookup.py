"""A column's vocabulary lookup from its sorted table on disk (``vocabwrite``: keys ascending, uint32 ids beside
them), for a vocabulary whose in-memory lookup would pass the column's share of ``--memory``. The keys are
uint64 (``vocab.sort_key``) when every value has at most 8 bytes, else the values themselves at the width of
the longest (numpy ``S<width>``, zero-padded): both sort like the values' bytes.

An index of every ``stride``-th key stays in memory and says which block of ``stride`` keys a query can be in:
512 keys (4 KiB of uint64 keys, 2 KiB of ids), or more when an index of every 512th would pass a quarter of
the budget, so the index never does. A call sorts its queries by block and reads the blocks it needs
(``os.preadv``, one read per file for each run of consecutive blocks) into two fixed buffers, as many blocks
at a time as half the budget holds (at least one), then looks the queries up in them (``lookupkernel.block_get``;
for values, one ``searchsorted`` over the blocks read, which follow each other in key order). The process
holds the index and the buffers, whatever the vocabulary's size; the system's page cache keeps the hot blocks
(outside the process: it gives them back under pressure), so a block read again costs a copy, not a disk
read. Ids are the in-memory lookup's
(``vocab.Lookup``): the same shards either way."""
from __future__ import annotations

import os

import numpy as np

__all__ = ["DiskLookup", "STRIDE", "table_bytes", "stride_for"]

STRIDE = 512                 # keys per block at least: 4 KiB of keys, 2 KiB of ids
_READ = os.O_RDONLY | getattr(os, "O_CLOEXEC", 0)


def table_bytes(values: int) -> int:
    """The bytes of the in-memory hash table of ``values`` values (``lookupkernel.table_slots``, 12 bytes a slot)."""
    from .lookupkernel import table_slots

    return table_slots(values) * 12


def stride_for(values: int, budget: int, key_bytes: int = 8) -> int:
    """Keys per block: 512, or the multiple of 512 that keeps the index (``key_bytes`` a block) within a quarter
    of ``budget``."""
    blocks = max(int(budget) // 4 // int(key_bytes), 1)
    per = -(-int(values) // blocks)
    return max(STRIDE, -(-per // STRIDE) * STRIDE)


class DiskLookup:
    """Value -> id of one column from its sorted table files (local paths); ``budget``: bytes of blocks it may
    hold at once (at least one block); ``width``: the bytes of each key in a table of values longer than 8
    bytes (0: uint64 keys)."""

    def __init__(self, keys_path: str, ids_path: str, budget: int, width: int = 0):
        self.dtype = np.dtype(f"S{width}") if width else np.dtype(np.uint64)
        self._fds = [os.open(keys_path, _READ), os.open(ids_path, _READ)]
        sizes = [os.fstat(fd).st_size for fd in self._fds]
        w = self.dtype.itemsize
        self.size = sizes[0] // w
        if sizes != [self.size * w, self.size * 4]:
            self.close()
            raise ValueError(f"lookup table {keys_path}: {sizes[0]} bytes of keys and {sizes[1]} bytes of ids "
                             f"are not {w} and 4 bytes of {self.size} values")
        self.stride = stride_for(self.size, budget, w)
        self.index = self._read_index()
        self._rows = max(int(budget) // 2 // (self.stride * (w + 4)), 1)
        self._keys = np.zeros((self._rows, self.stride), self.dtype)
        self._ids = np.zeros((self._rows, self.stride), np.uint32)
        self.blocks_read = 0

    @property
    def by_key(self) -> bool:
        """Whether it is queried by uint64 keys (else by the values)."""
        return self.dtype == np.uint64

    def _read_index(self) -> np.ndarray:
        """Every ``stride``-th key, read about 1 MiB at a time."""
        w = self.dtype.itemsize
        parts, step = [], self.stride * max(1, (1 << 20) // w // self.stride)
        for a in range(0, self.size, step):
            n = min(step, self.size - a)
            raw = os.pread(self._fds[0], n * w, a * w)
            parts.append(np.frombuffer(raw, self.dtype)[::self.stride].copy())
        return np.concatenate(parts) if parts else np.zeros(0, self.dtype)

    def close(self) -> None:
        for fd in self._fds:
            os.close(fd)
        self._fds = []

    def __del__(self):
        if getattr(self, "_fds", None):
            self.close()

    def _fill(self, blocks: np.ndarray) -> np.ndarray:
        """Read ``blocks`` (ascending) into the buffers' first rows, each run of consecutive blocks with one read
        per file; each block's key count."""
        st, w = self.stride, self.dtype.itemsize
        lens = np.minimum(self.size - blocks * st, st)
        kf, idf = self._fds
        starts = np.flatnonzero(np.diff(blocks, prepend=-2) != 1)  # where each run of consecutive blocks begins
        keys, ids = self._keys.reshape(-1), self._ids.reshape(-1)
        for r, b, n in zip(starts.tolist(), blocks[starts].tolist(), np.add.reduceat(lens, starts).tolist()):
            a = r * st  # only a run's last block (the table's last) is short
            if (os.preadv(kf, [memoryview(keys[a:a + n].view(np.uint8))], b * st * w) != n * w
                    or os.preadv(idf, [memoryview(ids[a:a + n]).cast("B")], b * st * 4) != n * 4):
                raise OSError(f"lookup table: blocks from {b} were cut short (the table changed while read)")
        self.blocks_read += blocks.size
        return lens

    def _queries(self, keys: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """The queries in the table's dtype, and which of them can be in it (not empty, not longer than its
        keys)."""
        if self.by_key:
            keys = np.ascontiguousarray(keys, np.uint64)
            return keys, keys != 0
        keys = np.asarray(keys)
        fits = (keys != b"") & (np.char.str_len(keys) <= self.dtype.itemsize)
        return np.where(fits, keys.astype(self.dtype), b""), fits  # cut first: no copy of the longer values

    def get(self, keys: np.ndarray) -> np.ndarray:
        """The ids of uint64 keys, or of values in a table of values (0: the empty value, or not in the
        vocabulary)."""
        from .lookupkernel import block_get

        keys, fits = self._queries(keys)
        out = np.zeros(keys.size, np.int64)
        if not self.size or not keys.size:
            return out
        block = np.searchsorted(self.index, keys, side="right").astype(np.int64) - 1
        live = np.flatnonzero(fits & (block >= 0))
        order = live[np.argsort(block[live], kind="stable")]
        blocks, first = np.unique(block[order], return_index=True)
        first = np.append(first, order.size)
        for g in range(0, blocks.size, self._rows):
            grp = blocks[g:g + self._rows]
            lens = self._fill(grp)
            q = order[first[g]:first[g + grp.size]]
            if self.by_key:
                rows = np.searchsorted(grp, block[q])
                out[q] = block_get(self._keys, self._ids, lens, rows, keys[q])
            else:
                out[q] = self._values_get(grp.size, int(lens[-1]), keys[q])
        return out

    def _values_get(self, n: int, last: int, query: np.ndarray) -> np.ndarray:
        """The ids of ``query`` in the first ``n`` rows of the buffers (ascending blocks, so one sorted run; only
        the last may be short, ``last`` keys)."""
        cut = (n - 1) * self.stride + last
        keys, ids = self._keys[:n].reshape(-1)[:cut], self._ids[:n].reshape(-1)[:cut]
        at = np.minimum(np.searchsorted(keys, query), cut - 1)
        return np.where(keys[at] == query, ids[at].astype(np.int64), 0)
