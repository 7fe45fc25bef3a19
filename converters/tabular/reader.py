"""Read a table's rows in blocks: tab-separated text by position (``.gz`` and the other compressions
``sources.open_input`` knows, LF or CRLF), CSV with a header line by name (``.csv``: comma-separated, no
quoting), Parquet by name (pyarrow). A block's good rows come out as columns (``Rows``); a bad row is named by
file and line (``InputError``) or, with ``on_error="skip"``, counted by reason in the input's ``InputStats``."""
from __future__ import annotations

import logging
from typing import Iterator

import numpy as np

from ..shardset.manifest import InputStats
from ..sources import open_input
from ..util.errors import InputError
from . import kernel as K
from .rows import Rows
from .schema import TableSchema

__all__ = ["Rows", "iter_rows", "REASONS", "DEFAULT_BLOCK_BYTES", "is_parquet", "is_csv", "INPUT_SUFFIXES"]

log = logging.getLogger(__name__)

DEFAULT_BLOCK_BYTES = 8 << 20
REASONS = ("wrong_field_count", "not_an_integer", "int64_overflow", "bad_label")
_REASON = {K.BAD_FIELDS: "wrong_field_count", K.NOT_INT: "not_an_integer", K.OVERFLOW: "int64_overflow",
           K.BAD_LABEL: "bad_label"}
INPUT_SUFFIXES = None  # every file of a directory is an input (Criteo's day_0 .. day_23 have no suffix)


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


def iter_rows(path: str, schema: TableSchema, stats: InputStats, on_error: str = "raise",
              block_bytes: int = DEFAULT_BLOCK_BYTES) -> Iterator[Rows]:
    """Every block of ``path``'s good rows, in order (see the module docstring)."""
    if is_parquet(path):
        from .parquet import iter_parquet

        yield from iter_parquet(path, schema, stats, on_error)
        return
    csv = is_csv(path)
    with open_input(path) as fh:
        first, rest = 1, b""
        positions = schema.positions() + (len(schema.columns),)
        delim = ord(",") if csv else 9
        buf = bytearray(block_bytes + 1)   # read into, parsed in place: no copy of a block (the rest of a line
        while True:                        # cut at its end moves to the front)
            if len(buf) < len(rest) + block_bytes + 1:   # a line longer than a block
                buf = bytearray(len(rest) + block_bytes + 1)
            buf[:len(rest)] = rest
            got = _read_into(fh, memoryview(buf)[len(rest):len(rest) + block_bytes])
            size = len(rest) + got
            if not got:
                if not size:
                    return
                if buf[size - 1] != 10:
                    buf[size] = 10
                    size += 1
                cut = size
            else:
                cut = buf.rfind(b"\n", 0, size) + 1
                if cut == 0:
                    rest = bytes(buf[:size])
                    continue
            block, rest = memoryview(buf)[:cut], bytes(buf[cut:size])
            if csv and first == 1:
                head, _, tail = bytes(block).partition(b"\n")
                block = memoryview(tail)
                positions = _header(path, head, schema)
                first = 2
                if not block:
                    continue
            rows, nlines = _parse(block, path, first, positions, schema, delim, stats, on_error)
            del block   # the rows hold no view of the buffer: it is read into again
            first += nlines
            if len(rows):
                yield rows


def _read_into(fh, view: memoryview) -> int:
    """Fill ``view`` from ``fh`` as far as one read goes: its byte count, 0 at the end."""
    readinto = getattr(fh, "readinto", None)
    if readinto is not None:
        return readinto(view) or 0
    data = fh.read(len(view))
    view[:len(data)] = data
    return len(data)


def _header(path: str, head: bytes, schema: TableSchema):
    names = head.rstrip(b"\r").decode("utf-8", "replace").split(",")
    pos = {n: i for i, n in enumerate(names)}
    missing = [c.name for c in schema.columns if c.role != "ignore" and c.name not in pos]
    if missing:
        raise InputError(f"the CSV header has no column {', '.join(missing)} of schema {schema.name!r}",
                         path=path, line=1, reason="missing_column")
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
           stats: InputStats, on_error: str) -> tuple[Rows, int]:
    lab, nums, cats, ncols = positions
    buf = np.frombuffer(block, np.uint8)
    role, slot = _roles(positions)
    status, labels, values, missing, errcol, counts, keys, widths, begins = K.parse_block(
        buf, ncols, delim, role, slot, len(nums), len(cats))
    n = status.size
    blank = status == K.BLANK
    bad = np.flatnonzero((status != K.OK) & ~blank)
    stats.blank_lines += int(blank.sum())
    stats.records_read += int(n - blank.sum())
    for r in bad[: (1 if on_error == "raise" else len(bad))]:
        reason = _REASON[int(status[r])]
        line = bytes(block[begins[r]:begins[r + 1] - 1])
        msg = _message(line, int(status[r]), int(counts[r]), int(errcol[r]), schema, lab, nums, ncols, delim)
        if on_error == "raise":
            raise InputError(f"{reason}: {msg}", path=path, line=first + int(r), reason=reason)
        stats.skip(reason, 1, f"{path}:{first + int(r)}: {reason}: {msg}")
    allgood = bad.size == 0 and not blank.any()
    good = np.arange(n) if allgood else np.flatnonzero(status == K.OK)
    cols, keyed, long = [], [], [j for j in range(len(cats)) if widths[j] > 8]
    if long:  # a column with values of more than 8 bytes: its bytes, not keys
        starts, ends, _, _ = K.split_fields(buf, ncols, delim)
    for j, c in enumerate(cats):
        if j in long:
            w = int((ends[good, c] - starts[good, c]).max()) if good.size else 0
            arr = K.gather(buf, starts, ends, good, c, w)
            cols.append(arr.view(f"S{arr.shape[1]}").reshape(-1))
            keyed.append(None)
        else:
            cols.append(None)
            keyed.append(keys[j] if allgood else keys[j][good])
    lines = first + good.astype(np.int64)
    if allgood:
        return Rows(lines, labels, values, missing, cols, keyed), n
    return Rows(lines, labels[good], values[good], missing[good], cols, keyed), n


def _message(line: bytes, status: int, count: int, j: int, schema, lab, nums, ncols, delim) -> str:
    fields = line.rstrip(b"\r").split(bytes([delim]))
    if status == K.BAD_FIELDS:
        sep = "tab" if delim == 9 else "comma"
        return f"expected {ncols} {sep}-separated fields, got {count}"
    if status == K.BAD_LABEL:
        return f"label {fields[lab].decode('utf-8', 'replace')!r} is not 0 or 1"
    text = fields[nums[j]].decode("utf-8", "replace")
    if status == K.OVERFLOW:
        return f"column {schema.numeric[j]}: {text!r} is out of the int64 range"
    return f"column {schema.numeric[j]}: {text!r} is not an integer"
