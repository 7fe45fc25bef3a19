"""A column's vocabulary lookup from its sorted table on disk (``vocabwrite``: uint64 keys ascending, uint32
ids beside them), for a vocabulary whose in-memory hash table would pass the column's share of ``--memory``.

An index of every ``stride``-th key stays in memory and says which block of ``stride`` keys a query can be in:
512 keys (4 KiB of keys, 2 KiB of ids), or more when an index of every 512th would pass a quarter of the budget,
so the index never does. A call sorts its queries by block and reads the blocks it needs (``os.preadv``) into
two fixed buffers, as many blocks at a time as half the budget holds (at least one), then looks the queries up
in them (``kernel.block_get``). The process holds the index and the buffers, whatever the vocabulary's size; the system's page cache keeps the hot blocks (outside the process: it gives them back
under pressure), so a block read again costs a copy, not a disk read. Ids are the hash table's
(``vocab.Lookup``): the same shards either way."""
from __future__ import annotations

import os

import numpy as np

__all__ = ["DiskLookup", "STRIDE", "table_bytes", "stride_for"]

STRIDE = 512                 # keys per block at least: 4 KiB of keys, 2 KiB of ids
_READ = os.O_RDONLY | getattr(os, "O_CLOEXEC", 0)


def table_bytes(values: int) -> int:
    """The bytes of the in-memory hash table of ``values`` values (``kernel.table_slots``, 12 bytes a slot)."""
    from .kernel import table_slots

    return table_slots(values) * 12


def stride_for(values: int, budget: int) -> int:
    """Keys per block: 512, or the multiple of 512 that keeps the index (8 bytes a block) within a quarter of
    ``budget``."""
    blocks = max(int(budget) // 4 // 8, 1)
    per = -(-int(values) // blocks)
    return max(STRIDE, -(-per // STRIDE) * STRIDE)


class DiskLookup:
    """Value -> id of one column from its sorted table files (local paths); ``budget``: bytes of blocks it may
    hold at once (at least one block)."""

    def __init__(self, keys_path: str, ids_path: str, budget: int):
        self._fds = [os.open(keys_path, _READ), os.open(ids_path, _READ)]
        sizes = [os.fstat(fd).st_size for fd in self._fds]
        self.size = sizes[0] // 8
        if sizes != [self.size * 8, self.size * 4]:
            self.close()
            raise ValueError(f"lookup table {keys_path}: {sizes[0]} bytes of keys and {sizes[1]} bytes of ids "
                             f"are not 8 and 4 bytes of {self.size} values")
        self.stride = stride_for(self.size, budget)
        self.index = self._read_index()
        self._rows = max(int(budget) // 2 // (self.stride * 12), 1)
        self._keys = np.zeros((self._rows, self.stride), np.uint64)
        self._ids = np.zeros((self._rows, self.stride), np.uint32)
        self.blocks_read = 0

    def _read_index(self) -> np.ndarray:
        """Every ``stride``-th key, read about 1 MiB at a time."""
        parts, step = [], self.stride * max(1, (1 << 17) // self.stride)
        for a in range(0, self.size, step):
            n = min(step, self.size - a)
            raw = os.pread(self._fds[0], n * 8, a * 8)
            parts.append(np.frombuffer(raw, np.uint64)[::self.stride].copy())
        return np.concatenate(parts) if parts else np.zeros(0, np.uint64)

    def close(self) -> None:
        for fd in self._fds:
            os.close(fd)
        self._fds = []

    def __del__(self):
        if getattr(self, "_fds", None):
            self.close()

    def _fill(self, blocks: np.ndarray) -> np.ndarray:
        """Read ``blocks`` into the buffers' first rows; each block's key count."""
        st = self.stride
        lens = np.minimum(self.size - blocks * st, st)
        kf, idf = self._fds
        for r, (b, n) in enumerate(zip(blocks.tolist(), lens.tolist())):
            if (os.preadv(kf, [memoryview(self._keys[r, :n]).cast("B")], b * st * 8) != n * 8
                    or os.preadv(idf, [memoryview(self._ids[r, :n]).cast("B")], b * st * 4) != n * 4):
                raise OSError(f"lookup table: block {b} was cut short (the table changed while read)")
        self.blocks_read += blocks.size
        return lens

    def get(self, keys: np.ndarray) -> np.ndarray:
        """The ids of uint64 keys (0: the empty value, or not in the vocabulary)."""
        from .kernel import block_get

        keys = np.ascontiguousarray(keys, np.uint64)
        out = np.zeros(keys.size, np.int64)
        if not self.size or not keys.size:
            return out
        block = np.searchsorted(self.index, keys, side="right").astype(np.int64) - 1
        live = np.flatnonzero((keys != 0) & (block >= 0))
        order = live[np.argsort(block[live], kind="stable")]
        blocks, first = np.unique(block[order], return_index=True)
        first = np.append(first, order.size)
        for g in range(0, blocks.size, self._rows):
            grp = blocks[g:g + self._rows]
            lens = self._fill(grp)
            q = order[first[g]:first[g + grp.size]]
            rows = np.searchsorted(grp, block[q])
            out[q] = block_get(self._keys, self._ids, lens, rows, keys[q])
        return out
