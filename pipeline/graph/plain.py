"""The plain File-mode graph: source → (shard) → cache → shuffle → batch → map(vectorized
``tf.io.parse_example``) → (take) → repeat → prefetch, the read as the plan's :class:`~pipeline.plan.readplan.ReadPlan`
says (explicit options, else a stored ``tfpipe pipeline tune`` result for this machine and data, else the
built-in rule: small records, several files and cores read as an interleave of per-file readers whose chunks
are re-cut to uniform batches with ``rebatch``; records that must pass one by one — shuffle, record-level
``shard`` — one sequential reader; large records ``num_parallel_reads``).

Variable-length features (sparse LibSVM) go through the same batch → ``parse_example`` call, as
``VarLenFeature`` (then ``tf.SparseTensor``; an ``(ids, values)`` pair becomes one ``[batch, num_features]``
matrix) or ``RaggedFeature`` (``tf.RaggedTensor``), as ``spec.sparse_as`` says. The Pipe-mode graph
(``pipeline.graph.pipe``) shares the stages after its source.
"""
from __future__ import annotations

from typing import Any

from converters.util.errors import TfpipeError
from converters.util.units import format_size

from ..plan.cachepolicy import cache_dataset
from ..plan.graphplan import GraphPlan
from ..plan.readplan import AUTOTUNE, ReadPlan, rule_config
from ..spec.stage import Stage
from ..plan.cpushare import process_cpus
from .buffernotice import absorb_buffer_notice
from .tail import Tail, parse_batches, tail_stages

__all__ = ["stages", "build", "records_stages", "shuffle_batch", "parse_calls"]


def stages(plan: GraphPlan) -> list[Stage]:
    """The plain graph's stages, in order, with settings and reasons (pure)."""
    spec, read = plan.spec, plan.read
    cfg = read.config
    file_shuffle = _file_shuffle(plan)
    out: list[Stage] = []
    if plan.stream:
        from ..remote.stream import stream_stage

        out.append(stream_stage(spec, cfg, file_shuffle))
    out.append(Stage("source", True, {"mode": "file", "files": len(spec.files), "read": cfg.read,
                                      "parallelism": cfg.parallelism, "buffer": format_size(cfg.buffer_size),
                                      "compression": spec.compression, "chosen_by": read.source,
                                      "file_order": (f"shuffled per epoch (seed={spec.seed})" if file_shuffle
                                                     else "manifest order")}, read.why))
    sharded = spec.num_shards > 1
    out.append(Stage("shard", sharded, {"num_shards": spec.num_shards, "index": spec.shard_index},
                     "record-level shard(n, i) before any random op, so ranks never overlap" if sharded
                     else "single rank (or per-rank file list)"))
    how = "batch"
    if _chunked(spec, read):
        each = "per-file chunks" if cfg.read == "interleave" else "chunks"
        if spec.parse and _parse_chunks(spec, read):
            how = f"{each} of {cfg.chunk_records} records parsed in one call each, then rebatched"
        else:
            how = (f"{each} of {cfg.chunk_records} records read as batches, parsed per batch" +
                   (", then rebatched" if cfg.read == "interleave" else "") if spec.parse
                   else f"rebatch of {each} of {cfg.chunk_records} records")
    return out + records_stages(plan, how, parse_calls(spec, read), "after cache, so memory does not grow")


def records_stages(plan: GraphPlan, how: str, calls: int, repeat_why: str) -> list[Stage]:
    """The stages after the source of a record stream (plain and Pipe mode): cache, shuffle, batch, take, tail."""
    spec = plan.spec
    policy, path, why = plan.cache
    out = [Stage("cache", policy != "none", {"policy": policy, **({"path": path} if path else {})}, why),
           Stage("shuffle", bool(spec.shuffle_buffer), {"buffer": spec.shuffle_buffer, "seed": spec.seed},
                 "per-record shuffle (has its own per-record cost)" if spec.shuffle_buffer
                 else "off (shuffle_buffer=0)"),
           Stage("batch", True, {"batch_size": spec.batch_size, "drop_remainder": spec.drop_remainder, "how": how},
                 "batch before parse: one vectorized parse call per batch")]
    steps = plan.steps
    if steps is not None:
        why = ("explicit steps" if spec.steps is not None else
               f"equal steps on every rank so allreduce never waits: the smallest rank has "
               f"{spec.records // spec.num_shards} records")
        if spec.rank_records is not None:
            kept = min(spec.rank_records, steps * spec.batch_size)
            why += f"; this rank uses {kept} of its {spec.rank_records} records per epoch"
        out.append(Stage("take", True, {"steps": steps}, why))
    return out + tail_stages(spec, calls=calls, deterministic=spec.deterministic, repeat_why=repeat_why)


