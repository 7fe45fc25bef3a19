"""The option groups a :class:`~pipeline.PipelineSpec` is composed of, one frozen dataclass per
concern, each validated on its own (the bad value in the message), as the converters embed ``ShardOutputOptions``:

========================  ==============  ==================================================================
group (``spec.<name>``)   class           options
========================  ==============  ==================================================================
``source``                SourceOptions   files or Pipe-mode channel, compression, what the manifest says
``reading``               ReadOptions     read strategy, files at once, read buffer, parse chunks, tuning
``shuffling``             ShuffleOptions  shuffle buffer, seed
``sharding``              ShardingOptions rank sharding ``shard(n, i)``, per-epoch steps
``caching``               CacheOptions    cache policy and the RAM it plans with
``batching``              BatchOptions    batch size, remainder, epochs, prefetch, determinism
``parsing``               ParsingOptions  parse or not, output structure, sparse features
``resuming``              ResumeOptions   the resumable File-mode order (a pure function of seed, epoch, position)
``offload``               ServiceOptions  a tf.data service's workers read and parse (``spec/serviceopts.py``)
========================  ==============  ==================================================================

Every option keeps one flat name (``spec.shuffle_buffer``, ``from_manifest(..., shuffle_buffer=...)``), the
same inside its group (``spec.shuffling.shuffle_buffer``): :data:`GROUPS` maps a group to its class and
:func:`split_options` sends flat names to their groups. A new group (streaming cache, resume) is a class
here, a line in ``GROUPS`` and a field of ``PipelineSpec``; its options then work as flat names at once.
Checks that need two groups (Pipe mode and the cache, sparse features and the schema) stay in the spec.
No TensorFlow here.
"""
from __future__ import annotations

import difflib
import math
from dataclasses import dataclass, field, fields
from typing import Any

from converters.shardset.options import normalize_compression
from converters.util.errors import TfpipeError
from converters.util.fs import is_sha256
from converters.util.checks import is_integral, set_int, set_real
from converters.util.system import cpu_count
from .serviceopts import ServiceOptions
from .streamopts import StreamOptions

__all__ = ["ResumeError", "SourceOptions", "ReadOptions", "ShuffleOptions", "ShardingOptions", "CacheOptions", "BatchOptions",
           "ParsingOptions", "ResumeOptions", "GROUPS", "FLAT", "split_options", "unknown_keyword", "MODES",
           "CACHE_POLICIES", "READ_STRATEGIES", "OUTPUTS", "SPARSE_AS", "TUNE_POLICIES", "DEFAULT_PIPE_DIR",
           "DEFAULT_PIPE_TIMEOUT", "DEFAULT_BUFFER_BYTES", "MAX_BUFFER_BYTES", "MAX_PARALLEL", "INT64_MAX"]

MODES = ("file", "pipe")
READ_STRATEGIES = ("auto", "sequential", "interleave", "parallel_reads")
OUTPUTS = ("keras", "dict")
SPARSE_AS = ("sparse", "ragged")     # how variable-length features come out: tf.SparseTensor or tf.RaggedTensor
CACHE_POLICIES = ("auto", "memory", "none", "file:PATH")
TUNE_POLICIES = ("stored", "on-first-use", "off")   # use a stored `tfpipe pipeline tune` result / tune once / never
DEFAULT_PIPE_DIR = "/opt/ml/input/data"
DEFAULT_PIPE_TIMEOUT = 300.0           # seconds to wait for a FIFO to appear / a writer to open it
DEFAULT_BUFFER_BYTES = 8 << 20          # the TFRecordDataset read buffer when buffer_size is None (8 MiB)
MAX_BUFFER_BYTES = 1 << 30             # a read buffer beyond 1 GiB only costs memory (10**15 crashes TensorFlow)
MAX_PARALLEL = 1024                    # files read / parse calls at once (10**9 crashes TensorFlow)
INT64_MAX = (1 << 63) - 1              # the largest count or seed TensorFlow takes (an int64)


def check_layout(layout: Any) -> Any:
    """A columnar ``RecordLayout`` as given, None for the example layout (given as None or as that layout)."""
    from converters.tfrecord.layout import RecordLayout

    if layout is None or (isinstance(layout, RecordLayout) and not layout.columnar):
        return None
    if not isinstance(layout, RecordLayout):
        raise ValueError(f"layout must be a converters.tfrecord.layout.RecordLayout or None, got {layout!r}")
    return layout


def _is_int(v: Any) -> bool:
    return is_integral(v)


