"""The writer side of the columnar layout (``tfrecord.layout``), format-free: the stored types chosen from a
whole set's value ranges, the shard cuts of a set of blocks (pure), and the packer that turns a stream of rows
(column arrays, any number of rows at a time) into framed block records.

Every engine cuts a columnar set the same way: the set's rows, in order, form blocks of ``block_rows`` rows
(the last one shorter); the greedy shard-cut rule (``cuts.plan_cuts``, a shard closed before a block would
cross the limit) runs over the blocks' framed lengths, which follow from the row count and the stored types
alone. So a shard holds whole blocks, all full but the set's last one, and its row range is known before any
block is written."""
from __future__ import annotations

from typing import Iterable, Iterator

import numpy as np

from ..tfrecord.columnar import ValueRange, encode_block, stored_for
from ..tfrecord.crc import FRAME_OVERHEAD, frame_payloads
from ..tfrecord.layout import COLUMNAR, RecordLayout
from ..tfrecord.schema import Schema
from .cuts import plan_cuts

__all__ = ["choose_layout", "column_ranges", "merge_ranges", "ranges_json", "ranges_from_json", "block_bytes",
           "shard_row_ranges", "BlockPacker", "framed_blocks"]


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
    return layout


def block_bytes(rows: int, schema: Schema, layout: RecordLayout) -> int:
    """The framed bytes of one block of ``rows`` rows (the same for every block of that many rows: every
    feature has a fixed width and a fixed stored type)."""
    zeros = {f.name: np.zeros((rows, f.width) if f.shape else (rows,), np.uint8) for f in schema.features}
    return len(encode_block(zeros, schema, layout)) + FRAME_OVERHEAD


def shard_row_ranges(rows: int, schema: Schema, layout: RecordLayout, limit: int) -> list[tuple[int, int]]:
    """Pure: the ``[first, stop)`` rows of every shard of a columnar set of ``rows`` rows under the byte limit
    ``limit`` (blocks of ``layout.block_rows``, the last shorter; a block never crosses the limit unless it is
    alone in its shard). No rows: no shard."""
    b = layout.block_rows
    full, rest = divmod(rows, b)
    if rows == 0:
        return []
    lengths = np.full(full + (1 if rest else 0), block_bytes(b, schema, layout) if full else 0, np.int64)
    if rest:
        lengths[-1] = block_bytes(rest, schema, layout)
    starts = [0] + plan_cuts(lengths, 0, limit)
    ends = starts[1:] + [len(lengths)]
    return [(s * b, min(e * b, rows)) for s, e in zip(starts, ends)]


def framed_blocks(blocks: list[dict[str, np.ndarray]], schema: Schema, layout: RecordLayout
                  ) -> tuple[np.ndarray, int]:
    """Blocks (column dicts) as TFRecord-framed records: (concatenated framed bytes, rows they hold)."""
    payloads = [encode_block(cols, schema, layout) for cols in blocks]
    if not payloads:
        return np.zeros(0, np.uint8), 0
    offsets = np.concatenate([[0], np.cumsum([len(p) for p in payloads])])
    framed, _ = frame_payloads(np.frombuffer(b"".join(payloads), np.uint8), offsets)
    return framed, sum(len(next(iter(cols.values()))) for cols in blocks)


class BlockPacker:
    """Rows in (``add``: a dict of column arrays, any number of rows), framed blocks out as ``(framed bytes,
    rows)``: full blocks as soon as they are complete, the rest at ``finish`` (one shorter block, the shard's
    last). Rows, not records, are what a columnar shard counts."""

    def __init__(self, schema: Schema, layout: RecordLayout):
        self.schema, self.layout = schema, layout
        self._pending: list[dict[str, np.ndarray]] = []
        self._rows = 0

    def _take(self, upto_full: bool) -> list[dict[str, np.ndarray]]:
        if not self._pending:
            return []
        names = [f.name for f in self.schema.features]
        cols = {n: np.concatenate([p[n] for p in self._pending]) for n in names}
        b = self.layout.block_rows
        n_out = (self._rows // b) * b if upto_full else self._rows
        blocks = [{n: cols[n][a:a + b] for n in names} for a in range(0, n_out, b)]
        self._pending = [{n: cols[n][n_out:] for n in names}] if n_out < self._rows else []
        self._rows -= n_out
        return blocks

    def add(self, columns: dict[str, np.ndarray]) -> Iterator[tuple[np.ndarray, int]]:
        """Take rows; yield ``(framed bytes, rows)`` of the blocks they complete."""
        n = len(next(iter(columns.values())))
        if n == 0:
            return
        self._pending.append(columns)
        self._rows += n
        if self._rows >= self.layout.block_rows:
            blocks = self._take(upto_full=True)
            if blocks:
                yield framed_blocks(blocks, self.schema, self.layout)

    def finish(self) -> Iterator[tuple[np.ndarray, int]]:
        """Yield the rest: one shorter block (nothing if no row is left)."""
        blocks = self._take(upto_full=False)
        if blocks:
            yield framed_blocks(blocks, self.schema, self.layout)
