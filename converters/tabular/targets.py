"""The models a tabular conversion writes for, as data: one small class per target, chosen once by name
(``TARGETS[options.target]``). A target says which features a record has and their widths (``schema``), what
each categorical column adds to its ids (``offsets``), the largest id it stores (``top_id``), each feature's
payload bytes for the framed record lengths (``payloads``), how the compact rows pass 1 keeps become its
features in pass 2 (``expand``), the dtypes a columnar block stores them at (``stored``) and what the manifest's
``extra`` says of it (``extra``).

* DeepFM: ``label`` float32, ``ids`` int64[F] and ``values`` float32[F] (F = numeric + categorical fields):
  one id space — the numeric fields are ids 0..numeric - 1, then each categorical column's table follows the
  one before (``numeric + the sum of the earlier table sizes``); ``values`` holds the numeric values, then 1.0
  for every categorical field.
* DLRM: ``label`` float32, ``dense`` float32[numeric] and ``sparse`` int64[categorical] (a side without
  columns left out): each column's ids in its own table."""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..tfrecord.examples import varint_lengths
from ..tfrecord.layout import narrowest_int
from ..tfrecord.schema import FeatureSpec, Schema
from .encode import ColumnFacts

__all__ = ["Target", "DeepFM", "DLRM", "TARGETS", "target_named"]

_LABEL = FeatureSpec("label", "float32", ())


@dataclass(frozen=True)
class Target:
    """What the targets share: a name, the feature that holds the categorical ids (``ids_feature``)."""

    name: str
    ids_feature: str

    def extra(self, facts: ColumnFacts, numeric: int) -> dict:
        """What the manifest's ``extra`` says of the target: its name, ``feature_size`` (numeric fields + the
        categorical columns' table sizes: DeepFM's id space) and ``numeric_fields``."""
        return {"target": self.name, "feature_size": facts.feature_size(numeric), "numeric_fields": numeric}

    def stored(self, schema: Schema, top: int) -> dict[str, str]:
        """The dtype each feature is stored at in a columnar block: the label uint8 (0 or 1), the ids the
        narrowest integer holding ``top``, values float32."""
        return {f.name: ("uint8" if f.name == "label" else narrowest_int(0, top) if f.name == self.ids_feature
                         else "float32") for f in schema.features}


@dataclass(frozen=True)
class DeepFM(Target):
    name: str = "deepfm"
    ids_feature: str = "ids"

    def schema(self, numeric: int, categorical: int) -> Schema:
        width = numeric + categorical
        return Schema((_LABEL, FeatureSpec("ids", "int64", (width,)), FeatureSpec("values", "float32", (width,))),
                      label="label")

    def offsets(self, facts: ColumnFacts, numeric: int) -> np.ndarray:
        """Each column's first global id: ``numeric`` + the sum of the earlier columns' table sizes."""
        return numeric + np.concatenate([[0], np.cumsum(facts.sizes, dtype=np.int64)[:-1]]).astype(np.int64)

    def top_id(self, facts: ColumnFacts, numeric: int) -> int:
        """The last global id."""
        return facts.feature_size(numeric) - 1

    def payloads(self, n: int, numeric: int, categorical: int, varints: np.ndarray) -> dict:
        """Each feature's payload bytes in ``n`` rows (``varints``: each row's categorical ids' varint bytes)."""
        return {"label": np.full(n, 4, np.int64), "values": 4 * (numeric + categorical),
                "ids": varints + int(varint_lengths(np.arange(numeric)).sum())}

    def expand(self, compact: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        label, dense, sparse = compact["label"], compact["dense"], compact["sparse"]
        n, k = dense.shape
        gid = np.empty((n, k + sparse.shape[1]), np.int64)
        gid[:, :k] = np.arange(k, dtype=np.int64)
        gid[:, k:] = sparse
        values = np.ones((n, k + sparse.shape[1]), np.float32)
        values[:, :k] = dense
        return {"label": label, "ids": gid, "values": values}


@dataclass(frozen=True)
class DLRM(Target):
    name: str = "dlrm"
    ids_feature: str = "sparse"

    def schema(self, numeric: int, categorical: int) -> Schema:
        feats = (_LABEL,) + ((FeatureSpec("dense", "float32", (numeric,)),) if numeric else ()) \
            + ((FeatureSpec("sparse", "int64", (categorical,)),) if categorical else ())
        return Schema(feats, label="label")

    def offsets(self, facts: ColumnFacts, numeric: int) -> np.ndarray:
        """Nothing: each column's ids are its own table's."""
        return np.zeros(len(facts.sizes), np.int64)

    def top_id(self, facts: ColumnFacts, numeric: int) -> int:
        """The largest table's last id."""
        return max(facts.sizes, default=1) - 1

    def payloads(self, n: int, numeric: int, categorical: int, varints: np.ndarray) -> dict:
        return {"label": np.full(n, 4, np.int64), "dense": 4 * numeric, "sparse": varints}

    def expand(self, compact: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        label, dense, sparse = compact["label"], compact["dense"], compact["sparse"]
        return ({"label": label} | ({"dense": dense} if dense.shape[1] else {})
                | ({"sparse": sparse.astype(np.int64, copy=False)} if sparse.shape[1] else {}))


TARGETS: dict[str, Target] = {"deepfm": DeepFM(), "dlrm": DLRM()}


def target_named(name: str) -> Target:
    """The target called ``name``; an unknown name is a ``ValueError`` listing the valid ones."""
    try:
        return TARGETS[name]
    except (KeyError, TypeError):
        raise ValueError(f"target must be one of {tuple(TARGETS)}, got {name!r}") from None
