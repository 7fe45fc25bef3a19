"""A tabular conversion as a two-pass job (``engines.steps`` describes the steps): the one driver every
engine runs — the local engine (``convert.run``), ``run_job`` in this process, Beam and Processing. The job
orchestrates; what differs between runs is data chosen once from the options: the target (``targets``: its
features, widths, id offsets), the id policy (``idpolicy``: vocabulary, ``--vocab-from`` or hashing) and the
memory budget (``budget``: each pass's share of ``--memory``).

* ``units``: a plain local text file larger than ``unit_bytes`` (32 MiB, or what ``convert.run`` sizes for its
  processes) in line-aligned byte ranges of about that size, all of one size (the lines that start in the
  range), every other file whole; in input order.
* ``prepass(unit)``, the pre-pass (counting; when the id policy or ``--numeric minmax`` needs it): count every
  categorical value (the id policy's counters: sorted runs spilled to the temporary area past their share) and
  the numeric columns' min/max, and the unit's lines. Without counting, a file read in several units still
  has a pre-pass that counts its lines (at memory speed): pass 1 numbers every line from its file's start
  (errors, skip reports and ``--negative-rate``'s draw see the same line numbers however a file is cut).
* ``resolve``, the vocabulary step: the id policy's table sizes and vocabulary files (``vocab/<column>.txt``
  under a temporary name beside the shards, sorted lookup tables in the temporary area); the context carries
  them (``ColumnFacts``).
* ``pass1(unit)``, pass 1 (encoding): read the rows again, drop negatives (``--negative-rate``), turn the values
  into ids (the id policy's ``column_ids``, plus the target's offsets) and keep the rows' compact columns
  (``encode.compact_columns``) in chunks in the temporary area with their framed lengths (example layout).
* ``plan``: the first bad row in input order, else the shard cuts (``core.Cutter`` over the lengths; columnar:
  blocks). ``pass2(spec)``, pass 2 (writing): one shard from its chunks, expanded to the target's features."""
from __future__ import annotations

import logging
import os
from dataclasses import dataclass, field, replace
from functools import cached_property
from typing import Iterable, Sequence

import numpy as np

from ..engines.area import RunArea, prepare_run
from ..engines.core import Cutter, ErrorRecord, SetPlan, ShardResult, ShardSpec, write_shard
from ..engines import splitwrite
from ..engines.splitwrite import ShardPart
from ..engines.units import InputFile, Unit, plan_units
from ..prep.options import PrepOptions
from ..shardset.blocks import Blocks, block_lengths
from ..shardset.manifest import InputStats
from ..sources import compression_of, expand_inputs, input_size
from ..storage.objects import is_url
from ..tfrecord.examples import framed_lengths, row_varint_bytes, serialize_batch
from ..util.checks import as_int
from ..util.errors import InputError, TfpipeError
from .budget import MemoryBudget
from .encode import ColumnFacts, compact_columns, keep_mask
from .lookups import clear_lookups
from .options import TabularOptions
from .reader import DEFAULT_BLOCK_BYTES, Span, count_lines, file_format, iter_rows
from .skips import too_many_skipped
from .vocab import CountRun

__all__ = ["TabularJob", "Counts", "Context", "Chunk", "Summary", "UNIT_BYTES", "WHOLE"]

log = logging.getLogger(__name__)

UNIT_BYTES = 32 << 20  # a larger plain text file is read in units of 32 MiB (line-aligned byte ranges)
WHOLE = 1 << 62  # a unit size that reads every file whole
_SLICE_ROWS = 1 << 14  # rows a shard expands to the target's columns and serializes at a time


@dataclass
class Counts:
    unit: Unit
    runs: list[list[CountRun]] = field(default_factory=list)
    mins: list[float] = field(default_factory=list)
    maxs: list[float] = field(default_factory=list)
    lines: int = 0    # the unit's lines (those that start in its byte range; 0 for a whole file)
    error: ErrorRecord | None = None


@dataclass(frozen=True)
class Context:
    """What pass 1 needs from the vocabulary step: the columns' facts, the vocabulary files (column, temporary
    name in the output location, bytes, sha256, distinct values counted), or the error that stops the run."""

    facts: ColumnFacts | None = None
    files: tuple[tuple[str, str, int, str, int], ...] = ()
    error: ErrorRecord | None = None
    firsts: tuple[int, ...] = ()  # each unit's first line number, by unit index (() : every unit from line 1)


