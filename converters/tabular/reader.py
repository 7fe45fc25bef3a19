"""Read a table's rows in blocks: tab-separated text by position (``.gz`` and the other compressions
``sources.open_input`` knows, LF or CRLF, a UTF-8 byte order mark skipped), CSV with a header line by name
(comma-separated, no quoting; ``header``), Parquet by name (``parquet``). The format: ``--format``, else the
suffix (``.csv``, ``.parquet``), else line 1 (``_sniff``: a header with the schema's columns, commas and no tabs
is CSV). A block's good rows come out as columns (``Rows``); a bad row is named by file and line
(``InputError``) or, with ``on_error="skip"``, counted by reason in the input's ``InputStats``. A line is read
once however long (``_blocks``), up to ``MAX_LINE_BYTES``; a damaged compressed file is named by byte offset."""
from __future__ import annotations

import logging
import os
from typing import Iterator

import numpy as np

from ..shardset.manifest import InputStats
from ..sources import compression_of, line_start, open_input, open_raw
from ..util.errors import InputError
from ..util.excerpt import excerpt
from . import parsekernel as K
from .header import column_index, found_missing, missing_columns
from .rows import GATHER_BYTES, Rows, slices
from .schema import FORMATS, TableSchema

__all__ = ["Rows", "iter_rows", "Span", "count_lines", "DEFAULT_BLOCK_BYTES", "MAX_LINE_BYTES", "FORMATS",
           "is_parquet", "is_csv", "file_format"]

log = logging.getLogger(__name__)

DEFAULT_BLOCK_BYTES = 8 << 20
MAX_LINE_BYTES = 256 << 20  # a longer line is a bad row (line_too_long), read through and skipped, never held
BOM = b"\xef\xbb\xbf"  # UTF-8's byte order mark, which some writers put before a CSV header
_REASON = {K.BAD_FIELDS: "wrong_field_count", K.NOT_INT: "not_an_integer", K.OVERFLOW: "int64_overflow",
           K.BAD_LABEL: "bad_label"}


def _base(path: str) -> str:
    low = path.lower()
    for z in (".gz", ".bz2", ".zst", ".xz"):
        if low.endswith(z):
            return low[:-len(z)]
    return low


def is_parquet(path: str) -> bool:
    return path.lower().endswith(".parquet")


def is_csv(path: str) -> bool:
    return _base(path).endswith(".csv")


def file_format(path: str, fmt: str | None = None) -> str | None:
    """How ``path`` is read: ``fmt`` when given (``--format``), else ``parquet`` or ``csv`` by its suffix; None
    for other text, which its first line decides (``_sniff``)."""
    if fmt is not None:
        if fmt not in FORMATS:
            raise ValueError(f"format must be one of {FORMATS}, got {fmt!r}")
        return fmt
    return "parquet" if is_parquet(path) else "csv" if is_csv(path) else None


class Span:
    """The lines of a plain file that start in bytes ``[start, stop)`` (a unit of a larger file), numbered from
    ``first_line``; ``lines`` counts them as they are read."""

    def __init__(self, start: int, stop: int, first_line: int = 1):
        if not 0 <= start <= stop or first_line < 1:
            raise ValueError(f"bad span [{start}, {stop}) from line {first_line}")
        self.start, self.stop, self.first_line = start, stop, first_line
        self.lines = 0


def iter_rows(path: str, schema: TableSchema, stats: InputStats, on_error: str = "raise",
              block_bytes: int = DEFAULT_BLOCK_BYTES, *, fmt: str | None = None, pad: bool = False,
              max_line: int = MAX_LINE_BYTES, span: Span | None = None) -> Iterator[Rows]:
    """Every block of ``path``'s good rows, in order (see the module docstring). ``fmt``: ``file_format``'s;
    ``pad``: a row with fewer fields than the table reads as if its missing trailing fields were empty;
    ``span``: only the lines that start in its byte range (line 1, which tells the format and holds a CSV
    header, is looked at all the same), numbered from its ``first_line``, counted in its ``lines``."""
    kind = file_format(path, fmt)
    if kind == "parquet":
        if span is not None:
            raise ValueError(f"{path}: a Parquet file is read whole")
        from .parquet import iter_parquet

        yield from iter_parquet(path, schema, stats, on_error)
        return
    first = 1 if span is None else span.first_line   # the line number of the block's first line
    head = True               # line 1 not looked at yet (a byte order mark, a CSV header, the format)
    positions = schema.positions() + (len(schema.columns),)
    if span is not None and span.start > 0:
        head = False
        kind, positions = _line1(path, block_bytes, max_line, kind, schema, positions)
    start, stop = (0, None) if span is None else (span.start, span.stop)
    try:
        for block in _blocks(path, block_bytes, max_line, start, stop):
            if block is None:     # a line longer than max_line: skipped through its end
                msg = f"line_too_long: a line of more than {max_line:,} bytes (the longest row read)"
                if on_error == "raise" or (head and kind != "tsv"):
                    raise InputError(msg, path=path, line=first, reason="line_too_long")
                stats.records_read += 1
                stats.skip("line_too_long", 1, f"{path}:{first}: {msg}")
                first, head = first + 1, False
                continue
            if head:
                head = False
                if bytes(block[:3]) == BOM:
                    block = block[3:]
                line1, end = _first_line(block)
                kind, positions = _format(path, line1, end, kind, schema, positions)
                if kind == "csv":
                    block = block[end + 1:]
                    first = 2
                if not len(block):
                    del block
                    continue
            parts, nlines = _parse(block, path, first, positions, schema, 44 if kind == "csv" else 9, stats,
                                   on_error, pad)
            del block   # the rows hold no view of the buffer once ``parts`` is done: it is read into again
            first += nlines
            for rows in parts:
                if len(rows):
                    yield rows
            del parts
    finally:
        if span is not None:
            span.lines = first - span.first_line


