"""Reading a shard set's manifest into a spec: ``PipelineSpec.from_manifest`` (the public ``PipelineSpec`` is
the pure :class:`~pipeline.spec.pipelinespec.PipelineSpecBase` plus this constructor), the stored tuning
result it looks up, the per-rank entry of a sharding plan, a group's weighted parts, and
``download_shards``, the one place a group read with ``label_weights`` downloads a remote set's shards.

A remote set is streamed (``pipeline.remote.stream``): nothing is fetched here, only the cache limit is
checked against the readers before any download. No TensorFlow here.
"""
from __future__ import annotations

import hashlib
import logging
import math
import os
import secrets
from typing import Any

from converters.shardset.reader import check_file
from converters.util.checks import is_real
from converters.util.errors import IntegrityError, TfpipeError
from converters.util.system import scratch_root

from ..spec.options import DEFAULT_PIPE_DIR, DEFAULT_PIPE_TIMEOUT, FLAT, unknown_keyword
from ..spec.pipelinespec import PipelineSpecBase
from ..spec.streamopts import ShardRef, is_remote, stream_options

__all__ = ["PipelineSpec", "default_cache_dir", "download_shards"]

log = logging.getLogger(__name__)

# from_manifest's own keywords (besides the flat options), and the options it fills from the manifest itself
_FROM_MANIFEST_ARGS = ("mode", "channel", "pipe_dir", "pipe_timeout", "shuffle_buffer", "seed", "epochs", "cache",
                       "drop_remainder", "num_shards", "shard_index", "plan", "rank", "stream_cache_dir",
                       "stream_cache_limit", "read_ahead", "copy_dir", "label_weights")
_FROM_MANIFEST_FILLS = ("files", "compression", "records", "total_bytes", "manifest_sha256", "batch_size",
                        "file_records", "file_sha256", "layout")


def default_cache_dir(url: str) -> str:
    """Local directory for shards fetched from ``url``: ``<scratch root>/<hash of the URL>``, the scratch root
    being ``$TFPIPE_CACHE``, ``$TMPDIR/tfpipe``, SageMaker training's ``/tmp/tfpipe`` or ``~/.cache/tfpipe``
    (``converters.util.system.scratch_root``)."""
    key = hashlib.sha256(url.rstrip("/").encode()).hexdigest()[:16]
    return os.path.join(scratch_root()[0], key)



