"""Read-time label balancing over a group of per-label shard sets (``--split-by-label``): every part is read on
its own, repeated as needed, and ``tf.data.Dataset.sample_from_datasets`` draws each record from part k with
probability ``weight_k`` (seeded). All the data is kept; rare labels are simply read more often.

Epochs: the sampled stream never ends by itself (every part repeats), so an epoch is defined as many records
as the group holds for this rank (``records // num_shards``), in ``steps = ceil(records / batch_size)`` batches
(``floor`` with ``drop_remainder``); ``epochs=N`` takes ``N`` such epochs, ``epochs=None`` runs forever.
A part smaller than its weight's share is seen more than once per epoch, a larger one partly.

Stages: per part: source (one sequential reader) -> shard(n, i) -> cache -> repeat; then sample -> shuffle ->
batch -> take -> parse (vectorized) -> prefetch.
"""
from __future__ import annotations

from typing import Any

from ..plan.cachepolicy import cache_dataset
from ..plan.graphplan import GraphPlan
from ..plan.readplan import AUTOTUNE
from ..spec.pipelinespec import PipelineSpecBase
from ..spec.stage import Stage
from .tail import Tail, tail_stages

__all__ = ["stages", "build"]


def _parts(spec: PipelineSpecBase) -> list[tuple[tuple[str, ...], float]]:
    out, at = [], 0
    for count, weight in spec.part_weights:
        out.append((spec.files[at:at + count], weight))
        at += count
    return out


def stages(plan: GraphPlan) -> list[Stage]:
    """The stages :func:`build` builds, with settings and reasons (pure)."""
    spec = plan.spec
    parts = _parts(spec)
    policy, path, why = plan.cache
    steps = plan.steps
    return [
        Stage("source", True, {"mode": "file", "parts": len(parts), "files": [len(f) for f, _ in parts],
                               "read": "sequential per part", "compression": spec.compression},
              "one sequential reader per label's shard set"),
        Stage("shard", spec.num_shards > 1, {"num_shards": spec.num_shards, "index": spec.shard_index},
              "record-level shard(n, i) of every part, before any random op" if spec.num_shards > 1
              else "single rank"),
        Stage("cache", policy != "none", {"policy": policy, **({"path": path} if path else {})}, why + " (per part)"),
        Stage("repeat", True, {"parts": "forever"}, "every part repeats: rare labels are read more often"),
        Stage("sample", True, {"weights": [round(w, 6) for _, w in parts], "seed": spec.seed},
              "sample_from_datasets: each record from part k with probability weight_k"),
        Stage("shuffle", bool(spec.shuffle_buffer), {"buffer": spec.shuffle_buffer, "seed": spec.seed},
              "per-record shuffle" if spec.shuffle_buffer else "off (shuffle_buffer=0; sampling already mixes)"),
        Stage("batch", True, {"batch_size": spec.batch_size, "drop_remainder": spec.drop_remainder},
              "batch before parse: one vectorized parse call per batch"),
        Stage("take", steps is not None, {"steps_per_epoch": steps, "epochs": spec.epochs or "forever"},
              "an epoch holds as many records as the group (per rank); the stream itself never ends"),
        *tail_stages(spec, calls=AUTOTUNE, deterministic=spec.deterministic),
    ]


def build(plan: GraphPlan, resume: dict | None = None) -> tuple[Any, Tail]:
    """The graph of a spec with ``part_weights`` up to its tail, and the tail it gets."""
    import tensorflow as tf

    spec = plan.spec
    ctype = spec.compression_type
    datasets, weights = [], []
    for k, (files, weight) in enumerate(_parts(spec)):
        ds = tf.data.TFRecordDataset(list(files), ctype, spec.buffer_size)
        if spec.num_shards > 1:
            ds = ds.shard(spec.num_shards, spec.shard_index)
        ds = cache_dataset(ds, spec, suffix=f".part{k}")
        datasets.append(ds.repeat())
        weights.append(float(weight))
    ds = tf.data.Dataset.sample_from_datasets(datasets, weights=weights, seed=spec.seed,
                                              stop_on_empty_dataset=False)
    if spec.shuffle_buffer:
        ds = ds.shuffle(spec.shuffle_buffer, seed=spec.seed, reshuffle_each_iteration=True)
    ds = ds.batch(spec.batch_size, drop_remainder=spec.drop_remainder)
    if plan.steps is not None and spec.epochs is not None:
        ds = ds.take(plan.steps * spec.epochs)
    return ds, Tail(AUTOTUNE, spec.deterministic)
