"""The writer side of the columnar layout (``tfrecord.layout``), format-free: the stored types chosen from a
whole set's value ranges, a block's framed length from its row count alone (fixed-width columns), the shard
cuts of a set of blocks (pure), and ``Blocks``, which groups a stream of rows into framed blocks of
``block_rows`` (the last one shorter). Every writer of a columnar set (the converters on every engine,
``reshard --layout columnar``) encodes through it, so equal rows give equal bytes.

Every engine cuts a columnar set the same way: the set's rows, in order, form blocks of ``block_rows`` rows
(the last one shorter); the greedy shard-cut rule (``cuts.plan_cuts``, a shard closed before a block would
cross the limit) runs over the blocks' framed lengths. So a shard holds whole blocks, all full but the set's
last one, and its row range is known before any block is written."""
from __future__ import annotations

from typing import Iterable, Iterator

import numpy as np

from ..tfrecord.columnar import ValueRange, encode_block, stored_for
from ..tfrecord.crc import FRAME_OVERHEAD, frame_payloads
from ..tfrecord.layout import COLUMNAR, RecordLayout
from ..tfrecord.reader import MAX_RECORD_BYTES
from ..tfrecord.schema import Schema
from .cuts import plan_cuts

__all__ = ["choose_layout", "column_ranges", "merge_ranges", "ranges_json", "ranges_from_json", "block_length",
           "block_lengths", "shard_row_ranges", "max_block_rows", "check_block_bytes", "Blocks"]


def column_ranges(columns: dict[str, np.ndarray]) -> dict[str, ValueRange]:
    """Each column's ``ValueRange`` (what pass 1 of a columnar conversion keeps per unit)."""
    return {name: ValueRange().add(col) for name, col in columns.items()}


def merge_ranges(parts: Iterable[dict[str, ValueRange]]) -> dict[str, ValueRange]:
    """The ranges of several parts merged feature by feature (a feature no part saw stays empty)."""
    out: dict[str, ValueRange] = {}
    for part in parts:
        for name, rng in part.items():
            out.setdefault(name, ValueRange()).merge(rng)
    return out


def ranges_json(ranges: dict[str, ValueRange]) -> dict[str, list]:
    return {name: rng.to_json() for name, rng in sorted(ranges.items())}


def ranges_from_json(data: dict[str, list] | None) -> dict[str, ValueRange]:
    return {name: ValueRange.from_json(v) for name, v in (data or {}).items()}


def choose_layout(schema: Schema, ranges: dict[str, ValueRange], block_rows: int) -> RecordLayout:
    """The columnar layout of a set of ``schema`` whose values span ``ranges`` (the whole set's): each feature
    in the narrowest stored type that holds all its values exactly (``columnar.stored_for``). A ValueError
    (from ``RecordLayout.check_schema``) for a schema with variable-length features."""
    stored = tuple((f.name, stored_for(f.dtype, ranges.get(f.name, ValueRange()))) for f in schema.features)
    layout = RecordLayout(COLUMNAR, block_rows, stored)
    layout.check_schema(schema)
    check_block_bytes(schema, layout)
    return layout


