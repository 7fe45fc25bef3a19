"""Columnar blocks (the wire form ``tfrecord.layout`` describes): encode a block of rows into one record, decode
and check a record, and choose the stored types from the values' ranges. Pure NumPy, no TensorFlow.

``encode_block`` writes a ``tf.train.Example`` by hand — one ``BytesList`` feature per column, features in name
order — so equal columns give equal bytes on every engine. ``decode_block`` accepts exactly that form (field
order included) and raises ``BlockError`` saying what is wrong, which is what ``verify`` reports per block."""
from __future__ import annotations

from typing import NamedTuple

import numpy as np

from ..util.protowire import field, varint
from .layout import RecordLayout, narrowest_int

__all__ = ["BlockError", "encode_block", "decode_block", "stored_for", "block_rows_of", "ValueRange", "BlockTemplate",
           "block_template"]


class BlockError(ValueError):
    """A record that is not a well-formed columnar block of its set's layout."""


def _column_bytes(name: str, column: np.ndarray, stype: str, width: int) -> bytes:
    a = np.asarray(column)
    if a.ndim == 1 and width == 1:
        a = a.reshape(-1, 1)
    if a.ndim != 2 or a.shape[1] != width:
        raise ValueError(f"column {name!r}: expected shape (n, {width}), got {a.shape}")
    stored = a.astype(np.dtype(stype).newbyteorder("<"), copy=False)
    if not np.array_equal(stored, a, equal_nan=stored.dtype.kind == "f"):  # nan/inf kept (--allow-nonfinite)
        raise ValueError(f"column {name!r}: values do not fit the stored type {stype}")
    return np.ascontiguousarray(stored).tobytes()


def encode_block(columns: dict[str, np.ndarray], schema, layout: RecordLayout) -> bytes:
    """One record holding a block of rows: ``columns[name]`` is an (n, width) (or (n,) for width 1) array of the
    feature's values for every schema feature, n >= 1 equal across columns. A ValueError names a column whose
    shape or values do not fit."""
    rows = {len(np.asarray(c)) for c in columns.values()}
    if len(rows) != 1 or 0 in rows:
        raise ValueError(f"a block needs >= 1 rows, the same in every column, got {sorted(rows)}")
    if sorted(columns) != [f.name for f in schema.features]:
        raise ValueError(f"a block needs the columns {[f.name for f in schema.features]}, got {sorted(columns)}")
    entries = b""
    for f in schema.features:   # Schema keeps its features in name order
        data = _column_bytes(f.name, columns[f.name], layout.stored_type(f.name), f.width)
        feature = field(1, field(1, data))                             # Feature.bytes_list{value: data}
        entries += field(1, field(1, f.name.encode()) + field(2, feature))
    return field(1, entries)                                              # Example.features


class BlockTemplate(NamedTuple):
    """The exact form of a block of ``rows`` rows: its length, and per column (schema order) the bytes before
    its data (``headers[c]`` at byte ``header_at[c]``; the first one holds the Example's own header) and where
    its data lies (``data_at[c]``, ``data_len[c]`` bytes). A record of this length whose header bytes match is
    the block ``encode_block`` writes for ``rows`` rows; nothing else is."""

    rows: int
    length: int
    headers: tuple[bytes, ...]
    header_at: tuple[int, ...]
    data_at: tuple[int, ...]
    data_len: tuple[int, ...]


def _prefix(number: int, payload_len: int) -> bytes:
    return varint(number << 3 | 2) + varint(payload_len)


def block_template(schema, layout: RecordLayout, rows: int) -> BlockTemplate:
    """The :class:`BlockTemplate` of a block of ``rows`` rows (pure arithmetic: no block is built)."""
    heads, lens = [], []
    for f in schema.features:   # entry = {1: name, 2: Feature{1: BytesList{1: data}}}
        d = rows * f.width * np.dtype(layout.stored_type(f.name)).itemsize
        value = _prefix(1, d)
        blist = _prefix(1, len(value) + d)
        feat = _prefix(2, len(blist) + len(value) + d)
        key = field(1, f.name.encode())
        payload = len(key) + len(feat) + len(blist) + len(value) + d
        heads.append(_prefix(1, payload) + key + feat + blist + value)
        lens.append(d)
    entries = sum(len(h) + d for h, d in zip(heads, lens))
    heads[0] = _prefix(1, entries) + heads[0]
    header_at, data_at, pos = [], [], 0
    for h, d in zip(heads, lens):
        header_at.append(pos)
        data_at.append(pos + len(h))
        pos += len(h) + d
    return BlockTemplate(rows, pos, tuple(heads), tuple(header_at), tuple(data_at), tuple(lens))


def _read_len(buf: bytes, pos: int, where: str) -> tuple[int, int]:
    shift = value = 0
    while True:
        if pos >= len(buf) or shift > 63:
            raise BlockError(f"{where}: truncated length")
        b = buf[pos]
        pos += 1
        value |= (b & 0x7F) << shift
        shift += 7
        if not b & 0x80:
            return value, pos


