"""The LibSVM job's plan with write-time preparation (``--balance``, ``--shuffle``, ``--split-by-label``): what
``prep.PrepWriter`` does to the records in the local converter, computed from what pass 1 left in the temporary
area — each unit's framed lengths (``u0000012.len``) and labels (``u0000012.lab``, float32).

Records are numbered by their global index among the parsed records in input order (unit by unit, from the
prefix sums of the units' counts), exactly as the local writer numbers what it is offered:

* balance: the label counts and each label's key threshold by the local radix selection
  (``prep.balance.LabelCounts``) streaming the units' labels; a unit keeps the records its labels and indices
  pass (``Thresholds.keep``), the others are accounted as ``sampled_out`` to their input file;
* without shuffle the kept records stay in input order: shard cuts per part (``prepplan.PartCuts``), and pass 2
  re-parses each unit and picks the records of its shard (``LibsvmPiece`` with a keep rule and a label);
* with shuffle: ``prepplan.ShuffleLayout`` orders and cuts the kept records; every unit with kept records is a
  scatter source (``engines.scatter``) and every shard a range of buckets.
"""
from __future__ import annotations

import bisect
from typing import Sequence

import numpy as np

from ..engines.core import ErrorRecord, SetPlan, ShardSpec
from ..engines.prepplan import PartCuts, ShuffleLayout
from ..engines.scatter import plan_tmp_root, shuffled_plan
from ..prep.balance import LabelCounts, Thresholds
from ..shardset.manifest import InputStats
from ..util.errors import InputError

__all__ = ["PreparedUnits"]


class PreparedUnits:
    """The units' kept records after balancing, and the plan of the prepared output."""

    def __init__(self, job, summaries: Sequence, firsts: Sequence[int], base: int):
        self.job, self.summaries, self.firsts, self.base = job, list(summaries), list(firsts), base
        self.prep = job.prep
        self.labelled = not job.options.multilabel
        self.rule: Thresholds | None = None
        self.report: dict | None = None
        self.kept = [s.records for s in self.summaries]

    def _labels(self, s) -> np.ndarray | None:
        if not self.labelled:
            return None
        if not s.records:
            return np.zeros(0, np.float32)
        return self.job.area.get_array(f"{s.unit.key}.lab", np.float32)

    def _lengths(self, s) -> np.ndarray:
        if not s.records:
            return np.zeros(0, np.int64)
        return self.job.area.get_array(f"{s.unit.key}.len", np.int32).astype(np.int64)

    # -- balance ---------------------------------------------------------------------------------------
    def balance(self, stats: Sequence[InputStats]) -> ErrorRecord | None:
        """Thresholds and kept counts; ``sampled_out`` added to each input file's accounting. The error of a
        rate for a label the input does not have."""
        if self.prep.balance is None:
            return None
        counts = LabelCounts(self.prep.balance)
        for s in self.summaries:
            counts.add(self._labels(s))
        try:
            thresholds = counts.thresholds(lambda: (self._labels(s) for s in self.summaries))
        except InputError as exc:
            return ErrorRecord.of(exc)
        self.report, self.rule = thresholds.report(), thresholds.rule()
        for k, s in enumerate(self.summaries):
            if s.records:
                self.kept[k] = int(self.rule.keep(self._labels(s), self.firsts[k]).sum())
            dropped = s.records - self.kept[k]
            if dropped:
                st = stats[s.unit.input_index]
                st.records_written -= dropped
                st.skip("sampled_out", dropped)
        return None

    @property
    def records(self) -> int:
        return sum(self.kept)

    def _kept(self, k: int, s) -> tuple[np.ndarray, np.ndarray | None]:
        lengths, labels = self._lengths(s), self._labels(s)
        if self.rule is not None and s.records:
            mask = self.rule.keep(labels, self.firsts[k])
            lengths, labels = lengths[mask], labels[mask]
        return lengths, labels

    def _piece(self, k: int, first: int, stop: int, label: int | None):
        """Records ``[first, stop)`` of those unit ``k`` keeps (of ``label``, when not None)."""
        s = self.summaries[k]
        return self.job.piece(s, first, stop, self.base, keep=self.rule, index0=self.firsts[k], label=label)

    # -- the plan --------------------------------------------------------------------------------------
    def plan(self, inputs: tuple, options: dict, extra: dict) -> SetPlan:
        options = {**options, **self.prep.to_json()}
        extra = dict(extra)
        if self.report is not None:
            extra["balance"] = self.report
        if self.prep.shuffle is not None:
            return self._shuffled(inputs, options, extra)
        limit, split = self.job.output.shard_size, self.prep.split_by_label
        cuts = PartCuts(limit, split)
        runs: dict[int, list[tuple[int, int, int]]] = {}  # part -> (summary, first part ordinal, records)
        for k, s in enumerate(self.summaries):
            if not self.kept[k]:
                continue
            lengths, labels = self._kept(k, s)
            before = {b: p.cutter.records for b, p in cuts.parts.items()}
            cuts.add(lengths, labels)
            for b, p in cuts.parts.items():
                n = p.cutter.records - before.get(b, 0)
                if n:
                    runs.setdefault(b, []).append((k, p.cutter.records - n, n))
        shards, parts = [], []
        for b in (cuts.order() if split else list(cuts.parts)):
            ranges, starts = cuts.parts[b].cutter.ranges(), [r[1] for r in runs[b]]
            for a, e in ranges:
                pieces = self._pieces(runs[b], starts, a, e, b if split else None)
                shards.append(ShardSpec(len(shards), e - a, pieces, first=a))
            parts.append(len(ranges))
        named = tuple(zip(cuts.names(), parts)) if split else ()
        return SetPlan(tuple(shards), cuts.records, inputs, options, extra, parts=named)

    def _pieces(self, runs: list[tuple[int, int, int]], starts: list[int], a: int, e: int, label: int | None
                ) -> tuple:
        """The pieces of part ordinals ``[a, e)`` (``runs``: the part's records per unit, ``starts`` their first
        ordinals)."""
        out = []
        for k, first, n in runs[max(bisect.bisect_right(starts, a) - 1, 0):]:
            if first >= e:
                break
            lo, hi = max(a, first), min(e, first + n)
            if hi > lo:
                out.append(self._piece(k, lo - first, hi - first, label))
        return tuple(out)

    def _shuffled(self, inputs: tuple, options: dict, extra: dict) -> SetPlan:
        job = self.job
        with ShuffleLayout(self.prep.shuffle, job.output.shard_size, self.prep.split_by_label,
                           records=self.records, tmp_root=plan_tmp_root(job.area)) as layout:
            for k, s in enumerate(self.summaries):
                if self.kept[k]:
                    layout.add(*self._kept(k, s))
            extra["shuffle"] = layout.finish()
        sources, first = [], 0
        for k, s in enumerate(self.summaries):
            if self.kept[k]:
                sources.append(ShardSpec(len(sources), self.kept[k], (self._piece(k, 0, self.kept[k], None),),
                                         first=first))
                first += self.kept[k]
        shards, tasks, parts = shuffled_plan(job.area, layout, sources)
        return SetPlan(shards, layout.cuts.records, inputs, options, extra, parts=parts, scatter=tasks)