def _vlen(n: int) -> int:
    return max(1, (int(n).bit_length() + 6) // 7)


def _field(payload: int) -> int:
    """Bytes of a length-delimited protobuf field (one-byte tag) with a payload of ``payload`` bytes."""
    return 1 + _vlen(payload) + payload


def block_length(rows: int, schema: Schema, layout: RecordLayout) -> int:
    """Framed bytes of a block of ``rows`` rows (``columnar.encode_block``'s record plus the TFRecord framing)."""
    entries = 0
    for f in schema.features:
        data = rows * f.width * np.dtype(layout.stored_type(f.name)).itemsize
        entries += _field(_field(len(f.name.encode())) + _field(_field(_field(data))))
    return _field(entries) + FRAME_OVERHEAD


def max_block_rows(schema: Schema, layout: RecordLayout) -> int:
    """The most rows a block of this layout holds within ``MAX_RECORD_BYTES`` (the longest record any reader of
    a set takes), at most ``layout.block_rows``; 0 when not even one row fits."""
    lo, hi = 0, layout.block_rows
    while lo < hi:                 # block_length grows with the rows
        mid = (lo + hi + 1) // 2
        if block_length(mid, schema, layout) - FRAME_OVERHEAD <= MAX_RECORD_BYTES:
            lo = mid
        else:
            hi = mid - 1
    return lo


def check_block_bytes(schema: Schema, layout: RecordLayout) -> None:
    """A ValueError in one line when a full block of ``layout.block_rows`` rows would be longer than a record may
    be (``MAX_RECORD_BYTES``: ``verify`` and every reader refuse it), naming the most rows that fit."""
    size = block_length(layout.block_rows, schema, layout) - FRAME_OVERHEAD
    if size > MAX_RECORD_BYTES:
        fit = max_block_rows(schema, layout)
        raise ValueError(f"--block-rows {layout.block_rows}: a block of {layout.block_rows:,} rows of this set is "
                         f"{size:,} bytes, more than the {MAX_RECORD_BYTES >> 20} MiB a record may hold; "
                         + (f"use --block-rows {fit} or fewer" if fit else "not even one row fits"))


def block_lengths(rows: int, schema: Schema, layout: RecordLayout) -> np.ndarray:
    """Framed lengths of the blocks of a stream of ``rows`` rows: full blocks of ``layout.block_rows``, the last
    one shorter when the rows do not fill it."""
    full, rest = divmod(int(rows), layout.block_rows)
    out = np.full(full + (1 if rest else 0), block_length(layout.block_rows, schema, layout), np.int64)
    if rest:
        out[-1] = block_length(rest, schema, layout)
    return out


def shard_row_ranges(rows: int, schema: Schema, layout: RecordLayout, limit: int) -> list[tuple[int, int]]:
    """Pure: the ``[first, stop)`` rows of every shard of a columnar set of ``rows`` rows under the byte limit
    ``limit`` (blocks of ``layout.block_rows``, the last shorter; a block never crosses the limit unless it is
    alone in its shard). No rows: no shard."""
    if rows == 0:
        return []
    b = layout.block_rows
    lengths = block_lengths(rows, schema, layout)
    starts = [0] + plan_cuts(lengths, 0, limit)
    ends = starts[1:] + [len(lengths)]
    return [(s * b, min(e * b, rows)) for s, e in zip(starts, ends)]


class Blocks:
    """Batches of rows in (columns of any row count), framed blocks of ``block_rows`` rows out: ``add`` and
    ``finish`` yield ``(framed bytes, framed lengths, rows per block)``; ``finish`` writes the short last
    block."""

    def __init__(self, schema: Schema, layout: RecordLayout):
        check_block_bytes(schema, layout)    # before any block: a writer never commits one its readers refuse
        self.schema, self.layout = schema, layout
        self._parts: list[dict[str, np.ndarray]] = []
        self._pending = 0

    def add(self, columns: dict[str, np.ndarray]) -> Iterator[tuple[np.ndarray, np.ndarray, np.ndarray]]:
        n = len(next(iter(columns.values())))
        if n == 0:
            return
        self._parts.append(columns)
        self._pending += n
        br = self.layout.block_rows
        if self._pending >= br:
            cols = self._take()
            full = (self._pending // br) * br
            yield self._encode({k: v[:full] for k, v in cols.items()})
            rest = {k: v[full:] for k, v in cols.items()}
            self._pending -= full
            self._parts = [rest] if self._pending else []

    def framed_rows(self, columns: Iterable[dict[str, np.ndarray]]) -> Iterator[tuple[np.ndarray, int]]:
        """Every block of a stream of column batches, the short last one included, as ``(framed bytes, rows)``
        (what a shard writer takes)."""
        for cols in columns:
            for framed, _, rows in self.add(cols):
                yield framed, int(rows.sum())
        for framed, _, rows in self.finish():
            yield framed, int(rows.sum())

    def finish(self) -> Iterator[tuple[np.ndarray, np.ndarray, np.ndarray]]:
        if self._pending:
            cols = self._take()
            self._parts, self._pending = [], 0
            yield self._encode(cols)

    def _take(self) -> dict[str, np.ndarray]:
        if len(self._parts) == 1:
            return self._parts[0]
        return {k: np.concatenate([p[k] for p in self._parts]) for k in self._parts[0]}

    def _encode(self, cols: dict[str, np.ndarray]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        n, br = len(next(iter(cols.values()))), self.layout.block_rows
        records = [encode_block({k: v[a:a + br] for k, v in cols.items()}, self.schema, self.layout)
                   for a in range(0, n, br)]
        offsets = np.zeros(len(records) + 1, np.int64)
        np.cumsum([len(r) for r in records], out=offsets[1:])
        framed, lengths = frame_payloads(np.frombuffer(b"".join(records), np.uint8), offsets)
        rows = np.full(len(records), br, np.int64)
        rows[-1] = n - br * (len(records) - 1)
        return framed, lengths, rows
