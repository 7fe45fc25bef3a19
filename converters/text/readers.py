"""Streaming document readers for the text converter: jsonl (plain, .gz, .bz2, multi-frame .zst), parquet
(row group by row group) and plain text, in a format registry.

Each reader yields ``DocBatch``es of at most about ``batch_chars`` characters, so memory stays at a few
blocks whatever the file size (one document is never split: the largest document bounds memory too).
Accounting goes into the caller's ``InputStats``, where a *record* is a document: ``records_read`` counts
non-blank jsonl lines / parquet rows / text documents, ``records_written`` those handed on for
tokenization, and ``skipped`` the rest by reason, so read == written + skipped always holds.

Skip reasons (``on_error="skip"``; with ``"raise"`` the first one raises ``InputError`` naming file and
line): ``invalid_json``, ``truncated_line`` (an unterminated, unparsable last line), ``not_an_object``,
``missing_text``, ``text_not_string``, ``invalid_utf8``, ``lone_surrogate`` (a ``\\ud800``-style escape
that is not half of a pair), ``unreadable_file`` (wrong compression, not parquet), ``truncated_file``
(the compressed stream ends early: the rest of the file counts as one skipped record). Never errors,
always skipped and counted: ``empty_text`` and ``subset_filtered`` (``include_subsets``/``exclude_subsets``
on ``meta.pile_set_name``). Blank lines are not records; they are counted in ``blank_lines``. A UTF-8 BOM
at the start of a file is ignored.

Plain text (``.txt``): ``txt_mode="block"`` (default) makes every blank-line-separated block one document
(its lines joined with ``"\\n"``, line endings and the separating blank lines not included);
``txt_mode="file"`` makes the whole file one document, exactly as written (minus a BOM).
"""
from __future__ import annotations

import json
import logging
import re
from dataclasses import dataclass, field
from typing import Callable, Iterator

from ..shardset.manifest import InputStats
from ..shardset.options import check_on_error
from ..sources import COMPRESSED_SUFFIXES, is_url, iter_blocks, open_input, open_raw
from ..util.errors import InputError, TfpipeError

__all__ = ["DocReadOptions", "subset_names", "DocBatch", "iter_documents", "format_of", "FORMATS", "INPUT_SUFFIXES",
           "DEFAULT_BATCH_CHARS", "NO_SUBSET"]

log = logging.getLogger(__name__)

DEFAULT_BATCH_CHARS = 1 << 20  # ~1 Mi characters of text per batch
_BLOCK = 8 << 20               # 8 MiB read blocks
NO_SUBSET = ""                 # subset of documents without meta.pile_set_name
_SURROGATE = re.compile("[\ud800-\udfff]")
_FORMAT_SUFFIXES = {".jsonl": "jsonl", ".ndjson": "jsonl", ".json": "jsonl", ".parquet": "parquet", ".txt": "txt"}
INPUT_SUFFIXES = tuple(_FORMAT_SUFFIXES)


def subset_names(what: str, value) -> tuple[str, ...] | None:
    """A collection of ``meta.pile_set_name`` values as a sorted tuple (None stays None); a bare string is an
    error (it would be taken as a set of characters)."""
    if value is None:
        return None
    if isinstance(value, str):
        raise ValueError(f"{what} must be a collection of subset names, got the string {value!r}")
    return tuple(sorted(set(value)))


@dataclass(frozen=True)
class DocReadOptions:
    text_key: str = "text"
    include_subsets: frozenset[str] | None = None
    exclude_subsets: frozenset[str] | None = None
    on_error: str = "raise"
    txt_mode: str = "block"
    batch_chars: int = DEFAULT_BATCH_CHARS

    def __post_init__(self):
        if not isinstance(self.text_key, str) or not self.text_key:
            raise ValueError(f"text_key must be a non-empty string, got {self.text_key!r}")
        check_on_error(self.on_error)
        if self.txt_mode not in ("block", "file"):
            raise ValueError(f"txt_mode must be 'block' or 'file', got {self.txt_mode!r}")
        if self.batch_chars <= 0:
            raise ValueError(f"batch_chars must be positive, got {self.batch_chars}")
        for name in ("include_subsets", "exclude_subsets"):
            names = subset_names(name, getattr(self, name))
            object.__setattr__(self, name, None if names is None else frozenset(names))

    def keep(self, subset: str) -> bool:
        if self.include_subsets is not None and subset not in self.include_subsets:
            return False
        return not (self.exclude_subsets is not None and subset in self.exclude_subsets)


