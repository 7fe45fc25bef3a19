"""``PipelineSpec``: everything that decides a tf.data input graph, in one frozen, self-checking dataclass.

``PipelineSpec.from_manifest`` fills the file list and the parse schema from a shard set's ``index.json``
(local, or ``s3://`` — shards are then fetched to a local cache directory first, as SageMaker File mode
does, because TensorFlow >= 2.16 has no S3 filesystem of its own). No TensorFlow here.
"""
from __future__ import annotations

import hashlib
import logging
import os
import secrets
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any

from converters.shardset.options import normalize_compression
from converters.shardset.reader import check_file
from converters.util.errors import IntegrityError, TfpipeError
from converters.util.system import cache_root, cpu_count
from sharding.plan import shard_count

# DEFAULT_BUFFER_BYTES (re-exported): the 8 MiB read buffer used when buffer_size is None
from .read import DEFAULT_BUFFER_BYTES
from .streamopts import ShardRef, StreamOptions, is_remote, stream_options

if TYPE_CHECKING:  # converters.examples loads numba: imported where needed, so `import pipeline` stays light
    from converters.tfrecord.schema import Schema

__all__ = ["PipelineSpec", "MODES", "CACHE_POLICIES", "READ_STRATEGIES", "OUTPUTS", "SPARSE_AS", "TUNE_POLICIES",
           "DEFAULT_PIPE_DIR", "DEFAULT_PIPE_TIMEOUT", "DEFAULT_BUFFER_BYTES", "default_cache_dir", "cache_root",
           "cpu_count", "equal_steps"]

log = logging.getLogger(__name__)

MODES = ("file", "pipe")
READ_STRATEGIES = ("auto", "sequential", "interleave", "parallel_reads")
OUTPUTS = ("keras", "dict")
SPARSE_AS = ("sparse", "ragged")     # how variable-length features come out: tf.SparseTensor or tf.RaggedTensor
CACHE_POLICIES = ("auto", "memory", "none", "file:PATH")
TUNE_POLICIES = ("stored", "on-first-use", "off")   # use a stored `tfpipe pipeline tune` result / tune once / never
DEFAULT_PIPE_DIR = "/opt/ml/input/data"
DEFAULT_PIPE_TIMEOUT = 300.0           # seconds to wait for a FIFO to appear / a writer to open it


def default_cache_dir(url: str) -> str:
    """Local directory for shards fetched from ``url`` (``$TFPIPE_CACHE`` or ``~/.cache/tfpipe``)."""
    key = hashlib.sha256(url.rstrip("/").encode()).hexdigest()[:16]
    return os.path.join(cache_root(), key)


def equal_steps(records: int, num_shards: int, batch_size: int, drop_remainder: bool) -> int:
    """Steps per epoch every rank can run under record-level ``shard(n, i)``: the smallest rank's count."""
    smallest = records // num_shards
    return smallest // batch_size if drop_remainder else -(-smallest // batch_size)


def _check_cache(cache: str) -> None:
    if cache in ("auto", "memory", "none"):
        return
    if cache.startswith("file:") and len(cache) > 5:
        return
    raise ValueError(f"cache must be one of auto|memory|none|file:PATH, got {cache!r}")