def count_lines(path: str, start: int, stop: int, block_bytes: int = DEFAULT_BLOCK_BYTES) -> int:
    """The lines of plain file ``path`` that start in bytes ``[start, stop)`` (what ``iter_rows`` counts in a
    ``Span``), read at memory speed without parsing them."""
    if stop <= start:
        return 0
    lines = 1 if start == 0 else 0   # byte 0 starts a line; any other byte p does when byte p - 1 is a newline
    at = max(start - 1, 0)
    try:
        with open_raw(path) as fh:
            fh.seek(at)
            while at < stop - 1:
                chunk = fh.read(min(block_bytes, stop - 1 - at))
                if not chunk:
                    break
                lines += chunk.count(b"\n")
                at += len(chunk)
    except OSError as exc:
        raise InputError(f"cannot read: {exc.strerror or exc}", path=path, offset=at) from None
    return lines


def _format(path: str, line1: bytes, end: int, kind: str | None, schema: TableSchema, positions):
    """The format and the columns' positions line 1 (``line1``, ``end`` bytes long) tells."""
    if kind is None:
        kind = _sniff(path, line1, schema)
    if kind == "csv":
        if end > len(line1):
            raise InputError(f"line 1 is {end:,} bytes long: not a CSV header", path=path, line=1,
                             reason="missing_column")
        positions = _header(path, line1, schema)
    return kind, positions


def _line1(path: str, block_bytes: int, max_line: int, kind: str | None, schema: TableSchema, positions):
    """``_format`` of ``path``'s line 1, read on its own (for a span that starts later in the file)."""
    if kind == "tsv":
        return kind, positions
    for block in _blocks(path, min(block_bytes, _HEAD_BYTES), max_line, 0, 1):
        if block is None:
            raise InputError(f"line_too_long: a line of more than {max_line:,} bytes (the longest row read)",
                             path=path, line=1, reason="line_too_long")
        if bytes(block[:3]) == BOM:
            block = block[3:]
        line1, end = _first_line(block)
        return _format(path, line1, end, kind, schema, positions)
    return kind, positions


def _cut_at(buf, n: int, offset: int, stop: int | None) -> int:
    """``n``, or the end of the line holding byte ``stop - 1`` when ``buf[:n]`` (whole lines read from byte
    ``offset``, which is before ``stop``) goes past it: the lines that start before ``stop``."""
    if stop is None or offset + n <= stop:
        return n
    return buf.find(b"\n", stop - 1 - offset, n) + 1


