"""What decides a tabular conversion's output: ``TabularOptions`` (table schema, numeric transform, vocabulary
or hashing, target, negative downsampling, counting memory, the shared ``ShardOutputOptions``), recorded in the
manifest, and the feature schema each target implies."""
from __future__ import annotations

import os
from dataclasses import dataclass, field

from ..shardset.options import ShardOutputOptions
from ..tfrecord.schema import FeatureSpec, Schema
from ..util.checks import as_int, set_int
from ..util.units import parse_size
from .schema import FORMATS, TableSchema, load_schema

__all__ = ["TabularOptions", "NUMERIC", "TARGETS", "DEFAULT_MEMORY", "target_schema"]

NUMERIC = ("log1p", "minmax")
TARGETS = ("deepfm", "dlrm")
DEFAULT_MEMORY = 256 << 20  # bytes of categorical counts one counting task holds before it spills a sorted run


@dataclass(frozen=True)
class TabularOptions:
    """Everything that determines the output bytes, validated up front.

    ``numeric``: ``log1p`` (missing or negative -> 0, then log1p in float64, stored float32) or ``minmax``
    (missing or negative -> 0, then (v - min) / (max - min) over the counting pass, 0 where max == min).
    ``min_count``: a categorical value seen at least this often over all inputs gets an id (1..V by descending
    count, ties by descending bytes: Keras ``StringLookup.adapt``'s and tf.Transform's order); ``vocab_from``: an
    existing set whose vocabularies (and min-max) are used as they are (no counting pass; the schema, target and
    numeric transform must be the set's); ``hash_buckets``: Keras ``Hashing(num_bins=N)`` bins instead of a
    vocabulary (DeepFM's ids must fit int64). ``negative_rate``: the fraction of label-0 rows kept (seeded by
    ``seed``, per row).
    ``input_format``: ``tsv``, ``csv`` or ``parquet`` for every input (None: by suffix, else by the first line:
    ``reader.file_format``); ``pad_short_rows``: a row with fewer fields reads as if its missing trailing fields
    were empty; ``max_skip_fraction``: a run whose skipped bad rows are all its rows or more than this fraction of
    them fails, writing nothing."""

    schema: TableSchema = field(default_factory=lambda: load_schema("criteo"))
    numeric: str = "log1p"
    min_count: int = 1
    vocab_from: str | None = None
    hash_buckets: int | None = None
    target: str = "deepfm"
    negative_rate: float = 1.0
    seed: int = 0
    memory: int = DEFAULT_MEMORY
    output: ShardOutputOptions = field(default_factory=ShardOutputOptions)
    input_format: str | None = None
    pad_short_rows: bool = False
    max_skip_fraction: float = 0.5

    def __post_init__(self):
        object.__setattr__(self, "schema", load_schema(self.schema))
        if self.numeric not in NUMERIC:
            raise ValueError(f"numeric must be one of {NUMERIC}, got {self.numeric!r}")
        if self.target not in TARGETS:
            raise ValueError(f"target must be one of {TARGETS}, got {self.target!r}")
        set_int(self, "min_count", minimum=1)
        set_int(self, "seed", minimum=0, maximum=(1 << 64) - 1)
        mem = parse_size(self.memory) if isinstance(self.memory, str) else self.memory
        object.__setattr__(self, "memory", as_int(mem, "memory", minimum=1 << 20))
        if self.hash_buckets is not None:  # every id (DeepFM: numeric + columns x buckets) fits int64
            top = ((1 << 63) - 1 - len(self.schema.numeric)) // max(len(self.schema.categorical), 1)
            set_int(self, "hash_buckets", minimum=1, maximum=top)
        if self.hash_buckets is not None and self.vocab_from is not None:
            raise ValueError("hash_buckets and vocab_from exclude each other")
        if self.hash_buckets is not None and self.min_count != 1:
            raise ValueError("min_count applies to vocabularies, not to hash_buckets")
        if self.vocab_from is not None and self.min_count != 1:
            raise ValueError("min_count applies to counted vocabularies, not to vocab_from (its vocabularies are "
                             "used as they are)")
        rate = float(self.negative_rate)
        if not 0.0 < rate <= 1.0:
            raise ValueError(f"negative_rate must be in (0, 1], got {self.negative_rate!r}")
        object.__setattr__(self, "negative_rate", rate)
        if self.input_format is not None and self.input_format not in FORMATS:
            raise ValueError(f"input_format must be one of {FORMATS} or None, got {self.input_format!r}")
        if not isinstance(self.pad_short_rows, bool):
            raise ValueError(f"pad_short_rows must be a bool, got {self.pad_short_rows!r}")
        frac = float(self.max_skip_fraction)
        if not 0.0 <= frac <= 1.0:
            raise ValueError(f"max_skip_fraction must be in [0, 1], got {self.max_skip_fraction!r}")
        object.__setattr__(self, "max_skip_fraction", frac)
        if not isinstance(self.output, ShardOutputOptions):
            raise ValueError(f"output must be a ShardOutputOptions, got {type(self.output).__name__}")

    @property
    def counting(self) -> bool:
        """Whether the run needs its counting pass (vocabularies or min-max fitted on these inputs)."""
        if self.vocab_from is not None:
            return False
        return self.hash_buckets is None or self.numeric == "minmax"

    @property
    def layout(self):
        return self.output.layout_options

    def to_json(self) -> dict:
        own = {"schema": self.schema.to_json(), "numeric": self.numeric, "min_count": self.min_count,
               "vocab_from": os.path.basename(str(self.vocab_from).rstrip("/")) if self.vocab_from else None,
               "hash_buckets": self.hash_buckets, "target": self.target, "negative_rate": self.negative_rate,
               "seed": self.seed, "input_format": self.input_format, "pad_short_rows": self.pad_short_rows,
               "max_skip_fraction": self.max_skip_fraction}
        return {**own, **self.output.to_json()}


def target_schema(target: str, numeric: int, categorical: int) -> Schema:
    """DeepFM: ``ids`` int64[F], ``values`` float32[F], ``label`` float32 (F = numeric + categorical fields);
    DLRM: ``dense`` float32[numeric], ``sparse`` int64[categorical], ``label`` float32."""
    feats = [FeatureSpec("label", "float32", ())]
    if target == "deepfm":
        width = numeric + categorical
        feats += [FeatureSpec("ids", "int64", (width,)), FeatureSpec("values", "float32", (width,))]
    else:
        if numeric:
            feats.append(FeatureSpec("dense", "float32", (numeric,)))
        if categorical:
            feats.append(FeatureSpec("sparse", "int64", (categorical,)))
    return Schema(tuple(feats), label="label")
