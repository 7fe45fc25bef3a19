"""How a set's records hold its rows: the ``example`` layout (one ``tf.train.Example`` per row, the default) or
the ``columnar`` layout (one record per block of rows, each feature a contiguous column of raw values).

A columnar record is a ``tf.train.Example`` with one ``BytesList`` feature (one value) per schema feature: the
block's ``n`` rows of that feature, row-major, ``n * width`` values of the feature's *stored* type,
little-endian. ``n`` follows from the bytes (``len / (width * itemsize)``). In every shard every block holds
exactly ``block_rows`` rows except the shard's last block (1 to ``block_rows`` rows), so a row's position in a
shard names its block (``row // block_rows``) and its place in it. A manifest's ``records`` and each shard's
``records`` count rows in both layouts.

The stored type of a feature is the narrowest one that holds every value of the whole set exactly; readers
decode to the schema's dtype (``int64`` ids, ``float32`` values and labels), so a model sees the same tensors
from either layout. A ``float32`` feature whose values are all integers (no ``-0.0``) in a narrower integer
range may be stored as that integer type. Variable-length features have no columnar form.

In the manifest: ``"layout": {"kind": "columnar", "block_rows": 1024, "stored": {"ids": "int32", ...}}``; the key
is absent for the example layout (manifests of example sets read and serialize exactly as before)."""
from __future__ import annotations

from dataclasses import dataclass

__all__ = ["EXAMPLE", "COLUMNAR", "LAYOUTS", "STORED_TYPES", "INT_TYPES", "DEFAULT_BLOCK_ROWS", "RecordLayout",
           "narrowest_int", "EXAMPLE_LAYOUT"]

EXAMPLE = "example"
COLUMNAR = "columnar"
LAYOUTS = (EXAMPLE, COLUMNAR)
# integer stored types, narrowest first, with their ranges; every one is a tf.io.decode_raw out_type
INT_TYPES = (("uint8", 0, 2**8 - 1), ("int8", -2**7, 2**7 - 1), ("uint16", 0, 2**16 - 1),
             ("int16", -2**15, 2**15 - 1), ("int32", -2**31, 2**31 - 1), ("int64", -2**63, 2**63 - 1))
STORED_TYPES = tuple(t for t, _, _ in INT_TYPES) + ("float32",)
DEFAULT_BLOCK_ROWS = 1024  # measured: rows per CPU-second plateau from 1024 up (docs/libsvm.md, columnar layout)
MAX_BLOCK_ROWS = 1 << 20


def narrowest_int(lo: int, hi: int) -> str:
    """The narrowest integer stored type holding every value in [lo, hi] (an empty range, lo > hi, is uint8)."""
    if lo > hi:
        return "uint8"
    for name, tlo, thi in INT_TYPES:
        if tlo <= lo and hi <= thi:
            return name
    raise ValueError(f"values in [{lo}, {hi}] fit no stored integer type")


@dataclass(frozen=True)
class RecordLayout:
    """A set's record layout. ``example``: no other fields. ``columnar``: ``block_rows`` (rows per full block)
    and ``stored`` (feature name -> stored type, as sorted (name, type) pairs)."""

    kind: str = EXAMPLE
    block_rows: int | None = None
    stored: tuple[tuple[str, str], ...] = ()

    def __post_init__(self):
        if self.kind not in LAYOUTS:
            raise ValueError(f"layout must be one of {LAYOUTS}, got {self.kind!r}")
        if self.kind == EXAMPLE:
            if self.block_rows is not None or self.stored:
                raise ValueError(f"the example layout has no block_rows/stored types, got {self.block_rows!r} / "
                                 f"{self.stored!r}")
            return
        rows = self.block_rows
        if isinstance(rows, bool) or not isinstance(rows, int) or not 1 <= rows <= MAX_BLOCK_ROWS:
            raise ValueError(f"block_rows must be an integer in [1, {MAX_BLOCK_ROWS}], got {rows!r}")
        stored = dict(self.stored.items() if isinstance(self.stored, dict) else self.stored)
        if not stored:
            raise ValueError("a columnar layout needs the stored type of every feature, got none")
        for name, stype in stored.items():
            if stype not in STORED_TYPES:
                raise ValueError(f"feature {name!r}: stored type must be one of {STORED_TYPES}, got {stype!r}")
        object.__setattr__(self, "stored", tuple(sorted(stored.items())))

    @property
    def columnar(self) -> bool:
        return self.kind == COLUMNAR

    def stored_type(self, name: str) -> str:
        """The stored type of feature ``name`` (a KeyError naming it for a feature the layout lacks)."""
        for n, t in self.stored:
            if n == name:
                return t
        raise KeyError(f"columnar layout has no stored type for feature {name!r}")

    def check_schema(self, schema) -> None:
        """A ValueError unless a columnar layout covers exactly the schema's features, all of fixed width, with
        float stored types only for float32 features."""
        if not self.columnar:
            return
        names = sorted(f.name for f in schema.features)
        if names != [n for n, _ in self.stored]:
            raise ValueError(f"columnar layout stores {[n for n, _ in self.stored]}, the schema has {names}")
        for f in schema.features:
            if f.varlen:
                raise ValueError(f"feature {f.name!r} has variable length: the columnar layout holds fixed-width "
                                 f"features only")
            if f.dtype not in ("int64", "float32"):
                raise ValueError(f"feature {f.name!r}: dtype {f.dtype} has no columnar form")
            if f.dtype == "int64" and self.stored_type(f.name) == "float32":
                raise ValueError(f"feature {f.name!r}: int64 values cannot be stored as float32")

    def to_json(self) -> dict | None:
        """The manifest's ``layout`` entry (None for the example layout: the key is left out)."""
        if not self.columnar:
            return None
        return {"kind": self.kind, "block_rows": self.block_rows, "stored": dict(self.stored)}

    @classmethod
    def from_json(cls, data) -> "RecordLayout":
        if data is None:
            return EXAMPLE_LAYOUT
        if not isinstance(data, dict):
            raise ValueError(f"layout must be an object, got {data!r}")
        return cls(data.get("kind", EXAMPLE), data.get("block_rows"), tuple(dict(data.get("stored") or {}).items()))


EXAMPLE_LAYOUT = RecordLayout()
