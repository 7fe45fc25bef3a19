"""LibSVM as a two-pass job: the steps an engine runs, each a function of plain picklable values.

* ``units``: plain files in line-aligned byte ranges, compressed files whole (driver).
* ``prepass(unit)`` (only with ``--index-base auto``): does the unit hold an index 0? ``resolve`` decides the
  base over all units in input order, exactly as the local pre-pass (first index 0 -> zero-based; an
  unreadable input met before any index 0 is the error).
* ``pass1(unit, ctx)``: parse, compute each record's framed length without serializing, write the lengths
  (int32) to the temporary area; return a ``LibsvmSummary`` (counts, bad lines with unit-local numbers).
* ``plan(summaries)``: accounting merged per input file, the first bad line raised in input order (line
  numbers shifted by the lines of the file's earlier units), shard cuts by ``core.Cutter`` (no size step:
  pass 1 knows every record's length).
* ``pass2(spec)``: re-parse the units of one shard, serialize exactly its records, write it.

With write-time preparation (``prep``: ``--balance``, ``--shuffle``, ``--split-by-label``) pass 1 also keeps
each unit's labels, the plan is ``jobprep.PreparedUnits``'s, and with ``--shuffle`` a scatter step runs
between the plan and pass 2 (``scatter(task)``, see ``engines.scatter``).

With ``--layout columnar`` (``output.layout``) pass 1 keeps each feature's value range instead of the lengths,
the plan chooses the stored types from the whole set's ranges and cuts shards of whole blocks
(``shardset.blocks``), and pass 2 packs each shard's rows into blocks (the layout travels in ``ShardSpec``
and ``SetPlan``); write-time preparation is refused with it.

Parsing and serialization are the local converter's (``libsvm.block.parse``, ``tfrecord.examples``), so the
bytes are the same.
"""
from __future__ import annotations

import bisect
import logging
import os
from dataclasses import dataclass
from typing import Iterable, Iterator, Sequence

import numpy as np

from ..engines.area import RunArea, prepare_run
from ..engines.core import Cutter, ErrorRecord, SetPlan, ShardResult, ShardSpec, write_shard
from ..engines.scatter import (
    ScatterResult,
    ScatterTask,
    scatter,
    shard_batches,
)
from ..engines.units import DEFAULT_UNIT_BYTES, Unit, input_files, plan_units, read_unit
from ..prep.balance import Thresholds
from ..prep.labels import label_bits
from ..prep.options import PrepOptions
from ..prep.records import take_records
from ..shardset.blocks import (
    Blocks,
    choose_layout,
    column_ranges,
    merge_ranges,
    ranges_from_json,
    ranges_json,
    shard_row_ranges,
)
from ..shardset.manifest import MAX_EXAMPLES, InputStats
from ..sources import expand_inputs, iter_blocks
from ..tfrecord.examples import column_payloads, framed_lengths
from ..util.checks import as_int
from ..util.errors import InputError, TfpipeError
from .block import has_zero_index, parse, serialize_parsed
from .jobprep import PreparedUnits
from .jobvalues import LibsvmContext, LibsvmPiece, LibsvmPrepass, LibsvmSummary
from .options import LibsvmOptions
from .reasons import BadLine, first_bad_message
from .sparse import SparseBlock, row_stats
from .totals import DEFAULT_BLOCK_BYTES, RowTotals, account, empty_input, log_totals

__all__ = ["LibsvmJob", "LibsvmContext", "LibsvmPrepass", "LibsvmSummary", "LibsvmPiece"]

log = logging.getLogger(__name__)

PREP_COLUMNAR = ("{} with --layout columnar is not supported: convert with --layout example and the preparation, "
                 "then re-lay the set out in its prepared order with `tfpipe reshard SET --out NEW --layout "
                 "columnar`")


def _check_sizes(unit_size, block_bytes) -> tuple[int, int]:
    return (as_int(unit_size, "unit_size", minimum=1, must="a positive number of bytes"),
            as_int(block_bytes, "block_bytes", minimum=1, must="a positive number of bytes"))


