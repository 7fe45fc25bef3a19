"""Text as a two-pass job: the steps an engine runs, each a function of plain picklable values.

* ``units``: one per input file (documents, line numbers and accounting are read file by file).
* ``pass1(unit)``: read and tokenize the file **once** (``text.readers.iter_documents`` + the tokenizer), write
  its token ids (uint16 when the vocabulary fits, else uint32) and document lengths to the temporary area in
  chunks of about ``chunk_tokens`` tokens; return a ``TextSummary`` (accounting, subsets, chunk sizes).
* ``size_tasks(summaries)`` / ``sizes(task)``: every chunk, knowing its stream offset (prefix sums over the
  summaries), computes the payload bytes of the windows it overlaps (``windows``).
* ``plan(summaries, sizes)``: the first bad record raised in input order, partial payloads of windows that
  span chunks added, framed lengths (``tfrecord.examples.framed_lengths``) cut by ``core.Cutter``.
* ``pass2(spec)``: read the chunks of one shard, cut the same windows as ``text.packing`` (packed: carrying
  across chunks; ``no_cross_doc``: ``pack_documents``), serialize and write them.

With ``--shuffle`` (``prep``; the windows are shuffled after packing, as locally) the plan orders and cuts the
windows (``prepplan.ShuffleLayout``), each chunk's complete windows are a scatter source (``scatter(task)``,
``engines.scatter``) and pass 2 assembles each shard from the buckets.
"""
from __future__ import annotations

import dataclasses
import logging
import os
import shutil
import tempfile
from dataclasses import dataclass, field
from typing import Iterable, Iterator, Sequence

import numpy as np

from ..engines.area import RunArea, prepare_run
from ..engines.core import Cutter, ErrorRecord, SetPlan, ShardResult, ShardSpec, write_shard
from ..engines.prepplan import ShuffleLayout
from ..engines.scatter import (
    ScatterResult,
    ScatterTask,
    plan_tmp_root,
    scatter,
    shard_batches,
    shuffled_plan,
)
from ..engines.units import InputFile, Unit, plan_units
from ..prep.options import PrepOptions
from ..shardset.blocks import Blocks
from ..shardset.manifest import InputStats
from ..sources import expand_inputs
from ..tfrecord.examples import framed_lengths, serialize_batch, varint_lengths
from ..util.checks import as_int
from ..util.errors import InputError, TfpipeError
from .blocks import COLUMNAR_SHUFFLE, block_shards, text_layout
from .convert import count_subsets
from .options import FEATURE, TextOptions, text_schema
from .packing import PackSpec, insert_eod
from .readers import (
    DEFAULT_BATCH_CHARS,
    INPUT_SUFFIXES,
    format_of,
    iter_documents,
)
from .tokenizers import TokenizerInfo, load_tokenizer
from .windows import doc_windows, document_payloads, document_windows, packed_windows, stream_payloads, window_count

__all__ = ["TextJob", "TextSummary", "TextChunk", "SizeTask", "DEFAULT_CHUNK_TOKENS"]

log = logging.getLogger(__name__)

DEFAULT_CHUNK_TOKENS = 4 << 20  # token ids per temporary chunk (pass 2 and the size step hold one at a time)
_TOKENIZERS: dict[tuple, object] = {}  # per process


@dataclass(frozen=True)
class TextChunk:
    """``docs`` documents with ``tokens`` ids (EOD not included) stored under ``key`` in the temporary area;
    ``windows``: their window count in ``no_cross_doc`` mode (0 in packed mode)."""

    key: str
    docs: int
    tokens: int
    windows: int = 0

    @property
    def stream(self) -> int:
        return self.tokens + self.docs


@dataclass
class TextSummary:
    """Pass 1's report for one input file."""

    unit: Unit
    stats: InputStats
    chunks: list[TextChunk] = field(default_factory=list)
    subset_docs: dict[str, int] = field(default_factory=dict)
    subset_tokens: dict[str, int] = field(default_factory=dict)
    error: ErrorRecord | None = None


@dataclass(frozen=True)
class SizeTask:
    """A chunk at stream position ``offset`` whose first window is ``window_offset`` (``no_cross_doc``); the
    size step's result is the same value with ``count`` payloads written under ``chunk.key + '.sz'``."""

    chunk: TextChunk
    offset: int
    window_offset: int
    count: int = 0


