"""The feature schema of TFRecord files tfpipe did not write, inferred from their records (pure: no I/O, no
TensorFlow).

``decode_example`` reads a record as a ``tf.train.Example`` straight from the protobuf wire format (strictly:
any field an Example cannot hold means the record is not one) and gives each feature's kind and value count.
``SchemaTally`` adds records up (and tallies of other files: ``merge``) and ``result`` turns the counts into a
``Schema``: a feature in every record with the same count k is fixed (shape ``()`` for k == 1, else ``(k,)``),
any other is variable length; a feature missing from some records is variable length and reported with its
share. Records that are not Examples (or Examples without any feature) make the set one of raw records
(``Schema.raw_records()``)."""
from __future__ import annotations

from dataclasses import dataclass, field

from ..tfrecord.schema import FeatureSpec, Schema

__all__ = ["decode_example", "SchemaTally", "Inferred", "KINDS"]

KINDS = {1: "string", 2: "float32", 3: "int64"}  # Feature's oneof field number -> schema dtype


_HIGH = bytes(range(0x80, 0x100))


class _NotExample(ValueError):
    pass


def _varint(b: bytes, i: int, end: int) -> tuple[int, int]:
    shift = value = 0
    while True:
        if i >= end or shift > 63:
            raise _NotExample("varint")
        c = b[i]
        i += 1
        value |= (c & 0x7F) << shift
        if c < 0x80:
            return value, i
        shift += 7


def _fields(b: bytes, i: int, end: int) -> list[tuple[int, int, int, int]]:
    """(field number, wire type, start, stop) of each field in ``b[i:end]`` (value bounds; a varint's bounds
    cover its bytes). One-byte keys and lengths (the usual case) are read inline."""
    out = []
    while i < end:
        key = b[i]
        if key < 0x80:
            i += 1
        else:
            key, i = _varint(b, i, end)
        num, wt = key >> 3, key & 7
        if num == 0:
            raise _NotExample("field 0")
        if wt == 2:
            if i >= end:
                raise _NotExample("length")
            n = b[i]
            if n < 0x80:
                i += 1
            else:
                n, i = _varint(b, i, end)
            j = i + n
        elif wt == 0:
            _, j = _varint(b, i, end)
        elif wt == 5:
            j = i + 4
        elif wt == 1:
            j = i + 8
        else:
            raise _NotExample("wire type")
        if j > end:
            raise _NotExample("length")
        out.append((num, wt, i, j))
        i = j
    return out


def _count(b: bytes, kind: int, i: int, end: int) -> int:
    """Values in a BytesList / FloatList / Int64List message ``b[i:end]`` (packed or not)."""
    n = 0
    for num, wt, a, z in _fields(b, i, end):
        if num != 1:
            raise _NotExample("list field")
        if kind == 1 and wt == 2:
            n += 1
        elif kind == 2 and wt == 2:  # packed floats
            if (z - a) % 4:
                raise _NotExample("packed floats")
            n += (z - a) // 4
        elif kind == 2 and wt == 5:
            n += 1
        elif kind == 3 and wt == 2:  # packed varints: one value per byte below 0x80
            if z > a and b[z - 1] >= 0x80:
                raise _NotExample("packed varints")
            n += len(b[a:z].translate(None, _HIGH))  # the bytes below 0x80 (C speed)
        elif kind == 3 and wt == 0:
            n += 1
        else:
            raise _NotExample("list value")
    return n


