"""Feature schema of a shard set: fixed-length int64/float32 features, plus which one is the label."""
from __future__ import annotations

from dataclasses import dataclass

__all__ = ["FeatureSpec", "Schema"]

_DTYPES = ("int64", "float32")


@dataclass(frozen=True)
class FeatureSpec:
    """One fixed-length feature: name, dtype ("int64" or "float32") and shape (() or (k,))."""

    name: str
    dtype: str
    shape: tuple[int, ...] = ()

    def __post_init__(self):
        if not self.name or not isinstance(self.name, str):
            raise ValueError(f"feature name must be a non-empty string, got {self.name!r}")
        if self.dtype not in _DTYPES:
            raise ValueError(f"feature {self.name!r}: dtype must be one of {_DTYPES}, got {self.dtype!r}")
        shape = tuple(int(s) for s in self.shape)
        if len(shape) > 1 or any(s <= 0 for s in shape):
            raise ValueError(f"feature {self.name!r}: shape must be () or (k,) with k > 0, got {self.shape!r}")
        object.__setattr__(self, "shape", shape)

    @property
    def width(self) -> int:
        return self.shape[0] if self.shape else 1

    def to_json(self) -> dict:
        return {"dtype": self.dtype, "shape": list(self.shape)}


@dataclass(frozen=True)
class Schema:
    """The features of every record of a shard set, plus which one is the label (if any)."""

    features: tuple[FeatureSpec, ...]
    label: str | None = None

    def __post_init__(self):
        names = [f.name for f in self.features]
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

    def to_json(self) -> dict:
        return {"features": {f.name: f.to_json() for f in self.features}, "label": self.label}

    @classmethod
    def from_json(cls, data: dict) -> "Schema":
        feats = tuple(FeatureSpec(name, spec["dtype"], tuple(spec["shape"]))
                      for name, spec in data["features"].items())
        return cls(feats, data.get("label"))
