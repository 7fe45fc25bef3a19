"""A block of a table's good rows as columns (what every reader yields and the job encodes)."""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

__all__ = ["Rows"]


@dataclass
class Rows:
    """A block's good rows: their line numbers (1-based; Parquet: row numbers), labels (0/1), integer columns
    with a missing mask, and each categorical column as a fixed-width bytes array (``""``: missing)."""

    lines: np.ndarray
    labels: np.ndarray
    nums: np.ndarray
    missing: np.ndarray
    cats: list[np.ndarray]

    def __len__(self) -> int:
        return int(self.lines.size)

    def take(self, mask: np.ndarray) -> "Rows":
        """The rows where ``mask`` is true."""
        return Rows(self.lines[mask], self.labels[mask], self.nums[mask], self.missing[mask],
                    [c[mask] for c in self.cats])
