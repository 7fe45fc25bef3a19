"""What decides a tabular conversion's output: ``TabularOptions`` (table schema, numeric transform, vocabulary
or hashing, target, negative downsampling, memory, the shared ``ShardOutputOptions``), recorded in the
manifest."""
from __future__ import annotations

from dataclasses import dataclass, field
from functools import cached_property

from ..shardset.options import ShardOutputOptions
from ..util.checks import as_int, set_int
from ..util.units import parse_size
from .budget import MemoryBudget
from .encode import NUMERIC
from .idpolicy import id_policy
from .schema import FORMATS, TableSchema, load_schema
from .targets import Target, target_named

__all__ = ["TabularOptions", "DEFAULT_MEMORY"]

DEFAULT_MEMORY = 256 << 20  # 256 MiB: what one process holds per pass (``budget.MemoryBudget`` splits it)


@dataclass(frozen=True)
class TabularOptions:
    """Everything that determines the output bytes, validated up front.

    ``numeric``: ``log1p`` (missing or negative -> 0, then log1p in float64, stored float32) or ``minmax``
    (missing or negative -> 0, then (v - min) / (max - min) over the pre-pass (counting), 0 where max == min).
    ``min_count``: a categorical value seen at least this often over all inputs gets an id (1..V by descending
    count, ties by descending bytes: Keras ``StringLookup.adapt``'s and tf.Transform's order); ``vocab_from``: an
    existing set whose vocabularies (and min-max) are used as they are (no pre-pass; the schema, target and
    numeric transform must be the set's); ``hash_buckets``: Keras ``Hashing(num_bins=N)`` bins instead of a
    vocabulary (DeepFM's ids must fit int64). ``negative_rate``: the fraction of label-0 rows kept (seeded by
    ``seed``, per row).
    ``input_format``: ``tsv``, ``csv`` or ``parquet`` for every input (None: by suffix, else by the first line:
    ``reader.file_format``); ``pad_short_rows``: a row with fewer fields reads as if its missing trailing fields
    were empty; ``max_skip_fraction``: a run whose skipped bad rows are all its rows or more than this fraction of
    them fails, writing nothing.

    What the options choose, once: ``target_spec`` (the target's table, ``targets``) and ``ids`` (the id
    policy, ``idpolicy``); ``budget(...)`` splits ``memory`` between the passes."""

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
        self.target_spec  # an unknown target fails here, naming the valid ones
        set_int(self, "min_count", minimum=1)
        set_int(self, "seed", minimum=0, maximum=(1 << 64) - 1)
        mem = parse_size(self.memory) if isinstance(self.memory, str) else self.memory
        object.__setattr__(self, "memory", as_int(mem, "memory", minimum=1 << 20))
        self.ids  # contradicting id options fail here
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

    @cached_property
    def target_spec(self) -> Target:
        """The target's table (``targets.TARGETS``)."""
        return target_named(self.target)

    @cached_property
    def ids(self):
        """The id policy (``idpolicy``): counted vocabularies, ``vocab_from``'s, or ``hash_buckets``."""
        s = self.schema
        return id_policy(self.min_count, self.vocab_from, self.hash_buckets, len(s.numeric), len(s.categorical))

    @property
    def needs_prepass(self) -> bool:
        """Whether the run needs its pre-pass (counting): vocabularies or min-max fitted on these inputs."""
        return self.ids.needs_prepass(self.numeric)

    def budget(self, chunk_rows: int | None = None, lookup_bytes: int | None = None) -> MemoryBudget:
        """``memory`` split between the passes over this schema (``chunk_rows``, ``lookup_bytes``: a share set
        outright)."""
        s = self.schema
        return MemoryBudget(self.memory, len(s.numeric), len(s.categorical), chunk_rows, lookup_bytes)

    @property
    def layout(self):
        return self.output.layout_options

    def to_json(self) -> dict:
        own = {"schema": self.schema.to_json(), "numeric": self.numeric, **self.ids.to_json(),
               "target": self.target, "negative_rate": self.negative_rate,
               "seed": self.seed, "input_format": self.input_format, "pad_short_rows": self.pad_short_rows,
               "max_skip_fraction": self.max_skip_fraction}
        return {**own, **self.output.to_json()}

