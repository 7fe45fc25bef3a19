"""``--shuffle`` on the two-pass engines, the record side: the *scatter* step and pass 2's reading.

After the plan (``prepplan.ShuffleLayout``) has cut the output order into shards and every shard into
buckets (runs of consecutive keys of one part, each at most a quarter of ``--shuffle-memory``), record bytes
move only through files of the run's temporary area — never through an engine's own channels:

* ``scatter(task)`` (parallel, one task per *source*: a run of kept records in input order, e.g. one LibSVM
  unit) re-reads the source's records (the format job's ``batches``), gives each its key
  ``record_keys(seed, kept index, "shuffle")`` and its bucket (its part's bucket whose first key is the
  largest not above it), and writes them grouped by bucket: ``s0000003.data`` (framed bytes),
  ``s0000003.meta`` (key and length per record, 12 bytes) and ``s0000003.idx`` (per bucket: first record and
  first byte; int64 pairs);
* ``shuffled_batches(piece)`` (pass 2, one shard) reads, bucket by bucket, every source's range of that bucket
  (ranged reads), sorts the bucket's records by key and yields them: the shard's records in output order,
  copied byte for byte.
"""
from __future__ import annotations

import tempfile
from dataclasses import dataclass
from typing import Callable, Iterable, Iterator

import numpy as np

from ..prep.keys import record_keys
from ..prep.labels import label_bits
from ..prep.records import take_records
from ..util.errors import TfpipeError
from .area import RunArea
from .core import ShardSpec
from .prepplan import STAND_IN

__all__ = ["Route", "ScatterTask", "ScatterResult", "ShuffledPiece", "scatter", "shuffled_batches",
           "shard_batches", "shuffled_plan", "plan_tmp_root", "KEYS_NAME"]

KEYS_NAME = "shuffle.keys"  # in the temporary area: every part's bucket start keys (uint64), parts in order
_IDX = np.dtype("<i8")


def _source(index: int) -> str:
    return f"s{index:07d}"


@dataclass(frozen=True)
class Route:
    """Where a kept record goes: the shuffle's ``seed``; with a split, the parts' label identities (uint32,
    ascending) and each one's part number; ``bases``: each part's first bucket, then the bucket count."""

    seed: int
    bases: tuple[int, ...]
    labels: tuple[int, ...] = ()
    parts: tuple[int, ...] = ()

    @property
    def buckets(self) -> int:
        return self.bases[-1]

    def buckets_of(self, keys: np.ndarray, labels: np.ndarray | None, starts: np.ndarray) -> np.ndarray:
        """Bucket of each record (``starts``: every part's bucket start keys, parts in order)."""
        if self.labels:
            bits = label_bits(labels)
            at = np.minimum(np.searchsorted(self.labels, bits), len(self.labels) - 1)
            if np.any(np.asarray(self.labels, dtype=np.uint32)[at] != bits):
                raise TfpipeError("a record's label has no part in the plan (did an input change during the run?)")
            part = np.asarray(self.parts, dtype=np.int64)[at]
        else:
            part = np.zeros(keys.shape[0], dtype=np.int64)
        out = np.empty(keys.shape[0], dtype=np.int64)
        for p in np.unique(part):
            sel = part == p
            a, b = self.bases[p], self.bases[p + 1]
            j = np.searchsorted(starts[a:b], keys[sel], side="right") - 1
            if b == a or np.any(j < 0):
                raise TfpipeError("a record's key precedes its part's first bucket (did an input change during "
                                  "the run?)")
            out[sel] = a + j
        return out


@dataclass(frozen=True)
class ScatterTask:
    """Source ``index``: kept records ``[spec.first, spec.first + spec.records)`` in input order, read by the
    format job from ``spec`` (its own pieces), routed by ``route``."""

    index: int
    spec: ShardSpec
    route: Route

    @property
    def records(self) -> int:
        return self.spec.records


@dataclass(frozen=True)
class ScatterResult:
    index: int
    records: int
    bytes: int


@dataclass(frozen=True)
class ShuffledPiece:
    """Pass 2 of a shuffled shard: buckets ``[first, stop)``, gathered from ``sources`` scatter outputs."""

    first: int
    stop: int
    sources: int


def plan_tmp_root(area: RunArea) -> str:
    """Where the plan's own sort keeps its temporary files (unless ``--tmp-dir``): the run's temporary area on
    a local disk (removed with it), else the system's temporary directory."""
    local = area.temp().local_path("")
    return local if local is not None else tempfile.gettempdir()