def _set_count(obj: Any, name: str, **check: Any) -> None:
    """``set_int``, and at most :data:`INT64_MAX`: TensorFlow takes every count, size and seed of a spec as an
    int64, so a larger one is refused here, in one line naming the option, not by TensorFlow in
    ``build_dataset``."""
    set_int(obj, name, **check)
    v = getattr(obj, name)
    if v is not None and v > INT64_MAX:
        shown = str(v) if v.bit_length() <= 256 else f"an integer of {v.bit_length()} bits"
        raise ValueError(f"{name} must be at most 2**63 - 1 (TensorFlow's int64), got {shown}")


@dataclass(frozen=True)
class SourceOptions:
    """Where records come from: the shard files (File mode) or a SageMaker Pipe-mode channel, and what the
    manifest says about them. ``part_weights``: read-time balancing, (files of part k, weight k) in order."""

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
    manifest_sha256: str | None = None     # sha256 of index.json (set by from_manifest): the data fingerprint
    part_weights: tuple[tuple[int, float], ...] = ()
    stream: StreamOptions | None = None    # a remote set streamed through the host's cache (pipeline.remote.stream)
    layout: Any = None                     # a columnar set's RecordLayout (converters.tfrecord.layout); None: Examples

    def __post_init__(self):
        object.__setattr__(self, "layout", check_layout(self.layout))
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
        _set_count(self, "first_epoch", minimum=0, must=">= 0")
        set_real(self, "pipe_timeout", above=0, finite=False, must="> 0 seconds")
        object.__setattr__(self, "compression", normalize_compression(self.compression))
        _set_count(self, "records", minimum=0, none=True, must=">= 0")
        _set_count(self, "total_bytes", minimum=0, none=True, must="a byte count >= 0 or None")
        self._check_parts()
        if self.stream is not None and (not isinstance(self.stream, StreamOptions) or self.mode != "file"
                                        or len(self.stream.shards) != len(self.files) or self.part_weights):
            raise ValueError(f"stream must be StreamOptions with one shard per file, in file mode without "
                             f"part_weights, got {self.stream!r}")

    def _check_parts(self) -> None:
        if not self.part_weights:
            return
        parts = tuple((int(n), float(w)) for n, w in self.part_weights)
        object.__setattr__(self, "part_weights", parts)
        if self.mode != "file" or sum(n for n, _ in parts) != len(self.files) or any(n < 1 for n, _ in parts):
            raise ValueError(f"part_weights must split the files into consecutive non-empty parts (file mode), got "
                             f"{self.part_weights!r} for {len(self.files)} file(s)")
        if any(not 0 < w < math.inf for _, w in parts):
            raise ValueError(f"part weights must be finite numbers > 0, got {[w for _, w in parts]}")


@dataclass(frozen=True)
class ReadOptions:
    """How File mode reads the files (``pipeline.plan.readplan``): ``None`` means the stored tuning result or the rule.
    ``cores``: the cores the rule plans for; ``tuning``: the stored result ``from_manifest`` looked up."""

    read: str = "auto"
    num_parallel_reads: int | None = None  # None: from the tuning result or the rule
    buffer_size: int | None = None         # read buffer bytes; None: tuned, else 8 MiB
    chunk_records: int | None = None       # records per parse call before rebatch; 0: batch → parse; None: auto
    parse_parallelism: int | None = None   # parse map's num_parallel_calls (-1: AUTOTUNE); None: auto
    tune: str = "stored"                   # "stored" | "on-first-use" | "off" (read="auto" only)
    tuning: Any = None                     # pipeline.plan.tunestore.TuneLookup (set by from_manifest), or None
    cores: int = field(default_factory=cpu_count)

    def __post_init__(self):
        if self.read not in READ_STRATEGIES:
            raise ValueError(f"read must be one of {READ_STRATEGIES}, got {self.read!r}")
        _set_count(self, "num_parallel_reads", minimum=1, none=True, must=">= 1 or None")
        _set_count(self, "buffer_size", minimum=0, none=True, must=">= 0 bytes or None")
        if (self.buffer_size or 0) > MAX_BUFFER_BYTES:
            raise ValueError(f"buffer_size must be at most {MAX_BUFFER_BYTES} bytes (1 GiB), got {self.buffer_size!r}")
        _set_count(self, "chunk_records", minimum=0, none=True, must=">= 0 (0: no chunks) or None")
        _set_count(self, "parse_parallelism", minimum=-1, none=True, must=">= 1, -1 (AUTOTUNE) or None")
        if self.parse_parallelism == 0:
            raise ValueError(f"parse_parallelism must be >= 1, -1 (AUTOTUNE) or None, got {self.parse_parallelism!r}")
        for name in ("num_parallel_reads", "parse_parallelism"):
            if (getattr(self, name) or 0) > MAX_PARALLEL:
                raise ValueError(f"{name} must be at most {MAX_PARALLEL}, got {getattr(self, name)!r}")
        if self.tune not in TUNE_POLICIES:
            raise ValueError(f"tune must be one of {TUNE_POLICIES}, got {self.tune!r}")
        _set_count(self, "cores", minimum=1, must=">= 1")