class PipelineSpec(PipelineSpecBase):
    """One input pipeline: every option of :class:`~pipeline.spec.pipelinespec.PipelineSpecBase` (composed of
    option groups, each option also given and read by its flat name; pure), plus :meth:`from_manifest`, the
    spec of a shard set read from its ``index.json``. Build it with :func:`pipeline.build_dataset`; explain it
    with :func:`pipeline.describe`."""

    @classmethod
    def from_manifest(cls, path_or_dir: str | os.PathLike, batch_size: int, *, mode: str = "file",
                      channel: str | None = None, pipe_dir: str = DEFAULT_PIPE_DIR,
                      pipe_timeout: float = DEFAULT_PIPE_TIMEOUT, shuffle_buffer: int = 0,
                      seed: int | None = None, epochs: int | None = 1, cache: str = "auto",
                      drop_remainder: bool = False, num_shards: int = 1, shard_index: int = 0,
                      plan: Any = None, rank: int | None = None, stream_cache_dir: str | None = None,
                      stream_cache_limit: int | str | None = None, read_ahead: int | None = None,
                      copy_dir: str | None = None, label_weights: dict | None = None,
                      **overrides: Any) -> "PipelineSpec":
        """A spec reading the shard set at ``path_or_dir`` (a directory or its ``index.json``; local or s3://).

        ``plan``: a sharding plan (``ShardPlan`` with ``.ranks``/``.for_rank(rank)``) or a single rank's entry
        — any object with ``files``, ``shard``, ``steps`` and ``channel`` attributes (duck typed). Its file
        list (names relative to the manifest) or ``shard=(n, i)`` and its ``steps`` override
        ``num_shards``/``shard_index``. ``label_weights`` ({label: weight}, a group of per-label sets only):
        read the parts balanced at read time (``pipeline.graph.weighted``). Remaining keyword arguments are the
        options of :class:`PipelineSpec` by their flat names (``read=``, ``prefetch=``, ...); a misspelled one
        is a TypeError naming the closest valid name.

        A remote set (``s3://``, ``gs://``, ...) is streamed (``pipeline.remote.stream``): nothing is fetched here;
        ``build_dataset`` fetches each shard, checked, into ``stream_cache_dir`` (shared by the host's ranks) at
        most ``read_ahead`` shards ahead of the ones being read, keeping at most ``stream_cache_limit`` bytes
        there (a size such as ``"200GiB"``, or bytes; None: half the space its file system has for it, read
        when the stream opens). ``stream=StreamOptions(...)`` sets them all at once. A remote balanced group
        (``label_weights``) is copied whole into ``copy_dir`` instead. Both directories default to
        ``default_cache_dir(url)`` (``$TFPIPE_CACHE``, ``$TMPDIR/tfpipe``, SageMaker's ``/tmp/tfpipe`` or
        ``~/.cache/tfpipe``, then ``/<hash of the URL>``).
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
                if overrides.get("resumable", None) is not False:   # each rank's own order; a state names the
                    from ..spec.options import ResumeError                # plan it holds under
                    from .rankplan import plan_fingerprint

                    try:
                        overrides["plan_fingerprint"] = plan_fingerprint(plan)
                    except ResumeError as exc:   # resumable=True: refused; None (when possible): the default graph
                        if overrides.get("resumable") is True:
                            raise
                        overrides["resume_refusal"] = str(exc).removeprefix("resumable=True with ")
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
            stream = stream_options(overrides.pop("stream", None), stream_cache_dir or default_cache_dir(base),
                                    stream_cache_limit, read_ahead)
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
                     download_shards(base, names, by_name, copy_dir or default_cache_dir(base)))
            overrides["part_weights"] = weights
        if manifest.schema.raw:  # an adopted set of records that are not tf.train.Example: their bytes
            overrides.setdefault("parse", False)
        if mode == "file":   # per-file counts: a resumable order seeks by them (a group's: in part order)
            overrides["file_records"] = tuple(by_name[n].records for n in names)
            overrides["file_sha256"] = tuple(by_name[n].sha256 for n in names)
        if manifest.layout.columnar:   # blocks of rows: the graph decodes them (pipeline.graph.columnar)
            overrides["layout"] = manifest.layout
            overrides.setdefault("file_records", tuple(by_name[n].records for n in names))
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
            from ..plan.tunestore import lookup

            spec = spec.with_(tuning=lookup(spec))  # read="auto": a stored `tfpipe pipeline tune` result
        if spec.stream is not None:  # a cache too small for one reader is refused before any download (the
            from ..remote.stream import check_cache_limit  # build checks the width its read opens)

            check_cache_limit(spec.stream, [s.bytes for s in spec.stream.shards], 1)
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
        if not is_real(w) or not 0 <= w < math.inf:
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


def download_shards(base: str, names: list[str], by_name: dict, copy_dir: str) -> list[str]:
    """Download shards from ``base`` into ``copy_dir``, checking size and sha256 against the manifest. A file
    already in the cache is reused only when it passes the same check (else it is fetched again). Names come
    from a validated manifest: plain file names (or ``label=<v>/<name>`` in a group), so every file lands
    inside ``copy_dir``."""
    from converters.storage import open_storage
    from converters.storage.download import fetch_verified

    storage = open_storage(base)
    os.makedirs(copy_dir, exist_ok=True)
    where = base.rstrip("/")
    out = []
    for name in names:
        local = os.path.join(copy_dir, name)
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
                                      f"replaced ({err.strerror}): remove it, or pass another copy_dir") from None
        tmp = f"{local}.{os.getpid()}-{secrets.token_hex(4)}.part"  # concurrent ranks never share one
        log.info("fetching %s/%s -> %s", where, name, local)
        info = by_name[name]
        try:  # the one downloader: retries, deadlines, at most the manifest's bytes, checked (size, sha256)
            fetch_verified(storage, name, tmp, info.bytes, info.sha256, where=f"{where}/{name}")
            os.replace(tmp, local)
        finally:
            if os.path.exists(tmp):
                os.unlink(tmp)
        out.append(local)
    return out
