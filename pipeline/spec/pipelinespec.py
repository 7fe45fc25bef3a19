"""``PipelineSpecBase``: everything that decides a tf.data input graph, in one frozen, self-checking dataclass
composed of option groups (``pipeline.spec.options``: source, reading, shuffling, sharding, caching, batching,
parsing), each validated on its own; the checks that need two groups are made here. Pure: no I/O, no
TensorFlow.

The public ``pipeline.PipelineSpec`` is this class plus its constructor from a shard set's manifest,
``PipelineSpec.from_manifest``, which reads files and so lives with the I/O in ``pipeline.plan.manifest``.
"""
from __future__ import annotations

from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

from sharding.epochs import epoch_batches
from sharding.plan import shard_count

from .options import (
    CACHE_POLICIES,
    DEFAULT_BUFFER_BYTES,
    DEFAULT_PIPE_DIR,
    DEFAULT_PIPE_TIMEOUT,
    FLAT,
    GROUPS,
    MODES,
    OUTPUTS,
    READ_STRATEGIES,
    SPARSE_AS,
    TUNE_POLICIES,
    BatchOptions,
    CacheOptions,
    ParsingOptions,
    ReadOptions,
    ResumeOptions,
    ShardingOptions,
    ShuffleOptions,
    SourceOptions,
    split_options,
)
from .serviceopts import ServiceOptions, check_service

# Features one parse call may take: TensorFlow builds one parse graph output per feature, and the graph's
# build time and memory grow with their number (docs/pipeline.md, Known limits). Beyond it a spec is refused
# with the number; parse=False reads the serialized records instead.
MAX_PARSED_FEATURES = 4096

if TYPE_CHECKING:  # converters.examples loads numba: imported where needed, so `import pipeline` stays light
    from converters.tfrecord.schema import Schema

__all__ = ["PipelineSpecBase", "MAX_PARSED_FEATURES", "MODES", "CACHE_POLICIES", "READ_STRATEGIES", "OUTPUTS", "SPARSE_AS",
           "TUNE_POLICIES", "DEFAULT_PIPE_DIR", "DEFAULT_PIPE_TIMEOUT", "DEFAULT_BUFFER_BYTES", "smallest_rank_steps",
           "SourceOptions", "ReadOptions", "ShuffleOptions", "ShardingOptions", "CacheOptions", "BatchOptions",
           "ParsingOptions", "ResumeOptions"]