@dataclass(frozen=True)
class ShuffleOptions:
    """Per-record shuffle: ``shuffle_buffer=0`` turns it off; ``seed`` makes every random op repeatable."""

    shuffle_buffer: int = 0
    seed: int | None = None

    def __post_init__(self):
        _set_count(self, "shuffle_buffer", minimum=0, must=">= 0")
        _set_count(self, "seed", minimum=0, none=True, must="a non-negative integer or None")


@dataclass(frozen=True)
class ShardingOptions:
    """Record-level ``shard(num_shards, shard_index)`` across ranks, and the per-epoch ``take(steps)``
    (``None``: equal steps on every rank when sharded and ``equal_steps``)."""

    num_shards: int = 1
    shard_index: int = 0
    steps: int | None = None
    equal_steps: bool = True

    def __post_init__(self):
        _set_count(self, "num_shards", minimum=1, must=">= 1")
        _set_count(self, "shard_index", minimum=0, maximum=self.num_shards - 1, must=f"in [0, {self.num_shards})")
        _set_count(self, "steps", minimum=1, none=True, must="a positive integer or None")


@dataclass(frozen=True)
class CacheOptions:
    """The cache policy (``auto|memory|none|file:PATH``) and the RAM the auto policy plans with
    (``memory_bytes``; None: detected)."""

    cache: str = "auto"
    memory_bytes: int | None = None

    def __post_init__(self):
        c = self.cache
        if not (isinstance(c, str) and (c in ("auto", "memory", "none") or (c.startswith("file:") and len(c) > 5))):
            raise ValueError(f"cache must be one of auto|memory|none|file:PATH, got {c!r}")
        _set_count(self, "memory_bytes", minimum=1, none=True, must="a positive number of bytes or None")


@dataclass(frozen=True)
class BatchOptions:
    """Batches and epochs: ``epochs=None`` repeats forever, ``prefetch=0`` drops the prefetch stage (None:
    AUTOTUNE), ``deterministic=False`` lets parallel stages reorder batches (a little faster)."""

    batch_size: int
    drop_remainder: bool = False
    epochs: int | None = 1
    prefetch: int | None = None
    deterministic: bool = True

    def __post_init__(self):
        _set_count(self, "batch_size", minimum=1, must="a positive integer")
        _set_count(self, "epochs", minimum=1, none=True, must="a positive integer or None (forever)")
        _set_count(self, "prefetch", minimum=0, none=True, must=">= 0 or None (AUTOTUNE)")


@dataclass(frozen=True)
class ParsingOptions:
    """What a batch comes out as: parsed (``parse=False``: serialized records), Keras ``(features, label)``
    or a dict, variable-length features as ``tf.SparseTensor`` or ``tf.RaggedTensor``, and an optional
    ``sparse_features=(ids, values)`` pair merged into one ``[batch, num_features]`` SparseTensor."""

    parse: bool = True
    output: str = "keras"
    sparse_as: str = "sparse"
    sparse_features: tuple[str, str] | None = None
    num_features: int | None = None

    def __post_init__(self):
        if self.output not in OUTPUTS:
            raise ValueError(f"output must be one of {OUTPUTS}, got {self.output!r}")
        if self.sparse_as not in SPARSE_AS:
            raise ValueError(f"sparse_as must be one of {SPARSE_AS}, got {self.sparse_as!r}")
        if self.sparse_features is not None:
            object.__setattr__(self, "sparse_features", tuple(self.sparse_features))
        if is_integral(self.num_features):
            _set_count(self, "num_features")


class ResumeError(TfpipeError, ValueError):
    """A spec that cannot be resumed, or an input state that does not belong to this spec."""


