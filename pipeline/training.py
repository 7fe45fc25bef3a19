"""Helpers for Keras ``fit`` and ``tf.distribute`` input contexts, and ``tune`` (the read strategy for this
machine and data, measured)."""
from __future__ import annotations

from typing import Any

from .build import build_dataset
from .plan.manifest import PipelineSpec

__all__ = ["keras_dataset", "distributed_dataset_fn", "tune"]


def keras_dataset(manifest: str, batch_size: int, **options: Any):
    """``build_dataset(PipelineSpec.from_manifest(manifest, batch_size, **options))``: ready for ``model.fit``."""
    return build_dataset(PipelineSpec.from_manifest(manifest, batch_size, **options))


def distributed_dataset_fn(manifest: str, global_batch_size: int, **options: Any):
    """A ``dataset_fn(input_context)`` for ``strategy.distribute_datasets_from_function``.

    Each input pipeline reads ``shard(num_input_pipelines, input_pipeline_id)`` of the records (before any
    random op) with the per-replica batch size, and runs the same number of steps as every other pipeline.
    """
    def dataset_fn(input_context):
        per_replica = input_context.get_per_replica_batch_size(global_batch_size)
        spec = PipelineSpec.from_manifest(manifest, per_replica, num_shards=input_context.num_input_pipelines,
                                          shard_index=input_context.input_pipeline_id, **options)
        return build_dataset(spec)

    return dataset_fn


def tune(manifest: str, batch_size: int, *, seconds: float = 30.0, rounds: int = 7, store: bool = True,
         on_round: Any = None, **options: Any):
    """Time the output-equivalent read strategies for this shard set and batch size on this machine, in
    paired rounds, and store the winner (``tfpipe pipeline tune``); returns a ``pipeline.plan.tuning.TuneReport``.
    Afterwards ``read="auto"`` (the default) uses the winner here for this data and batch size."""
    from .plan.tuning import tune_read

    spec = PipelineSpec.from_manifest(manifest, batch_size, **options)
    return tune_read(spec, build_dataset, seconds=seconds, rounds=rounds, store=store, where=str(manifest),
                     on_round=on_round)
