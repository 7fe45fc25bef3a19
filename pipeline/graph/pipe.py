"""The Pipe-mode graph (SageMaker Pipe mode): one FIFO per epoch read by ``pipeline.graph.pipesource`` (or
``sagemaker_tensorflow.PipeModeDataset``) → (shard) → shuffle → batch → parse → (take), epochs one after the
other, then prefetch. Without a shuffle each stream chunk is parsed in one call and the parsed tensors re-cut
to batches (cheaper than cutting strings first)."""
from __future__ import annotations

from typing import Any

from ..plan.graphplan import GraphPlan
from ..spec.stage import Stage
from .plain import parse_calls, records_stages, shuffle_batch
from .tail import Tail, parse_batches

__all__ = ["stages", "build"]


def stages(plan: GraphPlan) -> list[Stage]:
    """The Pipe-mode graph's stages, in order, with settings and reasons (pure)."""
    from .pipesource import fifo_path

    spec = plan.spec
    sharded = spec.num_shards > 1
    first = fifo_path(spec.pipe_dir, spec.channel, spec.first_epoch)
    reader = "sagemaker_tensorflow.PipeModeDataset" if spec.use_sagemaker_pipe else "tfpipe FIFO reader"
    out = [Stage("source", True, {"mode": "pipe", "reader": reader, "fifo": first, "timeout_s": spec.pipe_timeout,
                                  "compression": spec.compression},
                 "sequential read of one FIFO per epoch; framing and CRCs checked in bulk, records handed to "
                 "tf.data a chunk at a time"),
           Stage("shard", sharded, {"num_shards": spec.num_shards, "index": spec.shard_index},
                 "record-level shard before any random op" if sharded else "one reader of this channel")]
    how = "batch"
    if not spec.shuffle_buffer and not spec.use_sagemaker_pipe:
        how = "each stream chunk parsed in one call, then rebatched" if spec.parse else "rebatch of stream chunks"
    return out + records_stages(plan, how, parse_calls(spec, None), "next epoch = next FIFO")


def build(plan: GraphPlan, resume: dict | None = None) -> tuple[Any, Tail]:
    """The Pipe-mode graph up to its tail, and the tail it gets."""
    import tensorflow as tf

    from .pipesource import pipe_records_dataset, sagemaker_pipe_dataset

    spec, steps = plan.spec, plan.steps
    calls = parse_calls(spec, None)
    if spec.use_sagemaker_pipe:
        ds = sagemaker_pipe_dataset(spec)
        if spec.num_shards > 1:
            ds = ds.shard(spec.num_shards, spec.shard_index)
        ds = shuffle_batch(ds, spec, batched=False)
        return (ds.take(steps) if steps else ds), Tail(calls, spec.deterministic, repeat=True)

    parse_chunks = spec.parse and not spec.shuffle_buffer

    def epoch(e):
        ds = pipe_records_dataset(spec, e)
        if parse_chunks:  # each stream chunk parsed in one call, then the parsed tensors cut into batches
            ds = parse_batches(ds, spec, calls, spec.deterministic)
            ds = ds.rebatch(spec.batch_size, drop_remainder=spec.drop_remainder)
        else:
            seed = None
            if spec.shuffle_buffer and spec.seed is not None:
                seed = tf.constant(spec.seed, tf.int64) * 1_000_003 + e  # per-epoch seed from (seed, epoch)
            ds = shuffle_batch(ds, spec, batched=True, seed=seed)
        return ds.take(steps) if steps else ds

    last = spec.first_epoch + spec.epochs if spec.epochs else (1 << 62)
    return (tf.data.Dataset.range(spec.first_epoch, last).flat_map(epoch),
            Tail(calls, spec.deterministic, parsed=parse_chunks))