def decode_example(record: bytes) -> dict[str, tuple[str, int]] | None:
    """``{feature name: (dtype, value count)}`` of a serialized ``tf.train.Example``, or None when the record
    is not one (any field an Example does not have, a malformed length, a name that is not UTF-8)."""
    b = bytes(record)
    out: dict[str, tuple[str, int]] = {}
    try:
        for num, wt, a, z in _fields(b, 0, len(b)):
            if num != 1 or wt != 2:
                return None
            for fnum, fwt, fa, fz in _fields(b, a, z):  # Features: map<string, Feature> feature = 1
                if fnum != 1 or fwt != 2:
                    return None
                name, feat = None, None
                for enum, ewt, ea, ez in _fields(b, fa, fz):
                    if enum == 1 and ewt == 2:
                        name = b[ea:ez].decode("utf-8")
                    elif enum == 2 and ewt == 2:
                        feat = (ea, ez)
                    else:
                        return None
                if not name:
                    return None
                kind, count = None, 0
                for knum, kwt, ka, kz in _fields(b, *feat) if feat else ():
                    if knum not in KINDS or kwt != 2:
                        return None
                    kind, count = knum, _count(b, knum, ka, kz)  # a oneof: the last one set wins
                if kind is None:  # a Feature with no list: parse_example refuses it for any spec
                    return None
                out[name] = (KINDS[kind], count)  # a map: a repeated key takes the last value
    except (_NotExample, UnicodeDecodeError):
        return None
    return out


@dataclass
class _Feature:
    dtype: str
    present: int = 0
    lo: int = -1
    hi: int = -1
    dtypes: set = field(default_factory=set)

    def add(self, dtype: str, n: int) -> None:
        self.dtypes.add(dtype)
        self.present += 1
        self.lo = n if self.lo < 0 else min(self.lo, n)
        self.hi = max(self.hi, n)

    def merge(self, o: "_Feature") -> None:
        self.dtypes |= o.dtypes
        self.present += o.present
        if o.present:
            self.lo = o.lo if self.lo < 0 else min(self.lo, o.lo)
            self.hi = max(self.hi, o.hi)


@dataclass(frozen=True)
class Inferred:
    """What ``SchemaTally.result`` gives: the schema (``Schema.raw_records()`` for raw records), why it is raw
    (or None), and per feature ``{"dtype", "present" (share of records), "min_values", "max_values"}``."""

    schema: Schema
    raw_reason: str | None
    features: dict


class SchemaTally:
    """Feature kinds and value counts over records (``add``), tallies of other files (``merge``)."""

    def __init__(self):
        self.records = 0
        self.not_example = 0
        self.first_bad: int | None = None  # index of the first record that is not an Example
        self.feats: dict[str, _Feature] = {}

    def add(self, record: bytes) -> None:
        d = decode_example(record)
        if d is None:
            if self.first_bad is None:
                self.first_bad = self.records
            self.not_example += 1
        else:
            for name, (dtype, n) in d.items():
                f = self.feats.get(name)
                if f is None:
                    f = self.feats[name] = _Feature(dtype)
                f.add(dtype, n)
        self.records += 1

    def merge(self, other: "SchemaTally") -> None:
        if other.first_bad is not None and self.first_bad is None:
            self.first_bad = self.records + other.first_bad
        self.records += other.records
        self.not_example += other.not_example
        for name, f in other.feats.items():
            if name in self.feats:
                self.feats[name].merge(f)
            else:
                self.feats[name] = f

    def result(self, label: str | None = "label") -> Inferred:
        """The schema the records share; ``label`` names the label feature when the records have it."""
        if not self.records:
            return Inferred(Schema.raw_records(), "no records", {})
        if self.not_example:
            return Inferred(Schema.raw_records(), f"{self.not_example:,} of {self.records:,} records are not "
                                          "tf.train.Example", {})
        if not self.feats:
            return Inferred(Schema.raw_records(), "the records are tf.train.Example without features", {})
        mixed = sorted(n for n, f in self.feats.items() if len(f.dtypes) > 1)
        if mixed:
            kinds = "/".join(sorted(self.feats[mixed[0]].dtypes))
            return Inferred(Schema.raw_records(), f"feature {mixed[0]!r} holds {kinds} in different records", {})
        specs, report = [], {}
        for name, f in sorted(self.feats.items()):
            fixed = f.present == self.records and f.lo == f.hi and f.lo > 0
            shape = (None if not fixed else () if f.lo == 1 else (f.lo,))
            specs.append(FeatureSpec(name, f.dtype, shape))
            report[name] = {"dtype": f.dtype, "present": round(f.present / self.records, 6),
                            "min_values": f.lo, "max_values": f.hi}
        return Inferred(Schema(tuple(specs), label=label if label in self.feats else None), None, report)
