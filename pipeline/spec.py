"""``PipelineSpec``: everything that decides a tf.data input graph, in one frozen, self-checking dataclass
composed of option groups (``pipeline.options``: source, reading, shuffling, sharding, caching, batching,
parsing), each validated on its own; the checks that need two groups are made here.

``PipelineSpec.from_manifest`` fills the file list and the parse schema from a shard set's ``index.json``
(local, or ``s3://`` — shards are then fetched to a local cache directory first, as SageMaker File mode
does, because TensorFlow >= 2.16 has no S3 filesystem of its own). No TensorFlow here.
"""
from __future__ import annotations

import hashlib
import logging
import math
import os
import secrets
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

from converters.shardset.reader import check_file
from converters.util.errors import IntegrityError, TfpipeError
from converters.util.system import cache_root, cpu_count
from sharding.plan import shard_count

from .options import (
    CACHE_POLICIES,
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
    unknown_keyword,
)

# DEFAULT_BUFFER_BYTES (re-exported): the 8 MiB read buffer used when buffer_size is None
from .read import DEFAULT_BUFFER_BYTES
from .streamopts import ShardRef, is_remote, stream_options

if TYPE_CHECKING:  # converters.examples loads numba: imported where needed, so `import pipeline` stays light
    from converters.tfrecord.schema import Schema

__all__ = ["PipelineSpec", "MODES", "CACHE_POLICIES", "READ_STRATEGIES", "OUTPUTS", "SPARSE_AS", "TUNE_POLICIES",
           "DEFAULT_PIPE_DIR", "DEFAULT_PIPE_TIMEOUT", "DEFAULT_BUFFER_BYTES", "default_cache_dir", "cache_root",
           "cpu_count", "equal_steps", "SourceOptions", "ReadOptions", "ShuffleOptions", "ShardingOptions",
           "CacheOptions", "BatchOptions", "ParsingOptions", "ResumeOptions"]

log = logging.getLogger(__name__)

# from_manifest's own keywords (besides the flat options), and the options it fills from the manifest itself
_FROM_MANIFEST_ARGS = ("mode", "channel", "pipe_dir", "pipe_timeout", "shuffle_buffer", "seed", "epochs", "cache",
                       "drop_remainder", "num_shards", "shard_index", "plan", "rank", "cache_dir", "label_weights")
_FROM_MANIFEST_FILLS = ("files", "compression", "records", "total_bytes", "manifest_sha256", "batch_size",
                        "file_records")


def default_cache_dir(url: str) -> str:
    """Local directory for shards fetched from ``url`` (``$TFPIPE_CACHE`` or ``~/.cache/tfpipe``)."""
    key = hashlib.sha256(url.rstrip("/").encode()).hexdigest()[:16]
    return os.path.join(cache_root(), key)


def equal_steps(records: int, num_shards: int, batch_size: int, drop_remainder: bool) -> int:
    """Steps per epoch every rank can run under record-level ``shard(n, i)``: the smallest rank's count."""
    smallest = records // num_shards
    return smallest // batch_size if drop_remainder else -(-smallest // batch_size)


