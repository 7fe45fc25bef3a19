"""A block of a table's good rows as columns (what every reader yields and the job encodes), and where a block
whose long values would make its gathered columns much larger than its bytes is cut (``slices``)."""
from __future__ import annotations

import numpy as np

__all__ = ["Rows", "slices", "GATHER_BYTES"]

GATHER_BYTES = 16 << 20  # the bytes a block's gathered long columns may take before the block is cut in slices


class Rows:
    """A block's good rows: their line numbers (1-based; Parquet: row numbers), labels (0/1), integer columns
    with a missing mask, and each categorical column as a fixed-width bytes array (``""``: missing). A column
    whose values all have at most 8 bytes may come as its uint64 keys instead (``vocab.sort_key``: big-endian,
    zero-padded), its bytes array made only when asked for."""

    def __init__(self, lines, labels, nums, missing, cats=None, keys=None):
        self.lines, self.labels, self.nums, self.missing = lines, labels, nums, missing
        self.keys = list(keys) if keys is not None else [None] * len(cats)
        self._cats = list(cats) if cats is not None else [None] * len(self.keys)

    def __len__(self) -> int:
        return int(self.lines.size)

    @property
    def ncat(self) -> int:
        return len(self.keys)

    def cat(self, j: int) -> np.ndarray:
        """Column ``j``'s values as a bytes array."""
        if self._cats[j] is None:
            self._cats[j] = self.keys[j].astype(">u8").view("S8")
        return self._cats[j]

    def key(self, j: int) -> np.ndarray | None:
        """Column ``j``'s uint64 keys when its values have at most 8 bytes, else None."""
        if self.keys[j] is None and self._cats[j] is not None and self._cats[j].dtype.itemsize <= 8:
            from .vocab import sort_key

            self.keys[j] = sort_key(self._cats[j])
        return self.keys[j]

    def take(self, mask: np.ndarray) -> "Rows":
        """The rows where ``mask`` is true."""
        return Rows(self.lines[mask], self.labels[mask], self.nums[mask], self.missing[mask],
                    [None if c is None else c[mask] for c in self._cats],
                    [None if k is None else k[mask] for k in self.keys])


def slices(good: np.ndarray, width: np.ndarray, limit: int) -> list[np.ndarray]:
    """``good`` (a block's good rows) cut into consecutive runs of rows whose long columns, each gathered at the
    run's longest value (``width``: each good row's longest value times the long columns), take at most about
    ``limit`` bytes (a run holds at least one row): one long value costs its own length, not the block's rows
    times it."""
    if not good.size or good.size * int(width.max()) <= limit:
        return [good]
    cuts, at, top = [], 0, 0
    for k, w in enumerate(width.tolist()):
        top = max(top, w)
        if (k - at + 1) * top > limit and k > at:
            cuts.append(k)
            at, top = k, w
    return np.split(good, cuts)
