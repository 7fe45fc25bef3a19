"""``--memory`` split between the passes, in one place (``MemoryBudget``): what one process of a tabular
conversion holds, whatever the rows and distinct values.

* pre-pass (counting): each categorical column's share, ``memory / columns`` (at least 64 KiB), of which a
  column's counts hold half before they are merged and, still past it, spilled as a sorted run (the merge
  needs as much again): ``count_bytes``.
* vocabulary step: half of ``memory`` for the merge's reads, shared by the runs (``merge_entries``) and by
  the processes that merge columns at once (``shared``).
* pass 1 (encoding): half of ``memory`` for the lookups, shared by the categorical columns (``lookup_bytes``;
  a column past its share is looked up on disk), and a quarter for a chunk of compact rows (``chunk_rows``).
* pass 2 (writing) holds a slice of rows, whatever ``memory`` is."""
from __future__ import annotations

from dataclasses import dataclass, replace

from ..util.checks import as_int, set_int
from .vocab import CHUNK

__all__ = ["MemoryBudget", "CHUNK_ROWS", "MERGE_ENTRIES"]

CHUNK_ROWS = (1 << 12, 1 << 18)  # the least and most rows of a pass-1 chunk
MERGE_ENTRIES = (1 << 10, CHUNK)  # the least and most entries the merge reads from each run at a time
_COUNT_SHARE_MIN = 1 << 16  # 64 KiB: the least share of a column's counts


@dataclass(frozen=True)
class MemoryBudget:
    """``memory`` bytes (``--memory``) over a table of ``numeric`` and ``categorical`` columns.
    ``fixed_chunk_rows`` and ``fixed_lookup_bytes`` set a share outright instead (None: from ``memory``)."""

    memory: int
    numeric: int
    categorical: int
    fixed_chunk_rows: int | None = None
    fixed_lookup_bytes: int | None = None

    def __post_init__(self):
        set_int(self, "memory", minimum=1)
        set_int(self, "numeric", minimum=0)
        set_int(self, "categorical", minimum=0)
        set_int(self, "fixed_chunk_rows", minimum=1, none=True)
        set_int(self, "fixed_lookup_bytes", minimum=1, none=True)

    @property
    def count_bytes(self) -> int:
        """Bytes of one column's counts a counting task holds before it merges them and, still past this,
        spills a sorted run: half of the column's share of ``memory`` (the share at least 64 KiB)."""
        return max(self.memory // max(self.categorical, 1), _COUNT_SHARE_MIN) // 2

    def merge_entries(self, runs: int, width: int) -> int:
        """Entries the vocabulary step reads from each of ``runs`` runs (values of ``width`` bytes, an int64
        beside each) at a time: the merge holds half of ``memory`` however many runs there are."""
        runs, width = as_int(runs, "runs", minimum=0), as_int(width, "width", minimum=0)
        lo, hi = MERGE_ENTRIES
        return int(min(hi, max(lo, self.memory // 2 // max(runs, 1) // (width + 8))))

    def shared(self, processes: int) -> "MemoryBudget":
        """The budget of one of ``processes`` processes that work at once (the vocabulary step's columns on a
        pool): ``memory`` split between them."""
        processes = as_int(processes, "processes", minimum=1)
        return self if processes == 1 else replace(self, memory=max(1, self.memory // processes))

    @property
    def lookup_bytes(self) -> int:
        """Bytes one column's lookup may hold in pass 1: half of ``memory`` over the categorical columns."""
        if self.fixed_lookup_bytes is not None:
            return self.fixed_lookup_bytes
        return self.memory // 2 // max(self.categorical, 1)

    @property
    def row_bytes(self) -> int:
        """Bytes of a compact row as pass 1 holds it: label, numeric values, ids, its framed length."""
        return 4 + 4 * self.numeric + 8 * self.categorical + 8

    @property
    def chunk_rows(self) -> int:
        """Rows of a pass-1 chunk: a quarter of ``memory`` of compact rows, within 4,096..262,144. Pass 1 holds
        one chunk's rows until it writes them (block by block, no joined copy), so its memory does not grow with
        the rows of the input. The shards do not depend on it: they are cut from the rows' lengths."""
        if self.fixed_chunk_rows is not None:
            return self.fixed_chunk_rows
        lo, hi = CHUNK_ROWS
        return int(min(hi, max(lo, self.memory // 4 // self.row_bytes)))