@dataclass(frozen=True)
class PipelineSpec:
    """One input pipeline. Build it with :func:`pipeline.build_dataset`; explain it with :func:`pipeline.describe`.

    Stage switches: ``shuffle_buffer=0`` (no shuffle), ``cache="none"``, ``prefetch=0`` (no prefetch),
    ``parse=False`` (yield batches of serialized records), ``epochs=None`` (repeat forever).

    Variable-length features (a sparse LibSVM set) parse into ``tf.SparseTensor`` (``sparse_as="sparse"``,
    the default) or ``tf.RaggedTensor`` (``"ragged"``). ``sparse_features=(ids, values)`` names a pair whose
    SparseTensors become one ``[batch, num_features]`` matrix: indices ``[row, id]``, values the ids and the
    values respectively (``from_manifest`` fills both from a sparse set's manifest).
    """

    schema: "Schema"
    batch_size: int
    files: tuple[str, ...] = ()
    mode: str = "file"
    channel: str | None = None
    pipe_dir: str = DEFAULT_PIPE_DIR
    pipe_timeout: float = DEFAULT_PIPE_TIMEOUT
    first_epoch: int = 0                   # Pipe mode: FIFO suffix of the first epoch read
    use_sagemaker_pipe: bool = False
    compression: str | None = None
    records: int | None = None             # records in `files` (or in the channel), when known
    total_bytes: int | None = None         # bytes on disk of `files`, when known
    shuffle_buffer: int = 0
    seed: int | None = None
    epochs: int | None = 1
    cache: str = "auto"
    drop_remainder: bool = False
    num_shards: int = 1
    shard_index: int = 0
    steps: int | None = None               # per-epoch `take`; None: derived (equal steps) when sharded
    equal_steps: bool = True
    read: str = "auto"
    num_parallel_reads: int | None = None  # None: from the tuning result or the rule
    buffer_size: int | None = None         # read buffer bytes; None: tuned, else 8 MiB
    chunk_records: int | None = None       # records per parse call before rebatch; 0: batch → parse; None: auto
    parse_parallelism: int | None = None   # parse map's num_parallel_calls (-1: AUTOTUNE); None: auto
    tune: str = "stored"                   # "stored" | "on-first-use" | "off" (read="auto" only)
    manifest_sha256: str | None = None     # sha256 of index.json (set by from_manifest): the data fingerprint
    tuning: Any = None                     # pipeline.tunestore.TuneLookup (set by from_manifest), or None
    prefetch: int | None = None            # None: AUTOTUNE; 0: no prefetch stage
    deterministic: bool = True             # False: parallel stages may reorder batches (a little faster)
    parse: bool = True
    output: str = "keras"
    sparse_as: str = "sparse"
    sparse_features: tuple[str, str] | None = None  # (ids, values): SparseTensors of shape [batch, num_features]
    num_features: int | None = None
    cores: int = field(default_factory=cpu_count)
    memory_bytes: int | None = None        # RAM used by the auto cache policy; None: detected
    part_weights: tuple[tuple[int, float], ...] = ()  # read-time balancing: (files of part k, weight k) in order
    stream: StreamOptions | None = None    # a remote set streamed through the host's cache (pipeline.stream)

    def __post_init__(self):
        from converters.tfrecord.schema import Schema

        if not isinstance(self.schema, Schema):
            raise ValueError(f"schema must be a converters.examples.Schema, got {type(self.schema).__name__}")
        if not isinstance(self.batch_size, int) or isinstance(self.batch_size, bool) or self.batch_size <= 0:
            raise ValueError(f"batch_size must be a positive integer, got {self.batch_size!r}")
        if self.mode not in MODES:
            raise ValueError(f"mode must be one of {MODES}, got {self.mode!r}")
        object.__setattr__(self, "files", tuple(str(f) for f in self.files))
        if self.mode == "file":
            if not self.files:
                raise ValueError("file mode needs at least one file (files=())")
            if self.use_sagemaker_pipe:
                raise ValueError("use_sagemaker_pipe=True needs mode='pipe'")
        else:
            if not self.channel or "/" in self.channel:
                raise ValueError(f"pipe mode needs a channel name without '/', got {self.channel!r}")
            if self.cache not in ("auto", "none"):
                raise ValueError(f"pipe mode streams every epoch from a new FIFO: cache must be auto or none, "
                                 f"got {self.cache!r}")
            if self.first_epoch < 0:
                raise ValueError(f"first_epoch must be >= 0, got {self.first_epoch!r}")
        if not self.pipe_timeout or self.pipe_timeout <= 0:
            raise ValueError(f"pipe_timeout must be > 0 seconds, got {self.pipe_timeout!r}")
        object.__setattr__(self, "compression", normalize_compression(self.compression))
        if self.shuffle_buffer < 0:
            raise ValueError(f"shuffle_buffer must be >= 0, got {self.shuffle_buffer!r}")
        if self.seed is not None and (not isinstance(self.seed, int) or self.seed < 0):
            raise ValueError(f"seed must be a non-negative integer or None, got {self.seed!r}")
        if self.epochs is not None and (not isinstance(self.epochs, int) or self.epochs <= 0):
            raise ValueError(f"epochs must be a positive integer or None (forever), got {self.epochs!r}")
        _check_cache(self.cache)
        if self.num_shards < 1:
            raise ValueError(f"num_shards must be >= 1, got {self.num_shards!r}")
        if not 0 <= self.shard_index < self.num_shards:
            raise ValueError(f"shard_index must be in [0, {self.num_shards}), got {self.shard_index!r}")
        if self.steps is not None and self.steps <= 0:
            raise ValueError(f"steps must be a positive integer or None, got {self.steps!r}")
        if self.read not in READ_STRATEGIES:
            raise ValueError(f"read must be one of {READ_STRATEGIES}, got {self.read!r}")
        if self.num_parallel_reads is not None and self.num_parallel_reads < 1:
            raise ValueError(f"num_parallel_reads must be >= 1 or None, got {self.num_parallel_reads!r}")
        if self.buffer_size is not None and self.buffer_size < 0:
            raise ValueError(f"buffer_size must be >= 0 bytes or None, got {self.buffer_size!r}")
        if self.chunk_records is not None and self.chunk_records < 0:
            raise ValueError(f"chunk_records must be >= 0 (0: no chunks) or None, got {self.chunk_records!r}")
        if self.parse_parallelism is not None and self.parse_parallelism != -1 and self.parse_parallelism < 1:
            raise ValueError(f"parse_parallelism must be >= 1, -1 (AUTOTUNE) or None, got {self.parse_parallelism!r}")
        if self.tune not in TUNE_POLICIES:
            raise ValueError(f"tune must be one of {TUNE_POLICIES}, got {self.tune!r}")
        if self.prefetch is not None and self.prefetch < 0:
            raise ValueError(f"prefetch must be >= 0 or None (AUTOTUNE), got {self.prefetch!r}")
        if self.output not in OUTPUTS:
            raise ValueError(f"output must be one of {OUTPUTS}, got {self.output!r}")
        self._check_sparse()
        self._check_parts()
        if self.cores < 1:
            raise ValueError(f"cores must be >= 1, got {self.cores!r}")
        if self.records is not None and self.records < 0:
            raise ValueError(f"records must be >= 0, got {self.records!r}")
        if self.stream is not None and (not isinstance(self.stream, StreamOptions) or self.mode != "file"
                                        or len(self.stream.shards) != len(self.files) or self.part_weights):
            raise ValueError(f"stream must be StreamOptions with one shard per file, in file mode without "
                             f"part_weights, got {self.stream!r}")

    def _check_sparse(self) -> None:
        if self.sparse_as not in SPARSE_AS:
            raise ValueError(f"sparse_as must be one of {SPARSE_AS}, got {self.sparse_as!r}")
        if self.sparse_features is None:
            return
        pair = tuple(self.sparse_features)
        object.__setattr__(self, "sparse_features", pair)
        names = {f.name: f for f in self.schema.features}
        if (len(pair) != 2 or any(k not in names or not names[k].varlen for k in pair)
                or names[pair[0]].dtype != "int64"):
            raise ValueError(f"sparse_features must name a variable-length int64 ids feature and a variable-length "
                             f"values feature of the schema, got {self.sparse_features!r}")
        n = self.num_features
        if self.sparse_as == "sparse" and (not isinstance(n, int) or isinstance(n, bool) or n < 1):
            raise ValueError(f"sparse_features needs num_features (a positive integer: the dense_shape's second "
                             f"dimension), got {n!r}")

    def _check_parts(self) -> None:
        if not self.part_weights:
            return
        parts = tuple((int(n), float(w)) for n, w in self.part_weights)
        object.__setattr__(self, "part_weights", parts)
        if self.mode != "file" or sum(n for n, _ in parts) != len(self.files) or any(n < 1 for n, _ in parts):
            raise ValueError(f"part_weights must split the files into consecutive non-empty parts (file mode), got "
                             f"{self.part_weights!r} for {len(self.files)} file(s)")
        if any(not w > 0 for _, w in parts):
            raise ValueError(f"part weights must be > 0, got {[w for _, w in parts]}")

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
        """A copy with some fields changed (validated again)."""
        return replace(self, **changes)

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
        read the parts balanced at read time (``pipeline.weighted``). Remaining keyword arguments are
        :class:`PipelineSpec` fields.

        A remote set (``s3://``, ``gs://``, ...) is streamed (``pipeline.stream``): nothing is fetched here;
        ``build_dataset`` fetches each shard, checked, into ``cache_dir`` (shared by the host's ranks) at most
        ``read_ahead`` shards ahead of the ones being read, keeping at most ``cache_limit`` bytes there (a size
        such as ``"200GiB"``, or bytes; None: no limit). ``stream=StreamOptions(...)`` sets them all at once.
        """
        from converters.shardset.reader import read_manifest_raw
        from converters.storage import is_s3

        manifest, raw = read_manifest_raw(path_or_dir)
        base = manifest.location
        by_name = {s.name: s for s in manifest.shards}
        names = [s.name for s in manifest.shards]
        steps = overrides.pop("steps", None)
        if plan is not None:
            entry = _rank_entry(plan, rank)
            if getattr(entry, "files", None) is not None:
                names = [_shard_name(f, by_name) for f in entry.files]
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

            spec = replace(spec, tuning=lookup(spec))  # read="auto": a stored `tfpipe pipeline tune` result
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
        if isinstance(w, bool) or not isinstance(w, (int, float)) or not w >= 0:
            raise ValueError(f"label_weights values must be numbers >= 0, got {w!r} for label {k!r}")
        given[key] = float(w)
    labels = [p.label for p in manifest.parts]
    unknown = sorted(set(given) - set(labels))
    missing = [lab for lab in labels if lab not in given]
    if unknown or missing:
        raise ValueError(f"label_weights must give a weight for every part: the group has labels "
                         f"{', '.join(labels)}" + (f"; no part for {', '.join(unknown)}" if unknown else "")
                         + (f"; no weight for {', '.join(missing)}" if missing else ""))
    kept = [p for p in manifest.parts if given[p.label] > 0]
    total = sum(given[p.label] for p in kept)
    if not kept or total <= 0:
        raise ValueError("label_weights must give at least one part a weight > 0")
    names, weights = [], []
    for p in kept:
        mine = [s.name for s in manifest.shards if s.name.startswith(p.path + "/")]
        names += mine
        weights.append((len(mine), given[p.label] / total))
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
                os.unlink(local)
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