@dataclass
class DocBatch:
    """Documents of one file, in file order, with their subset and line (or row) number."""

    path: str
    texts: list[str] = field(default_factory=list)
    subsets: list[str] = field(default_factory=list)
    lines: list[int] = field(default_factory=list)
    nbytes: int = 0  # uncompressed input bytes consumed since the previous batch (progress)
    chars: int = 0

    def __len__(self) -> int:
        return len(self.texts)


class _Sink:
    """Collects documents into batches and applies the accounting rules shared by all readers."""

    def __init__(self, path: str, opts: DocReadOptions, stats: InputStats):
        self.path, self.opts, self.stats = path, opts, stats
        self.batch = DocBatch(path)

    def bad(self, line: int | None, reason: str, message: str) -> None:
        """A bad record: raise, or count it as skipped. The caller already counted it as read."""
        if self.opts.on_error == "raise":
            raise InputError(f"{message} (reason: {reason}; pass --on-error skip to skip such records)",
                             path=self.path, line=line, reason=reason)
        where = f"{self.path}:{line}" if line is not None else self.path
        self.stats.skip(reason, 1, f"{where}: {reason}: {message}")

    def add(self, text, subset, line: int) -> None:
        """Validate one document that was counted as read, and keep, filter or reject it."""
        if not isinstance(text, str):
            if text is None:
                self.bad(line, "missing_text", f"no {self.opts.text_key!r} field")
            else:
                self.bad(line, "text_not_string",
                         f"{self.opts.text_key!r} is a {type(text).__name__}, not a string")
            return
        if not text:
            self.stats.skip("empty_text", 1, f"{self.path}:{line}: empty_text")
            return
        subset = subset if isinstance(subset, str) else NO_SUBSET
        if not self.opts.keep(subset):
            self.stats.skip("subset_filtered", 1)
            return
        b = self.batch
        b.texts.append(text)
        b.subsets.append(subset)
        b.lines.append(line)
        b.chars += len(text)
        self.stats.records_written += 1

    def full(self) -> bool:
        return self.batch.chars >= self.opts.batch_chars

    def take(self) -> DocBatch:
        b = self.batch
        self.batch = DocBatch(self.path)
        return b


def _decode_lines(sink: _Sink, block: bytes, first_line: int, at_file_start: bool):
    """Split a block (ending at a newline, except the file's last) into ``(line_no, str | None, last)``;
    None for a line that is not valid UTF-8 (already reported). ``last`` marks an unterminated last line."""
    try:
        lines = block.decode("utf-8").split("\n")
    except UnicodeDecodeError:
        lines = block.split(b"\n")
    terminated = block.endswith(b"\n")
    if terminated:
        lines.pop()
    n = len(lines)
    for i, ln in enumerate(lines):
        if isinstance(ln, bytes):
            try:
                ln = ln.decode("utf-8")
            except UnicodeDecodeError as exc:
                if ln.strip():
                    sink.stats.records_read += 1
                    sink.bad(first_line + i, "invalid_utf8", f"invalid UTF-8 at column {exc.start + 1}")
                else:
                    sink.stats.blank_lines += 1
                continue
        if i == 0 and at_file_start and ln.startswith("\ufeff"):
            ln = ln[1:]
        yield first_line + i, ln, (not terminated and i == n - 1)