@dataclass(frozen=True)
class TextJob:
    """One text conversion as independent steps (see the module docstring); a plain, picklable value. The
    tokenizer travels as its fingerprint plus, for a ``tokenizer.json``, the file's bytes, so that workers on
    other machines load the very same one."""

    options: TextOptions
    paths: tuple[str, ...]
    area: RunArea
    tokenizer_info: TokenizerInfo
    tokenizer_json: bytes | None = None
    batch_chars: int = DEFAULT_BATCH_CHARS
    chunk_tokens: int = DEFAULT_CHUNK_TOKENS
    prep: PrepOptions | None = None
    kind = "text"

    def __post_init__(self):
        if self.prep is not None and not self.prep.active:
            object.__setattr__(self, "prep", None)
        _check_prep(self.prep, self.options)

    @classmethod
    def create(cls, inputs: str | os.PathLike | Iterable[str | os.PathLike], out: str | os.PathLike,
               options: TextOptions, *, overwrite: bool = False, batch_chars: int = DEFAULT_BATCH_CHARS,
               chunk_tokens: int = DEFAULT_CHUNK_TOKENS, run_id: str | None = None, prep: PrepOptions | None = None,
               **storage_options) -> "TextJob":
        """The driver's set-up, in the local converter's order: expand and check the inputs, load the
        tokenizer, then check and prepare the output location and the run's temporary area. ``prep``: the
        windows' write-time preparation (``--shuffle`` only, as locally)."""
        if not isinstance(options, TextOptions):
            raise TypeError(f"options must be a TextOptions, got {type(options).__name__}")
        chunk_tokens = as_int(chunk_tokens, "chunk_tokens", minimum=1)
        _check_prep(prep, options)
        files = expand_inputs([inputs] if isinstance(inputs, (str, os.PathLike)) else inputs,
                              suffixes=INPUT_SUFFIXES, out=out)
        info = _checked(options, files)
        raw = None
        if info.path is not None:
            with open(info.path, "rb") as fh:
                raw = fh.read()
        area = prepare_run(str(out), overwrite=overwrite, run_id=run_id, **storage_options)
        return cls(options, tuple(files), area, info, raw, batch_chars, chunk_tokens, prep)

    @classmethod
    def from_files(cls, options: TextOptions, files: Sequence[str], area: RunArea, *,
                   prep: PrepOptions | None = None, unit_size: int | None = None) -> "TextJob":
        """The job on inputs already expanded and an area already prepared (a Processing instance, which has
        the tokenizer file itself: its bytes are not carried); ``unit_size`` does not apply (a unit is a
        file)."""
        return cls(options, tuple(files), area, _checked(options, files), prep=prep)

    @property
    def output(self):
        return self.options.output

    def lite(self) -> "TextJob":
        """This job without the tokenizer file's bytes: what every step but pass 1 needs (engines that ship
        the job with each step keep the big copy to pass 1)."""
        return dataclasses.replace(self, tokenizer_json=None)

    @property
    def spec(self) -> PackSpec:
        o = self.options
        return PackSpec(seq_len=o.seq_len, eod_id=self.tokenizer_info.eod_id, no_cross_doc=o.no_cross_doc,
                        pad_last=o.pad_last, mask_name=o.mask_name)

    @property
    def schema(self):
        spec = self.spec
        return text_schema(self.options.seq_len, spec.mask_name if spec.masked else None)

    @property
    def layout(self):
        """The set's record layout (``text.blocks.text_layout``: ids stored by the vocabulary's size)."""
        spec = self.spec
        return text_layout(self.options.layout, self.schema,
                           max(self.tokenizer_info.vocab_size - 1, spec.eod_id, spec.pad_id))

    @property
    def id_dtype(self):
        return np.uint16 if self.tokenizer_info.vocab_size <= (1 << 16) else np.uint32

    def units(self) -> list[Unit]:
        return plan_units([InputFile(p, 0, False) for p in self.paths], 1)

    def tokenizer(self):
        """The run's tokenizer, loaded once per process (from the shipped bytes of a ``tokenizer.json``)."""
        info = self.tokenizer_info
        key = (self.options.tokenizer, self.options.eod_token, info.sha256)
        tok = _TOKENIZERS.get(key)
        if tok is None:
            if self.tokenizer_json is None:
                tok = load_tokenizer(self.options.tokenizer, eod_token=self.options.eod_token)
            else:
                tmp = tempfile.mkdtemp(prefix="tfpipe-tokenizer-")
                try:
                    path = os.path.join(tmp, os.path.basename(info.path or "tokenizer.json"))
                    with open(path, "wb") as fh:
                        fh.write(self.tokenizer_json)
                    tok = load_tokenizer(path, eod_token=self.options.eod_token)
                finally:
                    shutil.rmtree(tmp, ignore_errors=True)
            if tok.info.to_json() != info.to_json():
                raise TfpipeError(f"tokenizer {self.options.tokenizer!r} differs on this worker: "
                                  f"{tok.info.to_json()} != {info.to_json()}")
            _TOKENIZERS[key] = tok
        return tok

    # -- pass 1 ---------------------------------------------------------------------------------------
    def pass1(self, unit: Unit, ctx=None) -> TextSummary:
        tok = self.tokenizer()
        s = TextSummary(unit, InputStats(unit.path))
        parts: list[tuple[np.ndarray, np.ndarray]] = []
        pending = 0
        try:
            for b in iter_documents(unit.path, self.options.read_options(self.batch_chars), s.stats):
                if not b.texts:
                    continue
                ids, lengths = tok.encode_batch(b.texts)
                count_subsets(b.subsets, lengths, s.subset_docs, s.subset_tokens)
                parts.append((ids, lengths))
                pending += ids.size
                if pending >= self.chunk_tokens:
                    self._flush(s, parts)
                    parts, pending = [], 0
        except InputError as exc:
            s.error = ErrorRecord.of(exc)
            return s
        if parts:
            self._flush(s, parts)
        return s

    def _flush(self, s: TextSummary, parts: list[tuple[np.ndarray, np.ndarray]]) -> None:
        ids = np.concatenate([p[0] for p in parts]).astype(self.id_dtype)
        lengths = np.concatenate([p[1] for p in parts]).astype(np.int64)
        chunk = TextChunk(f"{s.unit.key}-c{len(s.chunks):06d}", int(lengths.size), int(ids.size),
                          int(doc_windows(lengths, self.spec.window).sum()) if self.options.no_cross_doc else 0)
        self.area.put_array(f"{chunk.key}.ids", ids)
        self.area.put_array(f"{chunk.key}.len", lengths)
        s.chunks.append(chunk)

    def _load(self, chunk: TextChunk) -> tuple[np.ndarray, np.ndarray]:
        ids = self.area.get_array(f"{chunk.key}.ids", self.id_dtype)
        lengths = self.area.get_array(f"{chunk.key}.len", np.int64)
        if ids.size != chunk.tokens or lengths.size != chunk.docs:
            raise TfpipeError(f"temporary chunk {chunk.key} of run {self.area.run_id} is damaged")
        return ids, lengths

    # -- window sizes ---------------------------------------------------------------------------------
    def size_tasks(self, summaries: Sequence[TextSummary]) -> list[SizeTask]:
        summaries = sorted(summaries, key=lambda s: s.unit.index)
        if any(s.error is not None for s in summaries):
            return []  # the planner stops the run
        tasks, g, w = [], 0, 0
        for s in summaries:
            for c in s.chunks:
                tasks.append(SizeTask(c, g, w))
                g += c.stream
                w += c.windows
        return tasks

    def sizes(self, task: SizeTask) -> SizeTask:
        if self.options.layout.columnar:
            return task  # a block's length follows from its rows: the plan needs no window sizes
        ids, lengths = self._load(task.chunk)
        spec = self.spec
        if spec.no_cross_doc:
            p = document_payloads(ids, lengths, spec)
        else:
            p = stream_payloads(ids, lengths, spec.eod_id, task.offset, spec.window)
        self.area.put_array(f"{task.chunk.key}.sz", p.astype(np.int64))
        return SizeTask(task.chunk, task.offset, task.window_offset, int(p.size))

    # -- planning -------------------------------------------------------------------------------------
    def _lengths(self, payloads: np.ndarray) -> np.ndarray:
        spec = self.spec
        pl = {FEATURE: payloads}
        if spec.masked:
            pl[spec.mask_name] = spec.window  # mask values 0/1: one byte each
        return framed_lengths(self.schema, pl)

    def plan(self, summaries: Sequence[TextSummary], sizes: Sequence[SizeTask], ctx=None) -> SetPlan:
        summaries = sorted(summaries, key=lambda s: s.unit.index)
        for s in summaries:
            if s.error is not None:
                return SetPlan.failed(s.error)
        spec, w = self.spec, self.spec.window
        sizes = sorted(sizes, key=lambda t: (t.offset, t.window_offset))
        cutter = Cutter(self.output.shard_size)
        total = sum(t.chunk.stream for t in sizes)
        shuffle = self.prep.shuffle if self.prep is not None else None
        layout = (ShuffleLayout(shuffle, self.output.shard_size, False, records=total // w + 1,
                                tmp_root=plan_tmp_root(self.area)) if shuffle is not None else None)
        try:
            sources = []  # with --shuffle: (first window, windows) of each chunk's complete windows
            for lengths in self._window_lengths(sizes, total) if not self.options.layout.columnar else ():
                if layout is not None and lengths.size:
                    sources.append((cutter.records, int(lengths.size)))
                    layout.add(lengths)
                cutter.add(lengths)
            report = layout.finish() if layout is not None else None
        finally:
            if layout is not None:
                layout.close()
        docs = sum(t.chunk.docs for t in sizes)
        windows = (window_count(total, sum(t.chunk.windows for t in sizes), spec) if self.options.layout.columnar
                   else cutter.records)  # columnar: blocks are cut below, from the count alone
        if spec.no_cross_doc:
            tokens, dropped, padding = total, 0, windows * w - total
        else:
            r = total % w
            tokens = total if spec.pad_last else total - r
            dropped = 0 if spec.pad_last else r
            padding = (w - r) if (spec.pad_last and r) else 0
        subset_docs: dict[str, int] = {}
        subset_tokens: dict[str, int] = {}
        for s in summaries:
            for k, v in s.subset_docs.items():
                subset_docs[k] = subset_docs.get(k, 0) + v
            for k, v in s.subset_tokens.items():
                subset_tokens[k] = subset_tokens.get(k, 0) + v
        extra = {
            "documents": docs, "tokens": tokens, "tokens_dropped": dropped, "padding_tokens": padding,
            "windows": windows, "seq_len": self.options.seq_len, "eod_id": spec.eod_id, "pad_id": spec.pad_id,
            "mask": spec.mask_name if spec.masked else None, "tokenizer": self.tokenizer_info.to_json(),
            "subsets": {k: {"documents": subset_docs[k], "tokens": subset_tokens[k]} for k in sorted(subset_docs)},
        }
        log.info("text: %d documents, %d tokens (%d dropped) -> %d windows of %d", docs, tokens, dropped, windows, w)
        inputs, options = tuple(s.stats for s in summaries), self.options.to_json()
        if layout is not None:
            extra["shuffle"] = report
            specs = [ShardSpec(k, n, self._pieces(sizes, a, a + n, total), first=a)
                     for k, (a, n) in enumerate(sources)]
            shards, tasks, _ = shuffled_plan(self.area, layout, specs)
            return SetPlan(shards, windows, inputs, {**options, **self.prep.to_json()}, extra, scatter=tasks)
        layout = self.layout
        ranges = (block_shards(windows, self.schema, layout, self.output.shard_size) if layout.columnar
                  else cutter.ranges())
        shards = tuple(ShardSpec(k, b - a, self._pieces(sizes, a, b, total), first=a)
                       for k, (a, b) in enumerate(ranges))
        return SetPlan(shards, windows, inputs, options, extra, layout=layout.to_json())

    def _window_lengths(self, sizes: list[SizeTask], total: int) -> Iterator[np.ndarray]:
        """The framed length of every window, in order, chunk by chunk (a window that spans chunks counted with
        the chunk where it ends; the padded last window, if any, alone at the end)."""
        spec, w = self.spec, self.spec.window
        pending = 0
        for t in sizes:
            p = self.area.get_array(f"{t.chunk.key}.sz", np.int64).copy()
            if p.size != t.count:
                raise TfpipeError(f"temporary sizes {t.chunk.key} of run {self.area.run_id} are damaged")
            if not spec.no_cross_doc:
                if t.offset % w:
                    p[0] += pending  # the window the previous chunks began
                pending = 0
                if (t.offset + t.chunk.stream) % w:
                    pending, p = int(p[-1]), p[:-1]  # the last window goes on in the next chunk
            yield self._lengths(p)
        if pending and spec.pad_last:
            r = total % w
            yield self._lengths(np.array([pending + (w - r) * _vlen(spec.pad_id)]))

    def _pieces(self, sizes: list[SizeTask], a: int, b: int, total: int) -> tuple[SizeTask, ...]:
        """The chunks that hold windows ``[a, b)``."""
        w = self.spec.window
        if self.spec.no_cross_doc:
            return tuple(t for t in sizes if t.window_offset < b and t.window_offset + t.chunk.windows > a)
        lo, hi = a * w, min(b * w, total)
        return tuple(t for t in sizes if t.offset < hi and t.offset + t.chunk.stream > lo)

    # -- pass 2 ---------------------------------------------------------------------------------------
    def pass2(self, spec: ShardSpec) -> ShardResult:
        if self.options.layout.columnar:  # the shard's windows in blocks (a shard starts on a block boundary)
            framed = Blocks(self.schema, self.layout).framed_rows(self._columns(spec))
            return write_shard(self.area, self.output, spec, framed)
        return write_shard(self.area, self.output, spec, shard_batches(self.area, spec, lambda: self._records(spec)))

    def scatter(self, task: ScatterTask) -> ScatterResult:
        """Write one source's windows to the shuffle's buckets (``engines.scatter``)."""
        return scatter(self.area, task, ((framed, lengths, None) for framed, lengths in self._records(task.spec)))

    def _records(self, spec: ShardSpec) -> Iterator[tuple[np.ndarray, np.ndarray]]:
        """Windows ``[first, first + records)`` of the stream, serialized (framed bytes and lengths), in
        batches."""
        return (serialize_batch(self.schema, cols) for cols in self._columns(spec))

    def _columns(self, spec: ShardSpec) -> Iterator[dict[str, np.ndarray]]:
        """Windows ``[first, first + records)`` of the stream as columns, in batches."""
        pack = self.spec
        w = pack.window
        a, b = spec.first, spec.first + spec.records
        if pack.no_cross_doc:
            batches = (wm for t in spec.pieces for wm in document_windows(
                *self._load(t.chunk), pack, max(a - t.window_offset, 0), b - t.window_offset))
        else:
            batches = packed_windows(self._segments(spec.pieces, a * w, b * w), w, pack.pad_id)
        for windows, mask in batches:
            if len(windows):
                cols = {FEATURE: windows}
                if pack.masked:
                    cols[pack.mask_name] = mask if mask is not None else np.ones(windows.shape, np.int64)
                yield cols

    def _segments(self, pieces: Sequence[SizeTask], lo: int, hi: int):
        """The packed stream's positions ``[lo, hi)`` (clipped to the stream), chunk by chunk."""
        for t in pieces:
            ids, lengths = self._load(t.chunk)
            stream = insert_eod(ids, lengths, self.spec.eod_id)
            yield stream[max(lo - t.offset, 0): max(min(hi - t.offset, stream.size), 0)]


def _checked(options: TextOptions, files: Sequence[str]) -> TokenizerInfo:
    """Every input's format known (an unknown one fails before any work, as locally); the tokenizer's
    fingerprint, loaded once."""
    for f in files:
        format_of(f)
    return load_tokenizer(options.tokenizer, eod_token=options.eod_token).info


def _check_prep(prep: PrepOptions | None, options: TextOptions | None = None) -> None:
    if prep is not None and prep.needs_labels:
        raise ValueError(f"{prep.describe()} needs labelled records; text windows have none (use --shuffle)")
    if prep is not None and prep.active and options is not None and options.layout.columnar:
        raise ValueError(COLUMNAR_SHUFFLE)


def _vlen(v: int) -> int:
    return int(varint_lengths(np.int64(v)))