def smallest_rank_steps(records: int, num_shards: int, batch_size: int, drop_remainder: bool) -> int:
    """Steps per epoch every rank can run under record-level ``shard(n, i)``: the smallest rank's count."""
    return epoch_batches(records // num_shards, batch_size, drop_remainder)


@dataclass(frozen=True, init=False)
class PipelineSpecBase:
    """One input pipeline (pure values; ``pipeline.PipelineSpec`` adds ``from_manifest``). Build it with
    :func:`pipeline.build_dataset`; explain it with :func:`pipeline.describe`.

    Composed of option groups (``spec.source``, ``spec.reading``, ``spec.shuffling``, ``spec.sharding``,
    ``spec.caching``, ``spec.batching``, ``spec.parsing``; see ``pipeline.spec.options``). Every option also reads
    and is given by its flat name: ``PipelineSpec(schema, 512, files=..., shuffle_buffer=10_000)`` and
    ``spec.shuffle_buffer`` are ``spec.shuffling.shuffle_buffer``; a whole group may be given instead
    (``sharding=ShardingOptions(2, 1)``), flat names then change it.

    Stage switches: ``shuffle_buffer=0`` (no shuffle), ``cache="none"``, ``prefetch=0`` (no prefetch),
    ``parse=False`` (yield batches of serialized records), ``epochs=None`` (repeat forever).

    Variable-length features (a sparse LibSVM set) parse into ``tf.SparseTensor`` (``sparse_as="sparse"``,
    the default) or ``tf.RaggedTensor`` (``"ragged"``). ``sparse_features=(ids, values)`` names a pair whose
    SparseTensors become one ``[batch, num_features]`` matrix: indices ``[row, id]``, values the ids and the
    values respectively (``from_manifest`` fills both from a sparse set's manifest).
    """

    schema: "Schema"
    source: SourceOptions
    reading: ReadOptions
    shuffling: ShuffleOptions
    sharding: ShardingOptions
    caching: CacheOptions
    batching: BatchOptions
    parsing: ParsingOptions
    resuming: ResumeOptions
    offload: ServiceOptions
    # a new group: a class in pipeline.spec.options, an entry in options.GROUPS and a field here

    def __init__(self, schema: "Schema", batch_size: int | BatchOptions | None = None, **options: Any):
        if isinstance(batch_size, BatchOptions):
            options.setdefault("batching", batch_size)
            batch_size = None
        given = {g: options.pop(g) for g in GROUPS if g in options}
        flat = split_options(options, "PipelineSpec()", extra=("schema", "batch_size"))
        if batch_size is not None:
            flat.setdefault("batching", {})["batch_size"] = batch_size
        for name, cls in GROUPS.items():
            group, changes = given.get(name), flat.get(name, {})
            if group is None:
                if name == "batching" and "batch_size" not in changes:
                    raise TypeError("PipelineSpec() needs batch_size (or batching=BatchOptions(batch_size))")
                group = cls(**changes)
            elif not isinstance(group, cls):
                raise ValueError(f"{name} must be a pipeline.spec.options.{cls.__name__}, got {type(group).__name__}")
            elif changes:
                group = replace(group, **changes)
            object.__setattr__(self, name, group)
        object.__setattr__(self, "schema", schema)
        self.__post_init__()

    def __post_init__(self):
        from converters.tfrecord.schema import Schema

        if not isinstance(self.schema, Schema):
            raise ValueError(f"schema must be a converters.examples.Schema, got {type(self.schema).__name__}")
        if self.source.mode == "pipe" and self.caching.cache not in ("auto", "none"):
            raise ValueError(f"pipe mode streams every epoch from a new FIFO: cache must be auto or none, "
                             f"got {self.caching.cache!r}")
        if self.resuming.resumable is True and self.caching.cache not in ("auto", "none"):
            raise ValueError(f"resumable=True reads each epoch's files in its own seeded order: cache="
                             f"{self.caching.cache!r} would freeze one; use cache='auto' or 'none' (the OS page "
                             f"cache keeps recently read shards)")
        n = len(self.schema.features)
        if self.parsing.parse and n > MAX_PARSED_FEATURES:
            raise ValueError(f"the schema has {n} features: a parse of more than {MAX_PARSED_FEATURES} features per "
                             f"record takes TensorFlow minutes and gigabytes to build; pass parse=False to read the "
                             f"serialized records and parse the features you need")
        self._check_sparse()
        check_service(self)
        if self.source.layout is not None:
            from .blocks import check_columnar

            check_columnar(self)

    def _check_sparse(self) -> None:
        pair, n = self.parsing.sparse_features, self.parsing.num_features
        if pair is None:
            return
        names = {f.name: f for f in self.schema.features}
        if (len(pair) != 2 or any(k not in names or not names[k].varlen for k in pair)
                or names[pair[0]].dtype != "int64"):
            raise ValueError(f"sparse_features must name a variable-length int64 ids feature and a variable-length "
                             f"values feature of the schema, got {pair!r}")
        if self.parsing.sparse_as == "sparse" and (not isinstance(n, int) or isinstance(n, bool) or n < 1):
            raise ValueError(f"sparse_features needs num_features (a positive integer: the dense_shape's second "
                             f"dimension), got {n!r}")

    # -- derived facts (pure) ------------------------------------------------------------------------

    @property
    def record_bytes(self) -> float | None:
        """Mean bytes per record on disk (framing included), when known."""
        if self.records and self.total_bytes:
            return self.total_bytes / self.records
        return None

    @property
    def rank_records(self) -> int | None:
        """Records this rank reads per epoch (before ``take``), when known."""
        if self.records is None:
            return None
        if self.source.layout is not None and self.num_shards > 1:   # ranks take whole blocks in turn
            from .blocks import rank_rows, spec_file_rows

            return rank_rows(spec_file_rows(self), self.source.layout.block_rows, self.num_shards, self.shard_index)
        return shard_count(self.records, self.num_shards, self.shard_index)

    @property
    def take_steps(self) -> int | None:
        """The per-epoch ``take(steps)``: explicit ``steps``, or equal steps across ranks when sharded."""
        if self.steps is not None:
            return self.steps
        if self.num_shards > 1 and self.equal_steps and self.records is not None:
            if self.source.layout is not None:
                from .blocks import block_rank_steps

                return block_rank_steps(self)
            return smallest_rank_steps(self.records, self.num_shards, self.batch_size, self.drop_remainder)
        return None

    @property
    def compression_type(self) -> str:
        """The ``compression_type`` a ``TFRecordDataset`` of this set's files takes: ``"GZIP"`` or ``""``."""
        return "GZIP" if self.compression == "gzip" else ""

    def with_(self, **changes: Any) -> "PipelineSpecBase":
        """A copy with some options changed (flat names or whole groups; validated again)."""
        top = {k: changes.pop(k) for k in ("schema", *GROUPS) if k in changes}
        flat = split_options(changes, "PipelineSpec.with_()", extra=("schema",))
        groups = {g: replace(top.get(g, getattr(self, g)), **sub) for g, sub in flat.items()}
        return replace(self, **{**top, **groups})


def _flat_property(group: str, name: str) -> property:
    return property(lambda self: getattr(getattr(self, group), name), doc=f"``spec.{group}.{name}``")


for _name, _group in FLAT.items():   # every option also reads by its flat name: spec.shuffle_buffer
    if _name in PipelineSpecBase.__dict__ or _name in GROUPS or _name == "schema":  # a new group's option must not
        raise TypeError(f"option {_name!r} of spec.{_group} clashes with PipelineSpec.{_name}")  # shadow a name
    setattr(PipelineSpecBase, _name, _flat_property(_group, _name))
del _name, _group