@dataclass(frozen=True)
class ResumeOptions:
    """The resumable File-mode order: one global, seeded record order that is a pure function of (manifest,
    seed, epoch, position), so ``pipeline.input_state`` can save a position and ``build_dataset(spec,
    resume=state)`` continue from it (``pipeline.graph.resumable``). ``resumable=None`` (the default): that order
    when possible — a seeded, shuffled File-mode spec that nothing in ``pipeline.resume.state.resume_choice``
    refuses — else the default shuffle graph; ``True`` demands it (a spec that cannot is refused in one line);
    ``False`` builds the default graph. ``resume_refusal``: why ``from_manifest`` found this spec's files (a plan's
    per-rank lists) unable to resume, when ``resumable`` was not ``True``. ``file_records``: records per file, in
    ``files`` order; ``file_sha256``: each file's sha256, the key of its record-offset index (the one
    ``tfpipe pipeline offsets`` caches); ``from_manifest`` fills both from the manifest. ``plan_fingerprint``:
    the sharding plan whose per-rank file list ``files`` is (``from_manifest(plan=...)`` fills it;
    ``pipeline.resume.state.plan_fingerprint``): a state then holds only under that plan."""

    resumable: bool | None = None
    file_records: tuple[int, ...] = ()
    file_sha256: tuple[str, ...] = ()
    plan_fingerprint: str | None = None
    resume_refusal: str | None = None

    def __post_init__(self):
        if self.resumable is not None and not isinstance(self.resumable, bool):
            raise ValueError(f"resumable must be None (when possible), True or False, got {self.resumable!r}")
        if self.resume_refusal is not None and (not isinstance(self.resume_refusal, str) or not self.resume_refusal):
            raise ValueError(f"resume_refusal must be None or a non-empty string, got {self.resume_refusal!r}")
        counts = tuple(self.file_records)
        if any(not _is_int(n) or not 0 <= n <= INT64_MAX for n in counts):
            raise ValueError(f"file_records must be record counts (integers in [0, 2**63 - 1]), got "
                             f"{self.file_records!r}")
        object.__setattr__(self, "file_records", tuple(int(n) for n in counts))
        digests = tuple(self.file_sha256) if not isinstance(self.file_sha256, str) else (self.file_sha256,)
        bad = next((d for d in digests if not is_sha256(d)), None)
        if bad is not None:
            raise ValueError(f"file_sha256 must be sha256 digests (64 lowercase hex digits, as manifests write "
                             f"them), got {bad!r}")
        object.__setattr__(self, "file_sha256", digests)
        if self.plan_fingerprint is not None and (not isinstance(self.plan_fingerprint, str)
                                                  or not self.plan_fingerprint):
            raise ValueError(f"plan_fingerprint must be None or a non-empty string, got {self.plan_fingerprint!r}")


# attribute of PipelineSpec -> its class, in the spec's field order. Add a new group here (and as a field).
GROUPS: dict[str, type] = {
    "source": SourceOptions, "reading": ReadOptions, "shuffling": ShuffleOptions, "sharding": ShardingOptions,
    "caching": CacheOptions, "batching": BatchOptions, "parsing": ParsingOptions, "resuming": ResumeOptions,
    "offload": ServiceOptions,
}
# flat option name -> the group that holds it
FLAT: dict[str, str] = {f.name: group for group, cls in GROUPS.items() for f in fields(cls)}
if len(FLAT) != sum(len(fields(cls)) for cls in GROUPS.values()):   # one flat name, one option
    raise TypeError("two option groups share an option name: every option needs its own flat name")


def unknown_keyword(name: str, where: str, valid) -> TypeError:
    """The TypeError for a keyword ``where`` does not take, naming the closest valid one."""
    close = difflib.get_close_matches(name, list(valid), n=1, cutoff=0.6)
    hint = f"; did you mean {close[0]!r}?" if close else f"; valid: {', '.join(sorted(valid))}"
    return TypeError(f"{where} got an unexpected keyword argument {name!r}{hint}")


def split_options(options: dict[str, Any], where: str, extra: tuple[str, ...] = ()) -> dict[str, dict[str, Any]]:
    """Flat options sorted into their groups ({group: {name: value}}); an unknown name is a TypeError from
    ``where`` naming the closest valid name (``extra``: other keywords ``where`` takes, for the hint)."""
    out: dict[str, dict[str, Any]] = {}
    for name, value in options.items():
        group = FLAT.get(name)
        if group is None:
            raise unknown_keyword(name, where, [*FLAT, *GROUPS, *extra])
        out.setdefault(group, {})[name] = value
    return out