def build(plan: GraphPlan, resume: dict | None = None) -> tuple[Any, Tail]:
    """The plain graph up to its tail, and the tail it gets."""
    spec, read = plan.spec, plan.read
    parsed = False
    ds, batched = _file_source(plan)
    if spec.num_shards > 1:
        ds = ds.shard(spec.num_shards, spec.shard_index)
    ds = cache_dataset(ds, spec)
    if _chunked(spec, read):
        # asked-for or tuned chunks are parsed in one call each, the rule's read as runs of batches and parsed
        # per batch (docs/pipeline.md: how the read is chosen)
        unit, _ = _read_unit(spec, read)
        if not batched:  # one sequential stream: batches of the unit are uniform already
            ds = ds.batch(unit, drop_remainder=spec.drop_remainder and unit == spec.batch_size)
        if spec.parse:
            ds = parse_batches(ds, spec, parse_calls(spec, read), spec.deterministic)
            parsed = True
        if batched or unit != spec.batch_size:  # per-file batches end short at file ends: re-cut them
            ds = ds.rebatch(spec.batch_size, drop_remainder=spec.drop_remainder)
    else:
        ds = shuffle_batch(ds, spec, batched)
    if plan.steps is not None:
        ds = ds.take(plan.steps)
    return ds, Tail(parse_calls(spec, read), spec.deterministic, parsed=parsed, repeat=True)


def _file_shuffle(plan: GraphPlan) -> bool:
    """Shuffle the file order per epoch (seeded) when records are shuffled — but never under a record-level
    shard (every rank must see the same order) nor before a cache (it would freeze one order)."""
    spec = plan.spec
    return (bool(spec.shuffle_buffer) and spec.num_shards == 1 and len(spec.files) > 1
            and plan.cache[0] == "none")


def _chunked(spec, read: ReadPlan) -> bool:
    """Records reach the parse in chunks re-cut by ``rebatch`` (no shuffle; interleave always is)."""
    return not spec.shuffle_buffer and (read.config.read == "interleave" or read.config.chunk_records > 0)


def _parse_chunks(spec, read: ReadPlan) -> bool:
    """Parse whole chunks (then rebatch the parsed tensors) only when a chunk size was asked for or tuned on
    this machine; the built-in rule reads its chunks as runs of batches and parses each batch, which holds its
    share of the CPU beside other multi-threaded processes (docs/pipeline.md). A stored tuning result whose
    winner is the rule's own config is the rule: built as the rule, per batch."""
    if spec.chunk_records is not None or read.source == "asked":
        return True
    return read.source == "tuned" and read.config != rule_config(spec)[0]


def _read_unit(spec, read: ReadPlan) -> tuple[int, int]:
    """(records per element of a per-file reader, elements taken from a file in turn). A chunk parsed per batch
    is read as ``chunk / batch_size`` consecutive batches of one file: the same records in the same order as
    chunks, but small elements from the reader on (no chunk of strings to cut and copy)."""
    chunk = read.config.chunk_records or spec.batch_size
    if not _parse_chunks(spec, read) and chunk % spec.batch_size == 0:
        return spec.batch_size, chunk // spec.batch_size
    return chunk, 1


def parse_calls(spec, read: ReadPlan | None) -> int:
    """num_parallel_calls of the parse map (-1: AUTOTUNE): the read plan's, or the spec's in Pipe mode."""
    if read is not None:
        return read.config.parse_parallelism
    return AUTOTUNE if spec.parse_parallelism is None else spec.parse_parallelism


def _file_source(plan: GraphPlan):
    import tensorflow as tf

    spec, cfg = plan.spec, plan.read.config
    absorb_buffer_notice(cfg.buffer_size)
    if plan.stream:  # a remote set: local paths handed out as shards arrive in the cache
        from .streamsource import stream_source

        return stream_source(spec, cfg, _file_shuffle(plan))
    files = list(spec.files)
    ctype = spec.compression_type
    names = tf.data.Dataset.from_tensor_slices(files)
    if _file_shuffle(plan):
        names = names.shuffle(len(files), seed=spec.seed, reshuffle_each_iteration=True)
    if cfg.read == "interleave":
        if spec.num_shards > 1:
            raise TfpipeError("read='interleave' cannot apply a record-level shard(n, i); use read='sequential' "
                              "or per-rank file lists (plan)")
        b, block = _read_unit(spec, plan.read)
        # the cycle (which fixes the record order) as planned; its threads no more than this process's vCPUs
        calls = max(1, min(cfg.parallelism, process_cpus()))
        return names.interleave(lambda f: tf.data.TFRecordDataset(f, ctype, cfg.buffer_size).batch(b),
                                cycle_length=cfg.parallelism, block_length=block, num_parallel_calls=calls,
                                deterministic=spec.deterministic), True
    npr = cfg.parallelism if cfg.read == "parallel_reads" else None
    return tf.data.TFRecordDataset(names, ctype, cfg.buffer_size, num_parallel_reads=npr), False


def shuffle_batch(ds, spec, batched: bool, seed=None):
    """shuffle → batch of a record stream (``batched``: elements are already vectors of records)."""
    seed = spec.seed if seed is None else seed
    if spec.shuffle_buffer:
        if batched:
            ds = ds.unbatch()
        ds = ds.shuffle(spec.shuffle_buffer, seed=seed, reshuffle_each_iteration=True)
        return ds.batch(spec.batch_size, drop_remainder=spec.drop_remainder)
    if batched:
        return ds.rebatch(spec.batch_size, drop_remainder=spec.drop_remainder)
    return ds.batch(spec.batch_size, drop_remainder=spec.drop_remainder)
