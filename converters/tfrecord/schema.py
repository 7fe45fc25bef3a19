"""Feature schema of a shard set: int64/float32 features of fixed length (shape ``()`` or ``(k,)``) or of
variable length (shape ``None``: a list of any length per record), plus which one is the label.

In the manifest's JSON a fixed feature is ``{"dtype": ..., "shape": [k]}`` and a variable-length one
``{"dtype": ..., "shape": null}``: manifests of fixed-width sets read exactly as before, and a reader that
predates variable-length features fails on ``null`` instead of taking the feature for a scalar.

``string`` features (a ``BytesList``) and raw schemas (``Schema.raw()``: records that are not
``tf.train.Example``, read as bytes) occur only in sets tfpipe adopted (``tfpipe index``), never in its own."""
from __future__ import annotations

from dataclasses import dataclass

__all__ = ["FeatureSpec", "Schema"]

_DTYPES = ("int64", "float32", "string")


@dataclass(frozen=True)
class FeatureSpec:
    """One feature: name, dtype ("int64", "float32"; "string" in adopted sets) and shape: ``()`` (scalar), ``(k,)``
    (k values) or ``None`` (variable length: any number of values, zero included, per record)."""

    name: str
    dtype: str
    shape: tuple[int, ...] | None = ()

    def __post_init__(self):
        if not self.name or not isinstance(self.name, str):
            raise ValueError(f"feature name must be a non-empty string, got {self.name!r}")
        if self.dtype not in _DTYPES:
            raise ValueError(f"feature {self.name!r}: dtype must be one of {_DTYPES}, got {self.dtype!r}")
        if self.shape is None:
            return
        try:
            shape = tuple(int(s) for s in self.shape)
        except (TypeError, ValueError):
            shape = (0, 0)
        if len(shape) > 1 or any(s <= 0 for s in shape):
            raise ValueError(f"feature {self.name!r}: shape must be (), (k,) with k > 0, or None (variable "
                             f"length), got {self.shape!r}")
        object.__setattr__(self, "shape", shape)

    @property
    def varlen(self) -> bool:
        """Whether records hold a list of any length (``shape is None``)."""
        return self.shape is None

    @property
    def width(self) -> int:
        """Values per record of a fixed-length feature (a ValueError for a variable-length one)."""
        if self.shape is None:
            raise ValueError(f"feature {self.name!r} has variable length: no fixed width")
        return self.shape[0] if self.shape else 1

    def to_json(self) -> dict:
        return {"dtype": self.dtype, "shape": None if self.shape is None else list(self.shape)}


@dataclass(frozen=True)
class Schema:
    """The features of every record of a shard set, plus which one is the label (if any). ``raw``: the records
    are not ``tf.train.Example`` (no features: a pipeline yields their bytes, ``parse=False``)."""

    features: tuple[FeatureSpec, ...]
    label: str | None = None
    raw: bool = False

    @classmethod
    def raw_records(cls) -> "Schema":
        """The schema of a set of raw records."""
        return cls((), None, True)

    def __post_init__(self):
        names = [f.name for f in self.features]
        if self.raw:
            if names or self.label is not None:
                raise ValueError(f"a raw schema has no features and no label, got {names} / {self.label!r}")
            return
        if not names:
            raise ValueError("schema needs at least one feature")
        if len(set(names)) != len(names):
            raise ValueError(f"duplicate feature names in schema: {names}")
        if self.label is not None and self.label not in names:
            raise ValueError(f"label {self.label!r} is not one of the features {names}")
        object.__setattr__(self, "features", tuple(sorted(self.features, key=lambda f: f.name)))

    def __getitem__(self, name: str) -> FeatureSpec:
        for f in self.features:
            if f.name == name:
                return f
        raise KeyError(name)

    @property
    def varlen(self) -> tuple[str, ...]:
        """Names of the variable-length features (empty for a fixed-width schema)."""
        return tuple(f.name for f in self.features if f.varlen)

    def to_json(self) -> dict:
        out = {"features": {f.name: f.to_json() for f in self.features}, "label": self.label}
        if self.raw:
            out["raw"] = True
        return out

    @classmethod
    def from_json(cls, data: dict) -> "Schema":
        feats = tuple(FeatureSpec(name, spec["dtype"], None if spec["shape"] is None else tuple(spec["shape"]))
                      for name, spec in data["features"].items())
        return cls(feats, data.get("label"), bool(data.get("raw", False)))