@dataclass(frozen=True, init=False)
class PipelineSpec:
    """One input pipeline. Build it with :func:`pipeline.build_dataset`; explain it with :func:`pipeline.describe`.

    Composed of option groups (``spec.source``, ``spec.reading``, ``spec.shuffling``, ``spec.sharding``,
    ``spec.caching``, ``spec.batching``, ``spec.parsing``; see ``pipeline.options``). Every option also reads
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
    # a new group: a class in pipeline.options, an entry in options.GROUPS and a field here

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
                raise ValueError(f"{name} must be a pipeline.options.{cls.__name__}, got {type(group).__name__}")
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
        if self.resuming.resumable and self.caching.cache not in ("auto", "none"):
            raise ValueError(f"resumable=True reads each epoch's files in its own seeded order: cache="
                             f"{self.caching.cache!r} would freeze one; use cache='auto' or 'none' (the OS page "
                             f"cache keeps recently read shards)")
        if self.resuming.resumable and self.source.stream is not None:
            raise ValueError("resumable=True reads local shard files and a streamed remote set is fetched as it is "
                             "read: download the set first (tfpipe download) to resume mid-epoch")
        self._check_sparse()

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
        return shard_count(self.records, self.num_shards, self.shard_index)

    @property
    def epoch_steps(self) -> int | None:
        """The per-epoch ``take(steps)``: explicit ``steps``, or equal steps across ranks when sharded."""
        if self.steps is not None:
            return self.steps
        if self.num_shards > 1 and self.equal_steps and self.records is not None:
            return equal_steps(self.records, self.num_shards, self.batch_size, self.drop_remainder)
        return None

    def with_(self, **changes: Any) -> "PipelineSpec":
        """A copy with some options changed (flat names or whole groups; validated again)."""
        top = {k: changes.pop(k) for k in ("schema", *GROUPS) if k in changes}
        flat = split_options(changes, "PipelineSpec.with_()", extra=("schema",))
        groups = {g: replace(top.get(g, getattr(self, g)), **sub) for g, sub in flat.items()}
        return replace(self, **{**top, **groups})

    # -- construction from a manifest ----------------------------------------------------------------

    @classmethod
    def from_manifest(cls, path_or_dir: str | os.PathLike, batch_size: int, *, mode: str = "file",
                      channel: str | None = None, pipe_dir: str = DEFAULT_PIPE_DIR,
                      pipe_timeout: float = DEFAULT_PIPE_TIMEOUT, shuffle_buffer: int = 0,
                      seed: int | None = None, epochs: int | None = 1, cache: str = "auto",
                      drop_remainder: bool = False, num_shards: int = 1, shard_index: int = 0,
                      plan: Any = None, rank: int | None = None, cache_dir: str | None = None,
                      cache_limit: int | str | None = None, read_ahead: int | None = None,
                      label_weights: dict | None = None, **overrides: Any) -> "PipelineSpec":
        """A spec reading the shard set at ``path_or_dir`` (a directory or its ``index.json``; local or s3://).

        ``plan``: a sharding plan (``ShardPlan`` with ``.ranks``/``.for_rank(rank)``) or a single rank's entry
        — any object with ``files``, ``shard``, ``steps`` and ``channel`` attributes (duck typed). Its file
        list (names relative to the manifest) or ``shard=(n, i)`` and its ``steps`` override
        ``num_shards``/``shard_index``. ``label_weights`` ({label: weight}, a group of per-label sets only):
        read the parts balanced at read time (``pipeline.weighted``). Remaining keyword arguments are the
        options of :class:`PipelineSpec` by their flat names (``read=``, ``prefetch=``, ...); a misspelled one
        is a TypeError naming the closest valid name.

        A remote set (``s3://``, ``gs://``, ...) is streamed (``pipeline.stream``): nothing is fetched here;
        ``build_dataset`` fetches each shard, checked, into ``cache_dir`` (shared by the host's ranks) at most
        ``read_ahead`` shards ahead of the ones being read, keeping at most ``cache_limit`` bytes there (a size
        such as ``"200GiB"``, or bytes; None: no limit). ``stream=StreamOptions(...)`` sets them all at once.
        """
        from converters.shardset.reader import read_manifest_raw
        from converters.storage import is_s3

        for name in overrides:   # a misspelled option is named before any I/O, with the closest valid name
            if name in _FROM_MANIFEST_FILLS:
                raise TypeError(f"PipelineSpec.from_manifest() sets {name} from the manifest (and batch_size "
                                f"from its second argument): do not pass {name}=")
            if name not in FLAT:
                raise unknown_keyword(name, "PipelineSpec.from_manifest()",
                                      [k for k in (*FLAT, *_FROM_MANIFEST_ARGS) if k not in _FROM_MANIFEST_FILLS])

        manifest, raw = read_manifest_raw(path_or_dir)
        base = manifest.location
        by_name = {s.name: s for s in manifest.shards}
        names = [s.name for s in manifest.shards]
        steps = overrides.pop("steps", None)
        if plan is not None:
            entry = _rank_entry(plan, rank)
            if getattr(entry, "files", None) is not None:
                names = [_shard_name(f, by_name) for f in entry.files]
                if overrides.get("resumable"):   # each rank's own order; a state names the plan it holds under
                    from .resume import plan_fingerprint

                    overrides["plan_fingerprint"] = plan_fingerprint(plan)
            shard = getattr(entry, "shard", None)
            if shard is not None:
                num_shards, shard_index = int(shard[0]), int(shard[1])
            else:
                num_shards, shard_index = 1, 0
            if getattr(entry, "channel", None) and channel is None and mode == "pipe":
                channel = entry.channel
            if getattr(entry, "steps", None) is not None and steps is None:
                steps = int(entry.steps)
        records = sum(by_name[n].records for n in names)
        total = sum(by_name[n].bytes for n in names)
        if mode == "pipe":
            files: list[str] = []
            if plan is None or getattr(_rank_entry(plan, rank), "files", None) is None:
                records, total = manifest.records, manifest.total_bytes
        elif is_remote(base) and label_weights is None:
            stream = stream_options(overrides.pop("stream", None), cache_dir or default_cache_dir(base),
                                    cache_limit, read_ahead)
            overrides["stream"] = stream.bind(base, [ShardRef(n, by_name[n].bytes, by_name[n].sha256) for n in names])
            files = overrides["stream"].local_paths()
        else:
            files = [os.path.join(base, n) for n in names]
        if mode == "file" and not files:
            raise TfpipeError(f"{base}: no shards for this rank (plan gave an empty file list)")
        if label_weights is not None:
            if plan is not None or mode != "file":
                raise ValueError("label_weights reads the parts of a group in file mode, without a plan")
            names, weights = _weighted_parts(manifest, label_weights)
            files = ([os.path.join(base, n) for n in names] if not is_s3(base) else
                     _fetch_all(base, names, by_name, cache_dir or default_cache_dir(base)))
            overrides["part_weights"] = weights
        if manifest.schema.raw:  # an adopted set of records that are not tf.train.Example: their bytes
            overrides.setdefault("parse", False)
        if mode == "file" and label_weights is None:   # per-file counts: a resumable order seeks by them
            overrides["file_records"] = tuple(by_name[n].records for n in names)
        if manifest.options.get("sparse") and "num_features" in manifest.extra:  # a sparse LibSVM set
            overrides.setdefault("sparse_features", (manifest.options["ids_key"], manifest.options["values_key"]))
            overrides.setdefault("num_features", int(manifest.extra["num_features"]))
        spec = cls(schema=manifest.schema, batch_size=batch_size, files=tuple(files), mode=mode,
                   channel=channel, pipe_dir=pipe_dir, pipe_timeout=pipe_timeout,
                   compression=manifest.compression, records=records, total_bytes=total,
                   shuffle_buffer=shuffle_buffer, seed=seed, epochs=epochs, cache=cache,
                   drop_remainder=drop_remainder, num_shards=num_shards, shard_index=shard_index,
                   steps=steps, manifest_sha256=hashlib.sha256(raw).hexdigest(), **overrides)
        if spec.tuning is None:
            from .tunestore import lookup

            spec = spec.with_(tuning=lookup(spec))  # read="auto": a stored `tfpipe pipeline tune` result
        if spec.stream is not None:  # a cache too small for the readers is refused before any download
            from .read import read_plan
            from .stream import check_cache_limit, open_width

            cfg = read_plan(spec).config
            check_cache_limit(spec.stream, [s.bytes for s in spec.stream.shards], open_width(cfg.read, cfg.parallelism))
        return spec


def _weighted_parts(manifest, label_weights: dict) -> tuple[list[str], tuple[tuple[int, float], ...]]:
    """The shard names of a group's parts in part order, and (files, weight) per part, weights normalized."""
    from converters.prep.balance import label_name

    if not manifest.parts:
        raise TfpipeError(f"{manifest.location}: label_weights needs a group of per-label shard sets "
                          "(tfpipe convert ... --split-by-label); this is one shard set")
    if not isinstance(label_weights, dict) or not label_weights:
        raise ValueError(f"label_weights must be a non-empty dict {{label: weight}}, got {label_weights!r}")
    given = {}
    for k, w in label_weights.items():
        try:
            key = label_name(float(k))
        except (TypeError, ValueError):
            raise ValueError(f"label_weights keys must be labels (numbers), got {k!r}") from None
        if isinstance(w, bool) or not isinstance(w, (int, float)) or not 0 <= w < math.inf:
            raise ValueError(f"label_weights values must be finite numbers >= 0, got {w!r} for label {k!r}")
        given[key] = float(w)
    labels = [p.label for p in manifest.parts]
    unknown = sorted(set(given) - set(labels))
    missing = [lab for lab in labels if lab not in given]
    if unknown or missing:
        raise ValueError(f"label_weights must give a weight for every part: the group has labels "
                         f"{', '.join(labels)}" + (f"; no part for {', '.join(unknown)}" if unknown else "")
                         + (f"; no weight for {', '.join(missing)}" if missing else ""))
    kept = [p for p in manifest.parts if given[p.label] > 0]
    if not kept:
        raise ValueError("label_weights must give at least one part a weight > 0")
    top = max(given[p.label] for p in kept)            # scaled first: huge finite weights cannot sum to inf
    total = sum(given[p.label] / top for p in kept)
    names, weights = [], []
    for p in kept:
        mine = [s.name for s in manifest.shards if s.name.startswith(p.path + "/")]
        names += mine
        weights.append((len(mine), given[p.label] / top / total))
    return names, tuple(weights)


def _rank_entry(plan: Any, rank: int | None) -> Any:
    """A single rank's entry from a whole plan (``for_rank``/``ranks``) or the entry itself."""
    if hasattr(plan, "steps") and (hasattr(plan, "files") or hasattr(plan, "shard")):
        return plan
    if rank is None:
        from sharding.topology import Topology  # lazily: pipeline sits above sharding

        rank = Topology.from_env().rank
    if hasattr(plan, "for_rank"):
        return plan.for_rank(rank)
    ranks = getattr(plan, "ranks", None)
    if ranks is None:
        raise ValueError(f"plan must be a ShardPlan (with .ranks) or a rank entry, got {type(plan).__name__}")
    for entry in ranks:
        if getattr(entry, "rank", None) == rank:
            return entry
    raise ValueError(f"plan has no entry for rank {rank}")


def _shard_name(f: str, by_name: dict) -> str:
    name = os.path.basename(str(f))
    if name not in by_name:
        raise TfpipeError(f"plan names {f!r}, which is not a shard of this manifest")
    return name


def _fetch_all(base: str, names: list[str], by_name: dict, cache_dir: str) -> list[str]:
    """Fetch shards from ``base`` into ``cache_dir``, checking size and sha256 against the manifest. A file
    already in the cache is reused only when it passes the same check (else it is fetched again). Names come
    from a validated manifest: plain file names (or ``label=<v>/<name>`` in a group), so every file lands
    inside ``cache_dir``."""
    from converters.storage import open_storage

    storage = open_storage(base)
    os.makedirs(cache_dir, exist_ok=True)
    where = base.rstrip("/")
    out = []
    for name in names:
        local = os.path.join(cache_dir, name)
        os.makedirs(os.path.dirname(local), exist_ok=True)
        if os.path.lexists(local):
            try:
                check_file(local, by_name[name], where)
                out.append(local)
                continue
            except IntegrityError as exc:
                log.warning("cached %s does not match the manifest (%s): fetching it again", local, exc)
                try:
                    os.unlink(local)
                except OSError as err:  # a directory where a shard belongs: not ours to remove
                    raise TfpipeError(f"the cache holds {local}, which is not a shard file and cannot be "
                                      f"replaced ({err.strerror}): remove it, or pass another cache_dir") from None
        tmp = f"{local}.{os.getpid()}-{secrets.token_hex(4)}.part"  # concurrent ranks never share one
        log.info("fetching %s/%s -> %s", where, name, local)
        try:
            storage.fetch(name, tmp)
            check_file(tmp, by_name[name], where)
            os.replace(tmp, local)
        finally:
            if os.path.exists(tmp):
                os.unlink(tmp)
        out.append(local)
    return out


def _flat_property(group: str, name: str) -> property:
    return property(lambda self: getattr(getattr(self, group), name), doc=f"``spec.{group}.{name}``")


for _name, _group in FLAT.items():   # every option also reads by its flat name: spec.shuffle_buffer
    if _name in PipelineSpec.__dict__ or _name in GROUPS or _name == "schema":  # a new group's option must not
        raise TypeError(f"option {_name!r} of spec.{_group} clashes with PipelineSpec.{_name}")  # shadow a name
    setattr(PipelineSpec, _name, _flat_property(_group, _name))
del _name, _group