@dataclass(frozen=True)
class Chunk:
    """Rows pass 1 kept in the temporary area, compact: ``.label`` and ``.dense`` float32, ``.sparse`` the
    global (DeepFM) or per-column (DLRM) ids as uint32, or int64 when ``wide`` (ids past 2**32 - 1), and
    ``.len`` (example layout) each row's framed record length."""

    key: str
    rows: int
    wide: bool = False


@dataclass
class Summary:
    unit: Unit
    stats: InputStats
    chunks: list[Chunk] = field(default_factory=list)
    negatives_in: int = 0
    negatives_kept: int = 0
    error: ErrorRecord | None = None


@dataclass(frozen=True)
class TabularJob:
    options: TabularOptions
    paths: tuple[str, ...]
    area: RunArea
    block_bytes: int = DEFAULT_BLOCK_BYTES
    chunk_rows: int | None = None  # rows of a pass-1 chunk (None: ``budget.MemoryBudget.chunk_rows``)
    lookup_memory: int | None = None  # bytes of one column's lookup in pass 1 (None: its share of ``--memory``)
    unit_bytes: int = UNIT_BYTES  # a larger plain text file is read in line-aligned byte ranges of this size
    kind = "tabular"

    @classmethod
    def create(cls, inputs, out, options: TabularOptions, *, overwrite: bool = False, run_id: str | None = None,
               prep: PrepOptions | None = None, block_bytes: int = DEFAULT_BLOCK_BYTES,
               chunk_rows: int | None = None, lookup_memory: int | None = None, unit_bytes: int = UNIT_BYTES,
               **storage_options) -> "TabularJob":
        if not isinstance(options, TabularOptions):
            raise TypeError(f"options must be a TabularOptions, got {type(options).__name__}")
        _check_prep(prep)
        files = expand_inputs([inputs] if isinstance(inputs, (str, os.PathLike)) else inputs, out=out)
        options.ids.prepare(options)  # (a missing or mismatched --vocab-from set fails here)
        area = prepare_run(str(out), overwrite=overwrite, run_id=run_id, **storage_options)
        return cls(options, tuple(files), area, block_bytes, chunk_rows, lookup_memory,
                   as_int(unit_bytes, "unit_bytes", minimum=1, must="a positive number of bytes"))

    @classmethod
    def from_files(cls, options: TabularOptions, files: Sequence[str], area: RunArea, *,
                   prep: PrepOptions | None = None, unit_size: int | None = None) -> "TabularJob":
        _check_prep(prep)
        return cls(options, tuple(files), area, unit_bytes=WHOLE)  # (an instance may not hold every file)

    @property
    def needs_prepass(self) -> bool:
        """Counting (the id policy's or ``--numeric minmax``'s), or a file read in several units: their lines."""
        return self.options.needs_prepass or any(not u.whole for u in self._units)

    @property
    def output(self):
        return self.options.output

    @property
    def schema(self):
        s = self.options.schema
        return self.options.target_spec.schema(len(s.numeric), len(s.categorical))

    @property
    def budget(self) -> MemoryBudget:
        return self.options.budget(self.chunk_rows, self.lookup_memory)

    @property
    def rows_per_chunk(self) -> int:
        return self.budget.chunk_rows

    def units(self) -> list[Unit]:
        """A plain local text file larger than ``unit_bytes`` in line-aligned byte ranges of about that size (as
        many as ranges of that size would be, of equal size); every other file (smaller, compressed, Parquet, at
        a URL) whole."""
        return list(self._units)

    @cached_property
    def _units(self) -> tuple[Unit, ...]:
        """``units``, the inputs' sizes looked up once per job (``needs_prepass`` asks too)."""
        if self.unit_bytes >= WHOLE:  # no file looked at
            return tuple(plan_units([InputFile(p, 0, False) for p in self.paths], 1))
        sizes = [input_size(p) for p in self.paths]
        return tuple(plan_units([InputFile(p, n, n > self.unit_bytes and self._splittable(p))
                                 for p, n in zip(self.paths, sizes)], self.unit_bytes, even=True))

    def _splittable(self, path: str) -> bool:
        return (compression_of(path) is None and not is_url(path)
                and file_format(path, self.options.input_format) != "parquet")

    def _rows(self, unit: Unit, stats: InputStats, span: Span | None = None):
        o = self.options
        return iter_rows(unit.path, o.schema, stats, o.output.on_error, self.block_bytes, fmt=o.input_format,
                         pad=o.pad_short_rows, span=span)

    # -- the pre-pass (counting) -------------------------------------------------------------------------
    def prepass(self, unit: Unit) -> Counts:
        o, s = self.options, self.options.schema
        if not o.needs_prepass:  # only the unit's lines: where the next unit's line numbers start
            return Counts(unit, lines=0 if unit.whole else count_lines(unit.path, unit.start, unit.stop))
        span = None if unit.whole else Span(unit.start, unit.stop)
        counters = o.ids.counters(self.area, unit.key, len(s.categorical), self.budget)
        lo = np.full(len(s.numeric), np.iinfo(np.int64).max, np.int64)
        hi = np.zeros(len(s.numeric), np.int64)
        seen = False
        out = Counts(unit)
        try:
            for rows in self._rows(unit, InputStats(unit.path), span):
                for j, c in enumerate(counters):
                    key = rows.key(j)
                    c.add(rows.cat(j) if key is None else None, key)
                if len(rows) and rows.nums.shape[1]:
                    v = np.where(rows.missing | (rows.nums < 0), 0, rows.nums)
                    hi = np.maximum(hi, v.max(axis=0))
                    lo = np.minimum(lo, v.min(axis=0))
                    seen = True
        except InputError as exc:
            out.error = ErrorRecord.of(exc)
            return out
        out.runs = [c.finish() for c in counters]
        out.lines = 0 if span is None else span.lines
        out.mins = lo.astype(float).tolist() if seen else []  # a unit without rows bounds nothing
        out.maxs = hi.astype(float).tolist() if seen else []
        return out

    # -- the vocabulary step -----------------------------------------------------------------------------
    def resolve(self, prepasses: Sequence[Counts] = (), pmap=None) -> Context:
        """The vocabulary step (its columns on ``pmap`` where the engine gives one)."""
        o, k = self.options, len(self.options.schema.numeric)
        counts = sorted(prepasses, key=lambda p: p.unit.index)
        firsts, before = [], {}
        for p in counts:  # a unit's lines are numbered after those of its file's earlier units
            i = p.unit.input_index
            firsts.append(1 + before.get(i, 0))
            if p.error is not None:
                e = p.error
                return Context(error=replace(e, line=e.line + firsts[-1] - 1) if e.line is not None else e)
            before[i] = before.get(i, 0) + p.lines
        if not o.needs_prepass:
            counts = []  # (line counts only)
        mins = tuple(min([p.mins[j] for p in counts if p.mins], default=0.0) for j in range(k))
        maxs = tuple(max([p.maxs[j] for p in counts if p.maxs], default=0.0) for j in range(k))
        ctx = Context(*o.ids.resolve(self.area, o, self.budget, counts, mins, maxs, pmap))
        return replace(ctx, firsts=tuple(firsts)) if any(f > 1 for f in firsts) else ctx

    # -- pass 1 (encoding) ------------------------------------------------------------------------------
    def pass1(self, unit: Unit, ctx: Context | None = None) -> Summary:
        o, s = self.options, self.options.schema
        out = Summary(unit, InputStats(unit.path))
        if ctx is None or ctx.error is not None:
            return out
        ids = o.ids.column_ids(self.area, s.categorical, ctx.facts, self.budget)
        wide = o.target_spec.top_id(ctx.facts, len(s.numeric)) >= 1 << 32  # uint32 ids, or int64 past 2**32 - 1
        offsets = o.target_spec.offsets(ctx.facts, len(s.numeric))
        span = None if unit.whole else Span(unit.start, unit.stop, ctx.firsts[unit.index] if ctx.firsts else 1)
        chunk_rows = self.rows_per_chunk
        parts: list[dict[str, np.ndarray]] = []
        pending = 0
        try:
            for rows in self._rows(unit, out.stats, span):
                keep = keep_mask(rows.labels, rows.lines, unit.input_index, o.seed, o.negative_rate)
                neg = rows.labels == 0
                out.negatives_in += int(neg.sum())
                out.negatives_kept += int((neg & keep).sum())
                dropped = int((~keep).sum())
                if dropped:
                    out.stats.skip("sampled_out", dropped)
                    rows = rows.take(keep)
                    if not len(rows):  # every row of the block sampled out
                        continue
                cols = compact_columns(rows, o.numeric, ctx.facts, self._sparse(rows, ids, offsets, wide))
                if not self.output.columnar:
                    cols["len"] = self._lengths(cols)
                out.stats.records_written += len(rows)
                parts.append(cols)
                pending += len(rows)
                if pending >= chunk_rows:
                    self._flush(out, parts, wide)
                    parts, pending = [], 0
        except InputError as exc:
            out.error = ErrorRecord.of(exc)
            return out
        if pending:
            self._flush(out, parts, wide)
        return out

    @staticmethod
    def _sparse(rows, ids: list, offsets: np.ndarray, wide: bool) -> np.ndarray:
        """A block's compact ids, (n, categorical) uint32 (int64 when ``wide``): each column's ids (``ids``: the
        id policy's, per column) plus its ``offsets``, written column by column in place."""
        out = np.empty((len(rows), rows.ncat), np.int64 if wide else np.uint32)
        for j in range(rows.ncat):
            ids[j].put(rows, j, out, j, int(offsets[j]))
        return out

    def _flush(self, out: Summary, parts: list[dict[str, np.ndarray]], wide: bool) -> None:
        """One chunk from the blocks' compact columns: each file written block after block (no joined copy)."""
        chunk = Chunk(f"{out.unit.key}-c{len(out.chunks):06d}", sum(len(p["label"]) for p in parts), wide)
        for k in parts[0]:  # flat: a column of no width (a schema without numeric columns) is no bytes
            self.area.put_arrays(f"{chunk.key}.{k}", [p[k].reshape(-1) for p in parts])
        out.chunks.append(chunk)

    def _lengths(self, cols: dict[str, np.ndarray]) -> np.ndarray:
        """The framed length of each row's record in the target's example layout, from its compact form."""
        n, (k, c) = len(cols["label"]), (cols["dense"].shape[1], cols["sparse"].shape[1])
        payloads = self.options.target_spec.payloads(n, k, c, row_varint_bytes(cols["sparse"]))
        return framed_lengths(self.schema, payloads)

    def _load(self, chunk: Chunk, lo: int, hi: int) -> dict[str, np.ndarray]:
        """Rows ``[lo, hi)`` of a chunk in the target's columns (ranged reads: a shard reads only its rows; a
        chunk cut short is named)."""
        s = self.options.schema
        compact = {}
        for name, dtype, width in (("label", np.float32, 0), ("dense", np.float32, len(s.numeric)),
                                   ("sparse", np.int64 if chunk.wide else np.uint32, len(s.categorical))):
            size = np.dtype(dtype).itemsize * (width if name != "label" else 1)
            a = np.frombuffer(self.area.get_range(f"{chunk.key}.{name}", lo * size, hi * size), dtype)
            compact[name] = a if name == "label" else a.reshape(hi - lo, width)
        return self.options.target_spec.expand(compact)

    # -- the plan and pass 2 (writing) --------------------------------------------------------------------
    def plan(self, summaries: Sequence[Summary], sizes: Sequence = (), ctx: Context | None = None) -> SetPlan:
        clear_lookups()  # pass 1 is done: the shards need no vocabulary
        if ctx is not None and ctx.error is not None:
            return SetPlan.failed(ctx.error)
        summaries = sorted(summaries, key=lambda s: s.unit.index)
        for s in summaries:
            if s.error is not None:
                return SetPlan.failed(s.error)
        stats = [InputStats(p) for p in self.paths]  # a file's accounting: its units' merged
        for s in summaries:
            stats[s.unit.input_index].merge(s.stats)
        kept_too_little = too_many_skipped(stats, self.options.max_skip_fraction)
        if kept_too_little is not None:
            return SetPlan.failed(kept_too_little)
        chunks, at = [], 0
        for s in summaries:
            for c in s.chunks:
                chunks.append((at, c))
                at += c.rows
        total = at
        layout = self.record_layout(ctx.facts)
        if layout.columnar:
            ranges = _block_shards(total, self.schema, layout, self.output.shard_size)
        else:
            cutter = Cutter(self.output.shard_size)
            for _, c in chunks:
                cutter.add(self._lengths_of(c, 0, c.rows))
            ranges = cutter.ranges()
        shards = tuple(ShardSpec(k, b - a, tuple((off, c) for off, c in chunks if off < b and off + c.rows > a),
                                 first=a, layout=layout if layout.columnar else None)
                       for k, (a, b) in enumerate(ranges))
        extra = self._extra(summaries, ctx)
        return SetPlan(shards, total, tuple(stats), self.options.to_json(), extra,
                    layout=layout.to_json(),
                    files=tuple((tmp, f"vocab/{name}.txt", n) for name, tmp, n, _, _ in ctx.files))

    def record_layout(self, facts: ColumnFacts):
        target = self.options.target_spec
        out = self.options.layout.record_layout(
            target.stored(self.schema, target.top_id(facts, len(self.options.schema.numeric))))
        out.check_schema(self.schema)
        return out

    def _extra(self, summaries: Sequence[Summary], ctx: Context) -> dict:
        o, s, t = self.options, self.options.schema, ctx.facts
        files = ctx.files or (None,) * len(s.categorical)  # (an id policy without files)
        # in the schema's order: DeepFM's offsets are the running sum of these table sizes
        columns = [o.ids.entry(name, t.sizes[j], files[j]) for j, name in enumerate(s.categorical)]
        neg_in = sum(x.negatives_in for x in summaries)
        neg_kept = sum(x.negatives_kept for x in summaries)
        extra = o.target_spec.extra(t, len(s.numeric)) | {
            "categorical": columns, "negatives_in": neg_in, "negatives_kept": neg_kept,
            "negative_kept_fraction": (neg_kept / neg_in) if neg_in else 1.0}
        if o.numeric == "minmax":
            extra["minmax"] = {n: [t.mins[j], t.maxs[j]] for j, n in enumerate(s.numeric)}
        extra["files"] = [{"name": e["vocab"], "bytes": e["bytes"], "sha256": e["sha256"]}
                          for e in columns if "vocab" in e]
        return extra

    def pass2(self, spec: ShardSpec) -> ShardResult:
        cols = self._columns(spec)
        if self.output.columnar:
            return write_shard(self.area, self.output, spec, Blocks(self.schema, spec.layout).framed_rows(cols))
        return write_shard(self.area, self.output, spec,
                           ((f, int(n.size)) for f, n in (serialize_batch(self.schema, c) for c in cols)))

    # -- pass 2 of a large shard in parts (``engines.splitwrite``) ---------------------------------------------
    def split_shard(self, spec: ShardSpec, processes: int) -> list[ShardPart]:
        """An Example-layout shard of at least ``SPLIT_MIN_BYTES``, uncompressed and local, in ``processes``
        parts of about equal bytes (each row's framed length is pass 1's); ``[]``: written whole."""
        if spec.layout is not None or processes < 2 or not splitwrite.can_split(self.area, self.output):
            return []
        lengths = np.concatenate([self._lengths_of(chunk, lo, hi) for lo, hi, chunk in self._ranges(spec)]
                                 or [np.zeros(0, np.int64)])
        if int(lengths.sum()) < splitwrite.SPLIT_MIN_BYTES:
            return []
        return splitwrite.open_parts(self.area, self.output, spec, splitwrite.cut_parts(lengths, processes))

    def write_part(self, part: ShardPart) -> int:
        return splitwrite.write_part(part, ((f, int(n.size)) for f, n in
                                            (serialize_batch(self.schema, c) for c in self._columns(part.spec))))

    def join_shard(self, parts: Sequence[ShardPart]) -> ShardResult:
        return splitwrite.join_parts(self.area, list(parts))

    def _lengths_of(self, chunk: Chunk, lo: int, hi: int) -> np.ndarray:
        lengths = self.area.get_array(f"{chunk.key}.len", np.int64)
        if lengths.size != chunk.rows:
            raise TfpipeError(f"temporary lengths {chunk.key} of run {self.area.run_id} are damaged")
        return lengths[lo:hi]

    def _ranges(self, spec: ShardSpec) -> Iterable[tuple[int, int, Chunk]]:
        """``(lo, hi, chunk)``: the rows of each chunk the shard's records ``[first, first + records)`` take."""
        a, b = spec.first, spec.first + spec.records
        for off, chunk in spec.pieces:
            lo, hi = max(a - off, 0), min(b - off, chunk.rows)
            if lo < hi:
                yield lo, hi, chunk

    def _columns(self, spec: ShardSpec) -> Iterable[dict[str, np.ndarray]]:
        for lo, hi, chunk in self._ranges(spec):
            for at in range(lo, hi, _SLICE_ROWS):  # the target's columns a slice at a time: bounded memory
                yield self._load(chunk, at, min(at + _SLICE_ROWS, hi))


def _block_shards(rows: int, schema, layout, shard_size: int) -> list[tuple[int, int]]:
    """Shards of ``rows`` rows in blocks: a shard closed before a block would cross ``shard_size`` (the local
    writer's rule), so every shard starts on a block boundary."""
    cutter = Cutter(shard_size)
    cutter.add(block_lengths(rows, schema, layout))
    br = layout.block_rows
    return [(a * br, min(b * br, rows)) for a, b in cutter.ranges()]


def _check_prep(prep: PrepOptions | None) -> None:
    if prep is not None and prep.active:
        raise ValueError(f"{prep.describe()} does not apply to convert tabular (rows are written in input order)")