def shuffled_plan(area: RunArea, layout, sources: list[ShardSpec]) -> tuple[tuple, tuple, tuple]:
    """After ``layout`` (a finished ``prepplan.ShuffleLayout``) ordered and cut the records: store the bucket
    keys, and return the shards (each a ``ShuffledPiece``, numbered part after part), the scatter tasks (one
    per source: kept records in input order, ``spec.first`` the kept index of the first) and the parts
    (``(label, shards)``, split only)."""
    keys, bases = layout.bucket_keys()
    area.put_array(KEYS_NAME, keys)
    cuts = layout.cuts
    order = cuts.order() if cuts.split else list(cuts.parts)
    by_bits = sorted(range(len(order)), key=lambda p: order[p]) if cuts.split else []
    route = Route(layout.options.seed, tuple(bases), tuple(order[p] for p in by_bits), tuple(by_bits))
    tasks = tuple(ScatterTask(k, spec, route) for k, spec in enumerate(sources))
    shards, parts = [], []
    for p, b in enumerate(order):
        ranges = cuts.parts[b].shards()
        for a, n, j0, j1 in ranges:
            shards.append(ShardSpec(len(shards), n, (ShuffledPiece(bases[p] + j0, bases[p] + j1, len(tasks)),),
                                    first=a))
        parts.append(len(ranges))
    return tuple(shards), tasks, tuple(zip(cuts.names(), parts)) if cuts.split else ()


def scatter(area: RunArea, task: ScatterTask, batches: Iterable[tuple[np.ndarray, np.ndarray, np.ndarray | None]]
            ) -> ScatterResult:
    """Write the source's records grouped by bucket (``batches``: its framed records in input order, with
    their framed lengths and labels)."""
    datas, lens, labs = [], [], []
    for framed, lengths, labels in batches:
        datas.append(np.asarray(framed, dtype=np.uint8))
        lens.append(np.asarray(lengths, dtype=np.int64))
        if labels is not None:
            labs.append(np.asarray(labels, dtype=np.float32))
    lengths = np.concatenate(lens) if lens else np.zeros(0, np.int64)
    n, spec, route = int(lengths.shape[0]), task.spec, task.route
    if n != spec.records:
        raise TfpipeError(f"scatter source {task.index}: {n} records re-read where the plan has {spec.records} "
                          "(did an input change during the run?)")
    labels = np.concatenate(labs) if route.labels else None
    keys = record_keys(route.seed, np.arange(spec.first, spec.first + n, dtype=np.uint64))
    bucket = route.buckets_of(keys, labels, area.get_array(KEYS_NAME, np.uint64))
    order = np.argsort(bucket, kind="stable")
    data, picked = take_records(np.concatenate(datas) if datas else np.zeros(0, np.uint8), lengths, order)
    meta = np.empty(n, STAND_IN)
    meta["key"], meta["length"] = keys[order], picked
    idx = np.zeros((route.buckets + 1, 2), dtype=_IDX)
    idx[1:, 0] = np.cumsum(np.bincount(bucket, minlength=route.buckets))
    ends = np.concatenate([[0], np.cumsum(picked)])
    idx[:, 1] = ends[idx[:, 0]]
    name = _source(task.index)
    area.put_array(f"{name}.data", data)
    area.put_array(f"{name}.meta", meta)
    area.put_array(f"{name}.idx", idx.reshape(-1))
    return ScatterResult(task.index, n, int(data.shape[0]))


def shuffled_batches(area: RunArea, piece: ShuffledPiece) -> Iterator[tuple[np.ndarray, np.ndarray]]:
    """The records of buckets ``[piece.first, piece.stop)`` in key order, one bucket at a time (framed bytes
    and lengths)."""
    j0, j1 = piece.first, piece.stop
    rows = {}
    for s in range(piece.sources):
        raw = area.get_range(f"{_source(s)}.idx", j0 * 2 * _IDX.itemsize, (j1 + 1) * 2 * _IDX.itemsize)
        r = np.frombuffer(raw, dtype=_IDX).reshape(-1, 2)
        if r[-1, 0] > r[0, 0]:
            rows[s] = r
    for j in range(j1 - j0):
        metas, datas = [], []
        for s, r in rows.items():
            (a, x), (b, y) = r[j], r[j + 1]
            if b > a:
                name = _source(s)
                metas.append(np.frombuffer(area.get_range(f"{name}.meta", int(a) * STAND_IN.itemsize,
                                                          int(b) * STAND_IN.itemsize), dtype=STAND_IN))
                datas.append(np.frombuffer(area.get_range(f"{name}.data", int(x), int(y)), dtype=np.uint8))
        if not metas:
            continue
        meta = np.concatenate(metas)
        order = np.argsort(meta["key"])
        yield take_records(np.concatenate(datas), meta["length"].astype(np.int64), order)


def shard_batches(area: RunArea, spec: ShardSpec, plain: Callable[[], Iterable[tuple[np.ndarray, np.ndarray]]]
                  ) -> Iterator[tuple[np.ndarray, int]]:
    """Pass 2's input for ``core.write_shard``: ``(framed bytes, records)`` batches of the shard, from the
    shuffle's buckets when the plan shuffled it, else from ``plain()`` (the format's own batches of framed
    bytes and lengths)."""
    if spec.pieces and isinstance(spec.pieces[0], ShuffledPiece):
        batches = shuffled_batches(area, spec.pieces[0])
    else:
        batches = plain()
    return ((framed, len(lengths)) for framed, lengths in batches)
