"""Write-time preparation on the two-pass engines, the planner's side: from the kept records' framed lengths
(and labels) in input order to the shard cuts of the output the local ``prep.PrepWriter`` writes.

* ``PartCuts``: the greedy shard cuts (``core.Cutter``) of one output, or of one part per label with
  ``--split-by-label`` (records routed by label, each part cut on its own, as ``prep.split.LabelSplitWriter``
  does), records arriving in output order. With a ``bucket_limit`` it also cuts each part into *buckets*:
  runs of records in output order that start at every shard start and hold at most ``bucket_limit`` bytes
  (a record larger than that alone), so pass 2 assembles a shard bucket by bucket in bounded memory.
* ``ShuffleLayout``: ``--shuffle``. The output order is the kept records sorted by
  ``record_keys(seed, kept index, "shuffle")``; the plan learns it without any record bytes by running the
  local shuffle itself (``prep.shuffle.ShuffleSink``, bounded memory, its temporary files on local disk) over
  12-byte stand-ins (key, framed length) of the records, and cuts what comes out with ``PartCuts``. The
  sink's report (seed, method, records, rank correlation, label mix) is the local converter's, figure for
  figure: it depends on the keys, lengths and labels only.
"""
from __future__ import annotations

import numpy as np

from ..prep.labels import bits_name, label_bits, label_order
from ..prep.keys import record_keys
from ..prep.shuffle import WriteShuffleOptions, ShuffleSink
from ..shardset.cuts import plan_cuts
from .core import Cutter

__all__ = ["PartCuts", "ShuffleLayout", "STAND_IN", "bucket_limit"]

STAND_IN = np.dtype([("key", "<u8"), ("length", "<u4")])  # 12 bytes a record: what the plan's sort moves