def _check_prep(prep: PrepOptions | None, options: LibsvmOptions) -> None:
    if prep is not None and prep.needs_labels and options.multilabel:
        raise ValueError(f"{prep.describe()} needs one label per record: --multilabel records have lists")
    if prep is not None and prep.active and options.output.columnar:
        raise ValueError(PREP_COLUMNAR.format(prep.describe()))


def _labels(pb) -> np.ndarray | None:
    """One float32 label per record, or None for multi-label lists (as the local workers hand them on)."""
    return None if getattr(pb, "label_splits", None) is not None else pb.label


def _bad_error(bad: list[BadLine], skipped: dict[str, int], written: int, path: str) -> ErrorRecord:
    """The local converter's error for a unit's first bad line (``--on-error raise``)."""
    return ErrorRecord(first_bad_message(bad, skipped, written), path, bad[0].line, reason=bad[0].reason)


@dataclass(frozen=True)
class LibsvmJob:
    """One LibSVM conversion as independent steps (see the module docstring); a plain, picklable value."""

    options: LibsvmOptions
    paths: tuple[str, ...]
    area: RunArea
    unit_size: int = DEFAULT_UNIT_BYTES
    block_bytes: int = DEFAULT_BLOCK_BYTES
    prep: PrepOptions | None = None
    kind = "libsvm"

    def __post_init__(self):
        if not isinstance(self.options, LibsvmOptions):
            raise TypeError(f"options must be a LibsvmOptions, got {type(self.options).__name__}")
        object.__setattr__(self, "paths", tuple(self.paths))
        sizes = _check_sizes(self.unit_size, self.block_bytes)
        object.__setattr__(self, "unit_size", sizes[0])
        object.__setattr__(self, "block_bytes", sizes[1])
        if self.prep is not None and not self.prep.active:
            object.__setattr__(self, "prep", None)
        _check_prep(self.prep, self.options)

    @classmethod
    def create(cls, inputs: str | os.PathLike | Iterable[str | os.PathLike], out: str | os.PathLike,
               options: LibsvmOptions, *, overwrite: bool = False, unit_size: int = DEFAULT_UNIT_BYTES,
               block_bytes: int = DEFAULT_BLOCK_BYTES, run_id: str | None = None, prep: PrepOptions | None = None,
               **storage_options) -> "LibsvmJob":
        """The driver's set-up, in the local converter's order: expand the inputs, then check and prepare the
        output location (refused if not empty unless ``overwrite``) and the run's temporary area. ``prep``:
        write-time preparation, as the local converter's."""
        if not isinstance(options, LibsvmOptions):
            raise TypeError(f"options must be a LibsvmOptions, got {type(options).__name__}")
        unit_size, block_bytes = _check_sizes(unit_size, block_bytes)
        _check_prep(prep, options)
        paths = expand_inputs([inputs] if isinstance(inputs, (str, os.PathLike)) else inputs, out=out)
        area = prepare_run(str(out), overwrite=overwrite, run_id=run_id, **storage_options)
        return cls(options, tuple(paths), area, unit_size, block_bytes, prep)

    @classmethod
    def from_files(cls, options: LibsvmOptions, files: Sequence[str], area: RunArea, *,
                   prep: PrepOptions | None = None, unit_size: int | None = None) -> "LibsvmJob":
        """The job on inputs already expanded and an area already prepared (a Processing instance)."""
        return cls(options, tuple(files), area, unit_size or DEFAULT_UNIT_BYTES, prep=prep)

    @property
    def output(self):
        return self.options.output

    @property
    def schema(self):
        return self.options.schema

    @property
    def needs_prepass(self) -> bool:
        return self.options.index_base == "auto"

    def units(self) -> list[Unit]:
        return plan_units(input_files(self.paths), self.unit_size)

    # -- index-base pre-pass -----------------------------------------------------------------------
    def prepass(self, unit: Unit) -> LibsvmPrepass:
        try:
            if not unit.whole:
                return LibsvmPrepass(unit.index, has_zero_index(read_unit(unit)))
            for block, _, _ in iter_blocks(unit.path, self.block_bytes):
                if has_zero_index(block):
                    return LibsvmPrepass(unit.index, True)
            return LibsvmPrepass(unit.index)
        except InputError as exc:
            return LibsvmPrepass(unit.index, error=ErrorRecord.of(exc))

    def resolve(self, prepasses: Sequence[LibsvmPrepass], pmap=None) -> LibsvmContext:
        if not self.needs_prepass:
            return LibsvmContext(self.options.index_base)
        for p in sorted(prepasses, key=lambda p: p.unit):
            if p.zero:
                log.info("index base auto: index 0 found (unit %d) -> zero-based", p.unit)
                return LibsvmContext(0)
            if p.error is not None:
                return LibsvmContext(None, p.error)
        log.info("index base auto: no index 0 in %d input(s) -> one-based", len(self.paths))
        return LibsvmContext(1)

    # -- pass 1 ---------------------------------------------------------------------------------------
    def _lengths(self, pb) -> np.ndarray:
        if pb.n == 0:
            return np.zeros(0, np.int32)
        if isinstance(pb, SparseBlock):  # variable-length rows: the serializer's own lengths
            return serialize_parsed(pb, self.options.keys)[1].astype(np.int32)
        lk, ik, vk = self.options.keys
        cols = {lk: pb.label, ik: pb.ids, vk: pb.values}
        return framed_lengths(self.schema, column_payloads(self.schema, cols)).astype(np.int32)

    def _columns(self, pb, lo: int = 0, hi: int | None = None) -> dict[str, np.ndarray]:
        """A fixed-width block's rows ``[lo, hi)`` as columns by feature name."""
        lk, ik, vk = self.options.keys
        return {lk: pb.label[lo:hi], ik: pb.ids[lo:hi], vk: pb.values[lo:hi]}

    def _blocks(self, unit: Unit) -> Iterator[tuple[bytes, int]]:
        if unit.whole:
            for block, first_line, _ in iter_blocks(unit.path, self.block_bytes):
                yield block, first_line
        else:
            yield read_unit(unit), 1

    def pass1(self, unit: Unit, ctx: LibsvmContext) -> LibsvmSummary:
        s = LibsvmSummary(unit)
        if ctx.error is not None:
            return s  # the run ends at the planner: nothing to do
        popts = self.options.parse_options(ctx.base)
        stop_on_bad = self.output.on_error == "raise"
        lengths, blocks, labels = [], [], []
        rows = RowTotals() if self.options.sparse else None
        columnar = self.output.columnar
        ranges = []
        try:
            for block, first_line in self._blocks(unit):
                pb = parse(block, popts, first_line, MAX_EXAMPLES)
                s.lines += pb.lines
                s.blank += pb.blank
                s.fallback += pb.fallback_lines
                s.unordered += getattr(pb, "unordered", 0)
                for k, v in pb.skipped.items():
                    s.skipped[k] = s.skipped.get(k, 0) + v
                s.bad.extend(pb.bad[:MAX_EXAMPLES - len(s.bad)])
                if stop_on_bad and pb.bad:
                    s.records += pb.n  # (the error's field-size hint asks whether any line was valid)
                    break  # the run stops at this line
                ln = np.zeros(0, np.int32) if columnar else self._lengths(pb)
                if columnar:
                    ranges.append(column_ranges(self._columns(pb)))
                if rows is not None:
                    rows.add(row_stats(pb))
                lengths.append(ln)
                blocks.append(pb.n)
                if self.keeps_labels:
                    labels.append(np.asarray(_labels(pb), dtype=np.float32))
                s.records += pb.n
                s.nbytes += int(ln.sum(dtype=np.int64))
        except InputError as exc:
            s.error = ErrorRecord.of(exc)
        s.blocks = tuple(blocks) if unit.whole else ()
        s.sparse = rows.stats() if rows is not None else None
        s.ranges = ranges_json(merge_ranges(ranges)) if columnar else None
        if s.records and s.error is None and not (stop_on_bad and s.bad) and not columnar:
            self.area.put_array(f"{unit.key}.len", np.concatenate(lengths))
            if self.keeps_labels:
                self.area.put_array(f"{unit.key}.lab", np.concatenate(labels))
        return s

    @property
    def keeps_labels(self) -> bool:
        """Pass 1 keeps each unit's labels: preparation needs them (balance, split, the shuffle's label mix)."""
        return self.prep is not None and not self.options.multilabel

    # -- planning -------------------------------------------------------------------------------------
    def plan(self, summaries: Sequence[LibsvmSummary], sizes: Sequence = (), ctx: LibsvmContext | None = None
             ) -> SetPlan:
        if ctx is not None and ctx.error is not None:
            return SetPlan.failed(ctx.error)
        summaries = sorted(summaries, key=lambda s: s.unit.index)
        raise_on_bad = self.output.on_error == "raise"
        stats = [InputStats(p) for p in self.paths]
        lines_before = [0] * len(self.paths)
        cutter = Cutter(self.output.shard_size)
        firsts, fallback, total = [], 0, 0
        rows = RowTotals() if self.options.sparse else None
        for s in summaries:
            i, path = s.unit.input_index, s.unit.path
            shift = lines_before[i]
            bad = [BadLine(b.line + shift, b.reason, b.token) for b in s.bad] if shift else s.bad
            if raise_on_bad and bad:
                return SetPlan.failed(_bad_error(bad, s.skipped, s.records, path))
            if s.error is not None:
                return SetPlan.failed(s.error)
            account(stats[i], s.records, s.skipped, s.blank, bad, path, unordered=s.unordered)
            lines_before[i] += s.lines
            fallback += s.fallback
            if rows is not None:
                rows.add(s.sparse)
            firsts.append(total)  # the global index of the unit's first record
            total += s.records
            if self.prep is None and not self.output.columnar and not cutter.add_run(s.records, s.nbytes):
                cutter.add(self.area.get_array(f"{s.unit.key}.len", np.int32))
        base = ctx.base if ctx is not None else self.options.index_base
        prepared = PreparedUnits(self, summaries, firsts, base) if self.prep is not None else None
        if prepared is not None and (error := prepared.balance(stats)) is not None:
            return SetPlan.failed(error)
        read = sum(st.records_read for st in stats)
        blank = sum(st.blank_lines for st in stats)
        if (prepared.records if prepared is not None else total) == 0:
            return SetPlan.failed(ErrorRecord.of(empty_input(stats, self.paths[0] if len(self.paths) == 1 else None)))
        log_totals(stats, read, fallback)
        options = self.options.to_json()
        options["index_base_used"] = base
        options["ids"] = self.options.ids_json(base)
        extra = {"index_base": base, "blank_lines": blank, **(rows.extra() if rows is not None else {})}
        if prepared is not None:
            return prepared.plan(tuple(stats), options, extra)
        layout = None
        if self.output.columnar:
            layout = choose_layout(self.schema, merge_ranges(ranges_from_json(s.ranges) for s in summaries),
                                   self.output.block_rows)
            cuts = shard_row_ranges(total, self.schema, layout, self.output.shard_size)
        else:
            cuts = cutter.ranges()
        shards = tuple(ShardSpec(k, b - a, _pieces(summaries, firsts, a, b, base), first=a, layout=layout)
                       for k, (a, b) in enumerate(cuts))
        return SetPlan(shards, total, tuple(stats), options, extra, layout=layout.to_json() if layout else None)

    def piece(self, s: LibsvmSummary, first: int, stop: int, base: int, *, keep: Thresholds | None = None,
              index0: int = 0, label: int | None = None) -> LibsvmPiece:
        """A piece of the unit of summary ``s`` (the prepared plan's way to name records)."""
        return LibsvmPiece(s.unit, first, stop, s.records, base, s.blocks, keep, index0, label)

    # -- scatter (--shuffle) --------------------------------------------------------------------------
    def scatter(self, task: ScatterTask) -> ScatterResult:
        """Write one unit's kept records to the shuffle's buckets (``engines.scatter``)."""
        return scatter(self.area, task, (b for piece in task.spec.pieces for b in self._batches(piece)))

    # -- pass 2 ---------------------------------------------------------------------------------------
    def pass2(self, spec: ShardSpec) -> ShardResult:
        if spec.layout is not None:
            return write_shard(self.area, self.output, spec, self._packed(spec))
        return write_shard(self.area, self.output, spec, shard_batches(
            self.area, spec, lambda: (b[:2] for piece in spec.pieces for b in self._batches(piece))))

    def _packed(self, spec: ShardSpec) -> Iterator[tuple[np.ndarray, int]]:
        """A columnar shard's blocks, framed, as ``(bytes, rows)``."""
        yield from Blocks(self.schema, spec.layout).framed_rows(
            cols for piece in spec.pieces for cols in self._batches(piece, columns=True))

    def _batches(self, piece: LibsvmPiece, columns: bool = False
                 ) -> Iterator[tuple[np.ndarray, np.ndarray, np.ndarray | None]]:
        """The piece's records (framed bytes, framed lengths, labels), block by block; with ``columns`` (an
        unfiltered piece) its rows as column arrays instead."""
        popts = self.options.parse_options(piece.base)
        counts = piece.blocks if piece.unit.whole else (piece.count,)
        at = got = 0  # records of the unit before this block; of them, records the filter selected
        for (block, first_line), n in zip(self._blocks(piece.unit), counts):
            if not piece.filtered:
                lo, hi = max(piece.first - at, 0), min(piece.stop - at, n)
                if hi <= lo:
                    at += n
                    if at >= piece.stop:
                        break
                    continue  # a block before the piece: not parsed
            pb = parse(block, popts, first_line, 1)
            if pb.n != n:
                raise TfpipeError(f"{piece.unit.path}: {pb.n} records where pass 1 found {n} (did the input "
                                  "change during the run?)")
            labels = _labels(pb)
            sel = None
            if piece.filtered:
                mask = np.ones(n, dtype=bool)
                if piece.keep is not None:
                    mask &= piece.keep.keep(labels, piece.index0 + at)
                if piece.label is not None:
                    mask &= label_bits(labels) == piece.label
                sel = np.flatnonzero(mask)
                lo, hi = max(piece.first - got, 0), min(piece.stop - got, sel.size)
                got += sel.size
            at += n
            if hi > lo and columns:
                yield self._columns(pb, lo, hi)
            elif hi > lo:
                framed, lengths = serialize_parsed(pb, self.options.keys)
                if sel is not None:
                    pick = sel[lo:hi]
                    framed, lengths = take_records(framed, lengths, pick)
                    labels = None if labels is None else labels[pick]
                else:
                    offsets = np.concatenate([[0], np.cumsum(lengths)])
                    framed, lengths = framed[int(offsets[lo]):int(offsets[hi])], lengths[lo:hi]
                    labels = None if labels is None else labels[lo:hi]
                yield framed, lengths, labels
            if (got if piece.filtered else at) >= piece.stop:
                break


def _pieces(summaries: list[LibsvmSummary], firsts: list[int], a: int, b: int, base: int) -> tuple:
    """The units (and their record ranges) that hold global records ``[a, b)``."""
    out = []
    k = max(bisect.bisect_right(firsts, a) - 1, 0)
    while k < len(summaries) and firsts[k] < b:
        s = summaries[k]
        lo, hi = max(a, firsts[k]), min(b, firsts[k] + s.records)
        if hi > lo:
            out.append(LibsvmPiece(s.unit, lo - firsts[k], hi - firsts[k], s.records, base, s.blocks))
        k += 1
    return tuple(out)
