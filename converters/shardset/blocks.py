"""Rows in, columnar blocks out (``tfrecord.layout``): the framed length of a block of any row count, without
encoding it (fixed-width columns: a block's length follows from its rows), and ``Blocks``, which groups a stream
of rows into framed blocks of ``block_rows`` (the last one shorter) for a shard writer. Every writer of a
columnar set (the converters, ``reshard --layout columnar``) encodes through it, so equal rows give equal
bytes."""
from __future__ import annotations

from typing import Iterator

import numpy as np

from ..tfrecord.columnar import encode_block
from ..tfrecord.crc import FRAME_OVERHEAD, frame_payloads
from ..tfrecord.layout import RecordLayout
from ..tfrecord.schema import Schema

__all__ = ["block_length", "block_lengths", "Blocks"]


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


def block_lengths(rows: int, schema: Schema, layout: RecordLayout) -> np.ndarray:
    """Framed lengths of the blocks of a stream of ``rows`` rows: full blocks of ``layout.block_rows``, the last
    one shorter when the rows do not fill it."""
    full, rest = divmod(int(rows), layout.block_rows)
    out = np.full(full + (1 if rest else 0), block_length(layout.block_rows, schema, layout), np.int64)
    if rest:
        out[-1] = block_length(rest, schema, layout)
    return out


class Blocks:
    """Batches of rows in (columns of any row count), framed blocks of ``block_rows`` rows out: ``add`` and
    ``finish`` yield ``(framed bytes, framed lengths, rows per block)``; ``finish`` writes the short last
    block."""

    def __init__(self, schema: Schema, layout: RecordLayout):
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