def _read_jsonl(sink: _Sink) -> Iterator[DocBatch]:
    path, opts, stats = sink.path, sink.opts, sink.stats
    key = opts.text_key
    loads = json.loads
    for block, first_line, offset in iter_blocks(path, _BLOCK):
        sink.batch.nbytes += len(block)
        for line_no, ln, last in _decode_lines(sink, block, first_line, offset == 0):
            if sink.full():
                yield sink.take()
            if not ln or ln.isspace():
                stats.blank_lines += 1
                continue
            stats.records_read += 1
            try:
                obj = loads(ln)
            except RecursionError:
                sink.bad(line_no, "invalid_json", "invalid JSON: nested too deeply to parse")
                continue
            except ValueError as exc:
                if last:
                    sink.bad(line_no, "truncated_line",
                             f"last line is not valid JSON and has no newline (truncated file?): {exc}")
                else:
                    sink.bad(line_no, "invalid_json", f"invalid JSON: {exc}")
                continue
            if not isinstance(obj, dict):
                sink.bad(line_no, "not_an_object", f"JSON line is a {type(obj).__name__}, not an object")
                continue
            text = obj.get(key)
            if isinstance(text, str) and "\\u" in ln and _SURROGATE.search(text):
                sink.bad(line_no, "lone_surrogate",
                         f"{key!r} holds a lone UTF-16 surrogate escape (\\ud800-\\udfff), not valid Unicode")
                continue
            meta = obj.get("meta")
            sink.add(text, meta.get("pile_set_name") if isinstance(meta, dict) else None, line_no)
    if sink.batch.texts or sink.batch.nbytes:
        yield sink.take()


def _read_txt(sink: _Sink) -> Iterator[DocBatch]:
    path, opts, stats = sink.path, sink.opts, sink.stats
    if opts.txt_mode == "file":
        with open_input(path) as f:
            try:
                data = f.read()
            except (OSError, EOFError) as exc:
                raise InputError(f"cannot decompress ({exc}); the file is truncated or corrupt", path=path,
                                 offset=0, reason="truncated_file") from exc
        stats.records_read += 1
        try:
            text = data.decode("utf-8")
        except UnicodeDecodeError as exc:
            sink.bad(1, "invalid_utf8", f"invalid UTF-8 at byte {exc.start}")
        else:
            sink.add(text[1:] if text.startswith("\ufeff") else text, None, 1)
        sink.batch.nbytes += len(data)
        yield sink.take()
        return
    para: list[str] = []
    start = 0

    def flush():
        nonlocal para
        stats.records_read += 1
        sink.add("\n".join(para), None, start)
        para = []

    for block, first_line, offset in iter_blocks(path, _BLOCK):
        sink.batch.nbytes += len(block)
        for line_no, ln, _last in _decode_lines(sink, block, first_line, offset == 0):
            if sink.full():
                yield sink.take()
            if ln.endswith("\r"):
                ln = ln[:-1]
            if not ln or ln.isspace():
                stats.blank_lines += 1
                if para:
                    flush()
                continue
            if not para:
                start = line_no
            para.append(ln)
    if para:
        flush()
    if sink.batch.texts or sink.batch.nbytes:
        yield sink.take()


def _read_parquet(sink: _Sink) -> Iterator[DocBatch]:
    """A local file by path (pyarrow's own reader); an object (s3://, gs://) as a seekable file object."""
    if not is_url(sink.path):
        yield from _parquet_batches(sink, sink.path)
        return
    try:
        source = open_raw(sink.path)
    except OSError as exc:
        sink.stats.records_read += 1
        sink.bad(None, "unreadable_file", f"cannot open: {exc.strerror or exc}")
        return
    with source:
        yield from _parquet_batches(sink, source)