def _blocks(path: str, block_bytes: int, max_line: int, start: int = 0, stop: int | None = None):
    """``path``'s text as views of whole lines (the last line given its newline), about ``block_bytes`` each,
    read into one buffer that the caller's view must not outlive; None in place of a line longer than
    ``max_line``, which is then skipped through its end. A line longer than a block grows the buffer in place
    and is searched for its end once: linear time, memory about the line and a block. A read error
    (a truncated or corrupt compressed file) is named by file and byte offset. ``start``, ``stop``: only the
    lines that start in that byte range of a plain file (None: to the end)."""
    buf = bytearray(block_bytes + 1)
    have = 0        # bytes at the buffer's start not handed out yet
    scan = 0        # where the search for a newline starts (the bytes before it hold none)
    offset = 0      # bytes of the file before the buffer's start
    with open_input(path) as fh:
        if start > 0:   # the first line that starts at or after ``start``
            offset = line_start(fh, start, fh.seek(0, os.SEEK_END))
            fh.seek(offset)
        while True:
            if stop is not None and offset >= stop:
                return
            if len(buf) < have + block_bytes + 1:  # grown in place (realloc): no second copy of a long line
                buf.extend(bytes(have + block_bytes + 1 - len(buf)))
            got = _read(fh, memoryview(buf)[have:have + block_bytes], path, offset + have)
            size = have + got
            if not got:
                if size:
                    if buf[size - 1] != 10:
                        buf[size] = 10
                        size += 1
                    yield memoryview(buf)[:_cut_at(buf, size, offset, stop)]
                return
            cut = buf.rfind(b"\n", scan, size) + 1
            if cut == 0:
                have = scan = size
                if have > max_line:
                    yield None
                    offset += have
                    buf = bytearray(block_bytes + 1)
                    have = scan = 0
                    while True:   # the rest of the long line
                        got = _read(fh, memoryview(buf)[:block_bytes], path, offset)
                        if not got:
                            return
                        k = buf.find(b"\n", 0, got)
                        if k >= 0:
                            offset += k + 1
                            have = got - k - 1
                            buf[:have] = buf[k + 1:got]
                            break
                        offset += got
                continue
            end = _cut_at(buf, cut, offset, stop)
            yield memoryview(buf)[:end]
            if end < cut:
                return
            offset += cut
            have = scan = size - cut
            if len(buf) > 4 * (block_bytes + 1) and have <= block_bytes:   # a long line passed: give it back
                small = bytearray(2 * (block_bytes + 1))
                small[:have] = memoryview(buf)[cut:size]
                buf = small
            else:
                buf[:have] = buf[cut:size]


def _read(fh, view: memoryview, path: str, offset: int) -> int:
    """Fill ``view`` from ``fh`` as far as one read goes: its byte count, 0 at the end. A failure (a truncated
    or corrupt compressed file) is named by file and byte offset of the text."""
    try:
        readinto = getattr(fh, "readinto", None)
        if readinto is not None:
            return readinto(view) or 0
        data = fh.read(len(view))
        view[:len(data)] = data
        return len(data)
    except (OSError, EOFError) as exc:
        what = "cannot decompress" if compression_of(path) else "cannot read"
        raise InputError(f"{what} ({exc}); the file is truncated or corrupt", path=path, offset=offset,
                         reason="unreadable_file") from None
    finally:
        view.release()


def _first_line(block: memoryview) -> tuple[bytes, int]:
    """The first line of a block of whole lines, without its newline (a carriage return before it kept), cut
    to ``_HEAD_BYTES`` (what tells the format and a header's names); its whole length."""
    at = np.frombuffer(block, np.uint8)
    end = K.field_span(at, 0, at.size, 10, 0)[1]
    return bytes(block[:min(end, _HEAD_BYTES)]), end


_HEAD_BYTES = 1 << 20  # the most of line 1 looked at: a longer line is no header


def _names(line1: bytes) -> list[str]:
    return [n.strip() for n in line1.rstrip(b"\r").decode("utf-8", "replace").split(",")]


def _sniff(path: str, line1: bytes, schema: TableSchema) -> str:
    """The format of text without a telling suffix: CSV when its first line is a header with the schema's
    columns (commas, no tabs), tab-separated when it has tabs or no commas; else refused."""
    if b"\t" in line1 or b"," not in line1:
        return "tsv"
    names = _names(line1)
    missing = missing_columns(schema, names)
    if not missing:
        return "csv"
    raise InputError(f"line 1 is comma-separated (commas, no tabs) but is not a CSV header with the columns of "
                     f"schema {schema.name!r}: {found_missing(names, missing)}; a CSV is read by its header line "
                     "(--schema FILE names its columns), --format tsv reads the file as tab-separated",
                     path=path, line=1, reason="missing_column")


def _header(path: str, head: bytes, schema: TableSchema):
    if b"\t" in head and b"," not in head:
        raise InputError("line 1 has tabs and no commas: not a CSV header (--format tsv reads the file as "
                         "tab-separated, by position)", path=path, line=1, reason="missing_column")
    names = _names(head)
    pos = column_index(path, names, schema, "the CSV header", line=1)
    return (pos[schema.label], tuple(pos[n] for n in schema.numeric), tuple(pos[n] for n in schema.categorical),
            len(names))


def _roles(positions) -> tuple[np.ndarray, np.ndarray]:
    lab, nums, cats, ncols = positions
    role = np.zeros(ncols, np.int64)
    slot = np.zeros(ncols, np.int64)
    role[lab] = 1
    for j, c in enumerate(nums):
        role[c], slot[c] = 2, j
    for j, c in enumerate(cats):
        role[c], slot[c] = 3, j
    return role, slot