def bucket_limit(memory: int) -> int:
    """Bytes of records a pass-2 bucket holds at most: a quarter of ``--shuffle-memory`` (the bucket, its
    sorted copy and the keys stay well within the budget)."""
    return max(1, memory // 4)


class _Part:
    """One output's (or one label's) records in output order: shard cuts, and bucket starts (ordinal, key)."""

    def __init__(self, limit: int, bucket: int | None):
        self.cutter = Cutter(limit)
        self.bucket = bucket
        self.bucket_starts: list[int] = []
        self.bucket_keys: list[int] = []
        self._used = 0  # bytes in the open bucket

    def add(self, lengths: np.ndarray, keys: np.ndarray | None) -> None:
        first, before = self.cutter.records, len(self.cutter.starts)
        self.cutter.add(lengths)
        if self.bucket is None or not lengths.size:
            return
        forced = [s - first for s in self.cutter.starts[before:]]  # shards that start in this batch
        bounds = sorted(set(forced) | {0, int(lengths.size)})
        for a, b in zip(bounds[:-1], bounds[1:]):
            if a in forced:
                self._start(first + a, keys[a])
                self._used = 0
            cuts = plan_cuts(lengths[a:b], self._used, self.bucket)
            for c in cuts:
                self._start(first + a + c, keys[a + c])
            self._used = int(lengths[a + cuts[-1]:b].sum()) if cuts else self._used + int(lengths[a:b].sum())

    def _start(self, ordinal: int, key) -> None:
        self.bucket_starts.append(int(ordinal))
        self.bucket_keys.append(int(key))

    def shards(self) -> list[tuple[int, int, int, int]]:
        """``(first record, records, first bucket, stop bucket)`` of each shard (buckets of this part)."""
        out, starts = [], np.asarray(self.bucket_starts, dtype=np.int64)
        for a, b in self.cutter.ranges():
            j0, j1 = (int(np.searchsorted(starts, a)), int(np.searchsorted(starts, b))) if self.bucket else (0, 0)
            out.append((a, b - a, j0, j1))
        return out


class PartCuts:
    """Shard cuts of records in output order: one output, or (``split``) one part per label."""

    def __init__(self, limit: int, split: bool, bucket: int | None = None):
        self.limit, self.split, self.bucket = int(limit), split, bucket
        self.parts: dict[int, _Part] = {}  # label bits (0 when not split) -> part

    def _part(self, bits: int) -> _Part:
        part = self.parts.get(bits)
        if part is None:
            part = self.parts[bits] = _Part(self.limit, self.bucket)
        return part

    def add(self, lengths, labels=None, keys=None) -> None:
        lengths = np.asarray(lengths, dtype=np.int64)
        if not lengths.size:
            return
        if not self.split:
            self._part(0).add(lengths, keys)
            return
        if labels is None:
            raise ValueError("splitting by label needs every record's label")
        bits = label_bits(labels)
        for b in np.unique(bits):
            sel = bits == b
            self._part(int(b)).add(lengths[sel], None if keys is None else keys[sel])

    @property
    def records(self) -> int:
        return sum(p.cutter.records for p in self.parts.values())

    def order(self) -> list[int]:
        """The parts' label bits in the order the split writer finishes them (by label value)."""
        return sorted(self.parts, key=label_order)

    def names(self) -> list[str]:
        return [bits_name(b) for b in self.order()] if self.split else []

    def shard_records(self) -> list[int] | None:
        """Records per shard so far (the open one last), as ``ShardSetWriter.shard_records``; None when split
        (no single sequence of shards: no label-mix figure, as locally)."""
        if self.split:
            return None
        part = self.parts.get(0)
        return [] if part is None else [b - a for a, b in part.cutter.ranges()]


class _CutWriter:
    """What the plan's shuffle writes to: the stand-ins in output order go to the cuts."""

    def __init__(self, cuts: PartCuts):
        self.cuts = cuts

    def write(self, framed, lengths, labels=None) -> None:
        rec = np.frombuffer(framed, dtype=STAND_IN)
        self.cuts.add(rec["length"].astype(np.int64), labels, rec["key"])

    def shard_records(self):
        return self.cuts.shard_records()


class ShuffleLayout:
    """``add`` the kept records' framed lengths (and labels) in input order; ``finish`` sorts them by key (the
    local shuffle, on 12-byte stand-ins) into ``cuts`` and returns the shuffle's manifest report. Use as a
    context manager (temporary files removed on exit)."""

    def __init__(self, options: WriteShuffleOptions, limit: int, split: bool, *, tmp_root: str, records: int):
        self.options = options
        self.cuts = PartCuts(limit, split, bucket_limit(options.memory))
        self._sink = ShuffleSink(_CutWriter(self.cuts), options, tmp_root=tmp_root,
                                 expected_bytes=(STAND_IN.itemsize + 28) * records)  # + the sink's own meta
        self._index = 0

    def add(self, lengths, labels=None) -> None:
        lengths = np.asarray(lengths, dtype=np.int64)
        n = int(lengths.size)
        if not n:
            return
        rec = np.empty(n, STAND_IN)
        rec["key"] = record_keys(self.options.seed, np.arange(self._index, self._index + n, dtype=np.uint64))
        rec["length"] = lengths
        self._index += n
        self._sink.write(rec.view(np.uint8), np.full(n, STAND_IN.itemsize, np.int64),
                         None if labels is None else np.asarray(labels, np.float32))

    def finish(self) -> dict:
        return self._sink.finish()

    def bucket_keys(self) -> tuple[np.ndarray, list[int]]:
        """Every part's bucket start keys, parts in order, and the first bucket of each part (+ the total)."""
        bases, keys = [0], []
        for b in self.cuts.order():
            keys.extend(self.cuts.parts[b].bucket_keys)
            bases.append(len(keys))
        return np.asarray(keys, dtype=np.uint64), bases

    def close(self) -> None:
        self._sink.close()

    def __enter__(self) -> "ShuffleLayout":
        return self

    def __exit__(self, *exc) -> None:
        self.close()
