"""Pure shard-cut planning: where a new shard must start so that no shard crosses its byte limit.

A shard is closed *before* the record that would cross the limit (framing counted), except that a record
larger than the limit gets a shard of its own. The cuts depend only on the framed record lengths in order,
so any engine that knows them (the local writer as records stream in, a distributed planner from pass-1
lengths) computes the same cuts.
"""
from __future__ import annotations

import numpy as np

__all__ = ["plan_cuts"]


def plan_cuts(lengths: np.ndarray, used: int, limit: int) -> list[int]:
    """Pure: given framed record lengths, the bytes already in the open shard and the limit, return the
    record indices at which a new shard must start (a record never crosses the limit unless it is alone)."""
    cuts = []
    i, n = 0, len(lengths)
    csum = np.cumsum(lengths, dtype=np.int64)
    while i < n:
        room = limit - used
        # number of records from i that fit: csum[j] - base_before_i <= room
        before = csum[i - 1] if i > 0 else 0
        j = int(np.searchsorted(csum, before + room, side="right"))
        if j == i:
            if used == 0:
                j = i + 1  # a single record larger than the limit gets a shard of its own
            else:
                cuts.append(i)
                used = 0
                continue
        used += int(csum[j - 1] - before)
        i = j
        if i < n:
            cuts.append(i)
            used = 0
    return cuts