def _parse(block: bytes | memoryview, path: str, first: int, positions, schema: TableSchema, delim: int,
           stats: InputStats, on_error: str, pad: bool = False) -> tuple[list[Rows], int]:
    """A block's good rows (one ``Rows``, or several when its long values would make the gathered columns much
    larger than the block: ``rows.slices``, gathered one at a time as they are iterated) and its line count."""
    lab, nums, cats, ncols = positions
    buf = np.frombuffer(block, np.uint8)
    role, slot = _roles(positions)
    status, labels, values, missing, errcol, counts, keys, widths, begins = K.parse_block(
        buf, ncols, delim, role, slot, len(nums), len(cats), pad)
    n = status.size
    blank = status == K.BLANK
    bad = np.flatnonzero((status != K.OK) & ~blank)
    stats.blank_lines += int(blank.sum())
    stats.records_read += int(n - blank.sum())
    for r in bad[: (1 if on_error == "raise" else len(bad))]:
        reason = _REASON[int(status[r])]
        a, e = int(begins[r]), int(begins[r + 1]) - 1  # the line without its newline (nor a CR before it)
        e -= int(e > a and buf[e - 1] == 13)
        msg = _message(buf, a, e, int(status[r]), int(counts[r]), int(errcol[r]), schema, lab, nums, ncols, delim)
        if on_error == "raise":
            raise InputError(f"{reason}: {msg}", path=path, line=first + int(r), reason=reason)
        stats.skip(reason, 1, f"{path}:{first + int(r)}: {reason}: {msg}")
    allgood = bad.size == 0 and not blank.any()
    good = np.arange(n) if allgood else np.flatnonzero(status == K.OK)
    long = [j for j in range(len(cats)) if widths[j] > 8]
    if not long:  # every categorical value has at most 8 bytes: keys, no bytes
        keyed = [keys[j] if allgood else keys[j][good] for j in range(len(cats))]
        lines = first + good.astype(np.int64)
        if allgood:
            return [Rows(lines, labels, values, missing, [None] * len(cats), keyed)], n
        return [Rows(lines, labels[good], values[good], missing[good], [None] * len(cats), keyed)], n
    return _gathered(buf, first, good, long, positions, delim, labels, values, missing, keys), n


def _gathered(buf, first, good, long, positions, delim, labels, values, missing, keys) -> Iterator[Rows]:
    """The good rows of a block with a column of values longer than 8 bytes, slice by slice (``rows.slices``):
    that column's bytes, not keys, gathered for one slice at a time."""
    _, _, cats, ncols = positions
    starts, ends, _, _ = K.split_fields(buf, ncols, delim)
    cols = [cats[j] for j in long]
    width = np.max(ends[np.ix_(good, cols)] - starts[np.ix_(good, cols)], axis=1) * len(cols)
    for part in slices(good, width, max(GATHER_BYTES, 4 * len(buf))):
        cols, keyed = [], []
        for j, c in enumerate(cats):
            if j in long:
                w = int((ends[part, c] - starts[part, c]).max()) if part.size else 0
                arr = K.gather(buf, starts, ends, part, c, w)
                cols.append(arr.view(f"S{arr.shape[1]}").reshape(-1))
                keyed.append(None)
            else:
                cols.append(None)
                keyed.append(keys[j][part])
        yield Rows(first + part.astype(np.int64), labels[part], values[part], missing[part], cols, keyed)


def _message(buf: np.ndarray, a: int, e: int, status: int, count: int, j: int, schema, lab, nums, ncols,
             delim) -> str:
    """Why line ``buf[a:e]`` is bad, quoting at most an excerpt of one field (the line is never copied)."""
    def field(k: int) -> np.ndarray:
        s, t = K.field_span(buf, a, e, delim, k)
        return buf[s:t] if s >= 0 else buf[:0]

    if status == K.BAD_FIELDS:
        sep = "tab" if delim == 9 else "comma"
        commas = count == 1 and delim == 9 and K.field_span(buf, a, e, 44, 1)[0] >= 0
        short = ("" if count >= ncols else " (the line has commas, no tabs: a CSV needs a header line, and "
                 "--format csv unless it is named .csv)" if commas else
                 " (a row whose trailing empty fields were stripped reads with --pad-short-rows)")
        return f"expected {ncols} {sep}-separated fields, got {count}{short}"
    if status == K.BAD_LABEL:
        return f"label {excerpt(field(lab))} is not 0 or 1"
    text = excerpt(field(nums[j]))  # a capped excerpt: a message never grows with the field
    if status == K.OVERFLOW:
        return f"column {schema.numeric[j]}: {text} is out of the int64 range"
    return f"column {schema.numeric[j]}: {text} is not an integer"