def _take(buf: bytes, pos: int, tag: int, where: str) -> tuple[bytes, int]:
    if pos >= len(buf) or buf[pos] != tag:
        raise BlockError(f"{where}: expected field tag {tag:#04x} at byte {pos}")
    n, pos = _read_len(buf, pos + 1, where)
    if pos + n > len(buf):
        raise BlockError(f"{where}: field of {n} bytes at byte {pos} runs past the record's end ({len(buf)} bytes)")
    return buf[pos:pos + n], pos + n


def decode_block(record: bytes, schema, layout: RecordLayout) -> dict[str, np.ndarray]:
    """The block's columns, each an (n, width) array ((n,) for a scalar feature) of the schema's dtype (int64 / float32). A BlockError says
    what is wrong with a record that is not a block of this layout (missing or extra columns, a column whose
    bytes are not whole rows, columns of different row counts)."""
    body, end = _take(record, 0, 0x0A, "block")
    if end != len(record):
        raise BlockError(f"block: {len(record) - end} bytes after the Example")
    out: dict[str, np.ndarray] = {}
    pos, names = 0, [f.name for f in schema.features]
    for f in schema.features:
        entry, pos = _take(body, pos, 0x0A, "block")
        key, kpos = _take(entry, 0, 0x0A, "block")
        if key != f.name.encode():
            raise BlockError(f"block: column {key.decode(errors='replace')!r} where {f.name!r} was expected "
                             f"(columns {names})")
        feature, kpos2 = _take(entry, kpos, 0x12, f"column {f.name!r}")
        blist, fend = _take(feature, 0, 0x0A, f"column {f.name!r}")
        data, bend = _take(blist, 0, 0x0A, f"column {f.name!r}")
        if kpos2 != len(entry) or fend != len(feature) or bend != len(blist):
            raise BlockError(f"column {f.name!r}: more than one value")
        dt = np.dtype(layout.stored_type(f.name)).newbyteorder("<")
        row_bytes = dt.itemsize * f.width
        if len(data) == 0 or len(data) % row_bytes:
            raise BlockError(f"column {f.name!r}: {len(data)} bytes are not whole rows of {row_bytes} bytes")
        shape = (-1, f.width) if f.shape else (-1,)
        out[f.name] = np.frombuffer(data, dt).reshape(shape).astype(f.dtype)
    if pos != len(body):
        raise BlockError(f"block: columns beyond the schema's {names}")
    rows = {len(c) for c in out.values()}
    if len(rows) != 1:
        raise BlockError(f"block: columns of different row counts {sorted(rows)}")
    return out


def block_rows_of(record: bytes, schema, layout: RecordLayout) -> int:
    """Rows in one block (decodes it: a BlockError for a malformed one)."""
    return len(next(iter(decode_block(record, schema, layout).values())))


class ValueRange:
    """Running facts of one feature's values across a whole set, enough to choose its stored type: min, max,
    and (for float32 features) whether every value is an integer other than -0.0. Mergeable across workers."""

    __slots__ = ("lo", "hi", "integral")

    def __init__(self, lo: int | float = 0, hi: int | float = -1, integral: bool = True):
        self.lo, self.hi, self.integral = lo, hi, integral

    def add(self, values: np.ndarray) -> "ValueRange":
        a = np.asarray(values)
        if a.size == 0:
            return self
        lo, hi = a.min().item(), a.max().item()
        if self.lo > self.hi:
            self.lo, self.hi = lo, hi
        else:
            self.lo, self.hi = min(self.lo, lo), max(self.hi, hi)
        if a.dtype.kind == "f" and self.integral:
            with np.errstate(invalid="ignore"):
                self.integral = bool(np.all(np.isfinite(a)) and np.all(a == np.trunc(a))
                                     and not np.any((a == 0) & np.signbit(a)))
        return self

    def merge(self, other: "ValueRange") -> "ValueRange":
        if other.lo <= other.hi:
            if self.lo > self.hi:
                self.lo, self.hi = other.lo, other.hi
            else:
                self.lo, self.hi = min(self.lo, other.lo), max(self.hi, other.hi)
        self.integral = self.integral and other.integral
        return self

    def to_json(self) -> list:
        return [self.lo, self.hi, self.integral]

    @classmethod
    def from_json(cls, data) -> "ValueRange":
        return cls(*data)


_FLOAT_EXACT_INT = 2**24  # every integer of magnitude <= 2**24 is exact in float32


def stored_for(dtype: str, rng: ValueRange) -> str:
    """The narrowest stored type for a feature of ``dtype`` whose values span ``rng``: an integer type for int64
    features; for float32 features an integer type when every value is an exact integer in float32's exact
    range and the integer type is narrower than 4 bytes, else float32."""
    if dtype == "int64":
        return narrowest_int(int(rng.lo), int(rng.hi))
    if dtype != "float32":
        raise ValueError(f"dtype {dtype!r} has no columnar form")
    if rng.integral and (rng.lo > rng.hi or -_FLOAT_EXACT_INT <= rng.lo and rng.hi <= _FLOAT_EXACT_INT):
        name = narrowest_int(int(rng.lo), int(rng.hi)) if rng.lo <= rng.hi else "uint8"
        if np.dtype(name).itemsize < 4:
            return name
    return "float32"