def _parquet_batches(sink: _Sink, source) -> Iterator[DocBatch]:
    path, opts, stats = sink.path, sink.opts, sink.stats
    import pyarrow as pa
    import pyarrow.parquet as pq

    key = opts.text_key
    try:
        pf = pq.ParquetFile(source)
    except (pa.ArrowException, OSError) as exc:
        stats.records_read += 1
        sink.bad(None, "unreadable_file", f"not a readable parquet file: {exc}")
        return
    names = pf.schema_arrow.names
    if key not in names:
        n = pf.metadata.num_rows
        if n == 0:
            return
        if opts.on_error == "raise":
            raise InputError(f"no column {key!r} (columns: {', '.join(names)}); choose one with --text-key",
                             path=path, reason="missing_text")
        stats.records_read += n
        stats.skip("missing_text", n, f"{path}: missing_text: no column {key!r}")
        return
    text_type = pf.schema_arrow.field(key).type
    is_string = pa.types.is_string(text_type) or pa.types.is_large_string(text_type)
    meta_type = pf.schema_arrow.field("meta").type if "meta" in names else None
    cols = [key] + (["meta"] if meta_type is not None else [])
    row = 0
    for rg in range(pf.num_row_groups):
        for rb in pf.iter_batches(batch_size=4096, row_groups=[rg], columns=cols):
            n = rb.num_rows
            texts = rb.column(0).to_pylist()
            subsets = _parquet_subsets(rb.column(1), n) if meta_type is not None else [None] * n
            stats.records_read += n
            for i in range(n):
                t = texts[i]
                if t is not None and not is_string:
                    sink.bad(row + i + 1, "text_not_string", f"column {key!r} has type {text_type}, not string")
                    continue
                sink.add(t, subsets[i], row + i + 1)
            row += n
            sink.batch.nbytes += rb.nbytes
            if sink.full():
                yield sink.take()
    if sink.batch.texts or sink.batch.nbytes:
        yield sink.take()


def _parquet_subsets(col, n: int) -> list:
    import pyarrow as pa

    t = col.type
    if pa.types.is_struct(t):
        if t.get_field_index("pile_set_name") < 0:
            return [None] * n
        return col.field("pile_set_name").to_pylist()
    if pa.types.is_string(t) or pa.types.is_large_string(t):  # meta stored as a JSON string
        out = []
        for v in col.to_pylist():
            try:
                m = json.loads(v) if v else None
            except (ValueError, RecursionError):
                m = None
            out.append(m.get("pile_set_name") if isinstance(m, dict) else None)
        return out
    return [None] * n


FORMATS: dict[str, Callable[[_Sink], Iterator[DocBatch]]] = {
    "jsonl": _read_jsonl,
    "parquet": _read_parquet,
    "txt": _read_txt,
}


def format_of(path: str) -> str:
    """The reader for ``path`` by extension (after a compression suffix): jsonl (.jsonl, .ndjson, .json),
    parquet, txt."""
    base = str(path)
    for suffix in COMPRESSED_SUFFIXES:
        if base.endswith(suffix):
            base = base[: -len(suffix)]
            break
    for suffix, fmt in _FORMAT_SUFFIXES.items():
        if base.endswith(suffix):
            if fmt == "parquet" and base != str(path):
                raise TfpipeError(f"{path}: parquet files are compressed internally; do not wrap them in "
                                  f"{str(path)[len(base):]}")
            return fmt
    raise TfpipeError(f"{path}: unknown input format; expected one of "
                      f"{', '.join(sorted(_FORMAT_SUFFIXES))} (optionally + {', '.join(COMPRESSED_SUFFIXES)})")


def iter_documents(path: str, opts: DocReadOptions, stats: InputStats) -> Iterator[DocBatch]:
    """Yield the documents of one file in batches, updating ``stats``. File-level damage (wrong
    compression, truncated stream) raises ``InputError``, or with ``on_error="skip"`` counts the unread
    rest of the file as one ``unreadable_file``/``truncated_file`` record."""
    reader = FORMATS[format_of(path)]
    sink = _Sink(path, opts, stats)
    try:
        yield from reader(sink)
    except InputError as exc:
        if opts.on_error == "raise" or exc.line is not None:
            raise
        if sink.batch.texts:  # documents read before the damage are kept (and already counted)
            yield sink.take()
        reason = "truncated_file" if "cannot decompress" in str(exc) else "unreadable_file"
        exc.reason = exc.reason or reason
        stats.records_read += 1
        stats.skip(reason, 1, f"{exc} ({reason})")
        log.warning("skipping the rest of %s: %s", path, exc)
