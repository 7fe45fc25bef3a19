"""``build_dataset(spec)``: a :class:`~pipeline.PipelineSpec` turned into a tf.data graph in the
proven order.

source → (shard) → cache → shuffle → batch → map(vectorized ``tf.io.parse_example``, AUTOTUNE) → repeat →
prefetch(AUTOTUNE); a seeded, shuffled File-mode spec reads the resumable order instead (``resumable=None``: when
possible, ``pipeline.resume.state.resume_choice``; ``pipeline.graph.resumable``). The decisions (read strategy, cache policy, steps) are pure functions of the spec —
``plan_stages`` — so ``describe`` explains exactly what ``build_dataset`` builds.

The read (File mode) comes from :func:`pipeline.plan.readplan.read_plan`: explicit options, else a stored
``tfpipe pipeline tune`` result for this machine and data, else the built-in rule (small records, several
files and cores: an interleave of per-file readers whose chunks of records are parsed in one
``parse_example`` call each and re-cut to uniform batches with ``rebatch``; records that must pass one by
one — shuffle, record-level ``shard`` — one sequential reader; large records ``num_parallel_reads``).

Variable-length features (sparse LibSVM) go through the same batch → ``parse_example`` call, as
``VarLenFeature`` (then ``tf.SparseTensor``; an ``(ids, values)`` pair becomes one ``[batch, num_features]``
matrix) or ``RaggedFeature`` (``tf.RaggedTensor``), as ``spec.sparse_as`` says.
"""
from __future__ import annotations

import logging
import os

from converters.util.errors import TfpipeError
from converters.util.units import format_size

from .graph.buffernotice import absorb_buffer_notice
from .graph.parse import feature_spec, parse_fn
from .graph.tail import graph_tail, parse_batches, tail_stages
from .graph.weighted import build_weighted, weighted_stages
from .plan.graphplan import GraphPlan, plan_graph
from .plan.cachepolicy import MEMORY_CACHE_FRACTION, cache_dataset, choose_cache, total_memory
from .plan.readplan import AUTOTUNE, LARGE_RECORD_BYTES, ReadPlan, choose_read, read_plan, rule_config
from .spec.pipelinespec import PipelineSpecBase
from .spec.stage import Stage
from .threads import process_cpus

__all__ = ["Stage", "plan_stages", "choose_read", "read_plan", "choose_cache", "build_dataset", "feature_spec",
           "parse_fn", "LARGE_RECORD_BYTES", "MEMORY_CACHE_FRACTION", "total_memory"]

log = logging.getLogger(__name__)

def plan_stages(spec: PipelineSpecBase) -> list[Stage]:
    """The stages ``build_dataset(spec)`` builds, in order, with settings and reasons (pure)."""
    return graph_stages(plan_graph(spec))


def graph_stages(plan: GraphPlan) -> list[Stage]:
    """The stages of the graph ``plan`` names."""
    spec = plan.spec
    if plan.graph == "service":  # read + parse on a tf.data service's workers (pipeline.service)
        from .graph.service import service_stages

        return service_stages(spec)
    if plan.graph == "resumable":  # the resumable order: asked for, or when possible (resumable=None)
        from .graph.resumable import resumable_stages

        return resumable_stages(spec)
    if plan.graph == "columnar":  # a columnar set: blocks decoded per batch (pipeline.graph.columnar)
        from .graph.columnar import columnar_stages

        return columnar_stages(spec)
    if plan.graph == "weighted":
        return weighted_stages(spec)
    return _records_stages(plan)


def _records_stages(plan: GraphPlan) -> list[Stage]:
    """The stages of the plain (File mode) and Pipe-mode graphs."""
    spec = plan.spec
    stages: list[Stage] = []
    sharded = spec.num_shards > 1
    read = plan.read if plan.graph == "plain" else None
    if plan.graph == "pipe":
        from .graph.pipesource import fifo_path

        first = fifo_path(spec.pipe_dir, spec.channel, spec.first_epoch)
        reader = "sagemaker_tensorflow.PipeModeDataset" if spec.use_sagemaker_pipe else "tfpipe FIFO reader"
        stages.append(Stage("source", True, {"mode": "pipe", "reader": reader, "fifo": first,
                                             "timeout_s": spec.pipe_timeout, "compression": spec.compression},
                            "sequential read of one FIFO per epoch; framing and CRCs checked in bulk, records "
                            "handed to tf.data a chunk at a time"))
        stages.append(Stage("shard", sharded, {"num_shards": spec.num_shards, "index": spec.shard_index},
                            "record-level shard before any random op" if sharded else "one reader of this channel"))
        strategy = "pipe"
    else:
        cfg = read.config
        strategy = cfg.read
        file_shuffle = _file_shuffle(plan)
        if plan.stream:
            from .remote.stream import stream_stage

            stages.append(stream_stage(spec, cfg, file_shuffle))
        stages.append(Stage("source", True, {"mode": "file", "files": len(spec.files), "read": strategy,
                                             "parallelism": cfg.parallelism, "buffer": format_size(cfg.buffer_size),
                                             "compression": spec.compression, "chosen_by": read.source,
                                             "file_order": (f"shuffled per epoch (seed={spec.seed})" if file_shuffle
                                                            else "manifest order")}, read.why))
        stages.append(Stage("shard", sharded, {"num_shards": spec.num_shards, "index": spec.shard_index},
                            "record-level shard(n, i) before any random op, so ranks never overlap" if sharded
                            else "single rank (or per-rank file list)"))
    policy, path, why = plan.cache
    stages.append(Stage("cache", policy != "none", {"policy": policy, **({"path": path} if path else {})}, why))
    stages.append(Stage("shuffle", bool(spec.shuffle_buffer), {"buffer": spec.shuffle_buffer, "seed": spec.seed},
                        "per-record shuffle (has its own per-record cost)" if spec.shuffle_buffer
                        else "off (shuffle_buffer=0)"))
    how = "batch"
    if not spec.shuffle_buffer and strategy == "pipe" and not spec.use_sagemaker_pipe:
        how = "each stream chunk parsed in one call, then rebatched" if spec.parse else "rebatch of stream chunks"
    elif read is not None and _chunked(spec, read):
        each = "per-file chunks" if strategy == "interleave" else "chunks"
        if spec.parse and _parse_chunks(spec, read):
            how = f"{each} of {read.config.chunk_records} records parsed in one call each, then rebatched"
        else:
            how = (f"{each} of {read.config.chunk_records} records read as batches, parsed per batch" +
                   (", then rebatched" if strategy == "interleave" else "") if spec.parse
                   else f"rebatch of {each} of {read.config.chunk_records} records")
    stages.append(Stage("batch", True, {"batch_size": spec.batch_size, "drop_remainder": spec.drop_remainder,
                                        "how": how}, "batch before parse: one vectorized parse call per batch"))
    steps = plan.steps
    if steps is not None:
        why = ("explicit steps" if spec.steps is not None else
               f"equal steps on every rank so allreduce never waits: the smallest rank has "
               f"{spec.records // spec.num_shards} records")
        if spec.rank_records is not None:
            kept = min(spec.rank_records, steps * spec.batch_size)
            why += f"; this rank uses {kept} of its {spec.rank_records} records per epoch"
        stages.append(Stage("take", True, {"steps": steps}, why))
    why = "next epoch = next FIFO" if spec.mode == "pipe" else "after cache, so memory does not grow"
    stages += tail_stages(spec, calls=_parse_calls(spec, read), deterministic=spec.deterministic, repeat_why=why)
    return stages


def _file_shuffle(plan: GraphPlan) -> bool:
    """Shuffle the file order per epoch (seeded) when records are shuffled — but never under a record-level
    shard (every rank must see the same order) nor before a cache (it would freeze one order)."""
    spec = plan.spec
    return (bool(spec.shuffle_buffer) and spec.num_shards == 1 and len(spec.files) > 1
            and plan.cache[0] == "none")


def _chunked(spec: PipelineSpecBase, plan: ReadPlan) -> bool:
    """Records reach the parse in chunks re-cut by ``rebatch`` (no shuffle; interleave always is)."""
    return not spec.shuffle_buffer and (plan.config.read == "interleave" or plan.config.chunk_records > 0)


def _parse_chunks(spec: PipelineSpecBase, plan: ReadPlan) -> bool:
    """Parse whole chunks (then rebatch the parsed tensors) only when a chunk size was asked for or tuned on
    this machine. The built-in rule keeps the files' turns of one chunk each but reads them as runs of batches
    and parses each batch: a chunk parse saves some CPU per record, but each element then holds thousands of
    records, and beside other multi-threaded processes (a host's other ranks, other TensorFlow jobs) that
    coarse, in-order handover left the graph at about a quarter of a core (records/s over its CPU-seconds:
    0.20-0.41 in 9 of 9 rounds at load 13-16 on 2 cores, against 0.22-0.57 parsing per batch). A stored tuning
    result whose winner is the rule's own config is the rule: built as the rule, per batch."""
    if spec.chunk_records is not None or plan.source == "asked":
        return True
    return plan.source == "tuned" and plan.config != rule_config(spec)[0]


def _read_unit(spec: PipelineSpecBase, plan: ReadPlan) -> tuple[int, int]:
    """(records per element of a per-file reader, elements taken from a file in turn). A chunk parsed per batch
    is read as ``chunk / batch_size`` consecutive batches of one file: the same records in the same order as
    chunks, but small elements from the reader on (no chunk of strings to cut and copy)."""
    chunk = plan.config.chunk_records or spec.batch_size
    if not _parse_chunks(spec, plan) and chunk % spec.batch_size == 0:
        return spec.batch_size, chunk // spec.batch_size
    return chunk, 1


def _parse_calls(spec: PipelineSpecBase, plan: ReadPlan | None) -> int:
    """num_parallel_calls of the parse map (-1: AUTOTUNE): the read plan's, or the spec's in Pipe mode."""
    if plan is not None:
        return plan.config.parse_parallelism
    return AUTOTUNE if spec.parse_parallelism is None else spec.parse_parallelism


def _file_source(graph: GraphPlan):
    import tensorflow as tf

    spec, plan = graph.spec, graph.read
    cfg = plan.config
    absorb_buffer_notice(cfg.buffer_size)
    if spec.stream is not None:  # a remote set: local paths handed out as shards arrive in the cache
        from .remote.stream import stream_source

        return stream_source(spec, cfg, _file_shuffle(graph))
    files = list(spec.files)
    ctype = spec.compression_type
    names = tf.data.Dataset.from_tensor_slices(files)
    if _file_shuffle(graph):
        names = names.shuffle(len(files), seed=spec.seed, reshuffle_each_iteration=True)
    if cfg.read == "interleave":
        if spec.num_shards > 1:
            raise TfpipeError("read='interleave' cannot apply a record-level shard(n, i); use read='sequential' "
                              "or per-rank file lists (plan)")
        b, block = _read_unit(spec, plan)
        # the cycle (which fixes the record order) as planned; its threads no more than this process's vCPUs
        calls = max(1, min(cfg.parallelism, process_cpus()))
        return names.interleave(lambda f: tf.data.TFRecordDataset(f, ctype, cfg.buffer_size).batch(b),
                                cycle_length=cfg.parallelism, block_length=block, num_parallel_calls=calls,
                                deterministic=spec.deterministic), True
    npr = cfg.parallelism if cfg.read == "parallel_reads" else None
    return tf.data.TFRecordDataset(names, ctype, cfg.buffer_size, num_parallel_reads=npr), False


def _shuffle_batch(ds, spec: PipelineSpecBase, batched: bool, seed=None):
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


def _pipe_epochs(plan: GraphPlan):
    import tensorflow as tf

    from .graph.pipesource import pipe_records_dataset, sagemaker_pipe_dataset

    spec, steps = plan.spec, plan.steps
    if spec.use_sagemaker_pipe:
        ds = sagemaker_pipe_dataset(spec)
        if spec.num_shards > 1:
            ds = ds.shard(spec.num_shards, spec.shard_index)
        ds = _shuffle_batch(ds, spec, batched=False)
        return (ds.take(steps) if steps else ds), True, False

    parse_chunks = spec.parse and not spec.shuffle_buffer

    def epoch(e):
        ds = pipe_records_dataset(spec, e)
        if parse_chunks:
            # parse each stream chunk (thousands of records) in one call, then cut the parsed tensors into
            # batches: cheaper than cutting strings first (measured ~+20% on 2 cores)
            ds = parse_batches(ds, spec, _parse_calls(spec, None), spec.deterministic)
            ds = ds.rebatch(spec.batch_size, drop_remainder=spec.drop_remainder)
        else:
            seed = None
            if spec.shuffle_buffer and spec.seed is not None:
                seed = tf.constant(spec.seed, tf.int64) * 1_000_003 + e  # per-epoch seed from (seed, epoch)
            ds = _shuffle_batch(ds, spec, batched=True, seed=seed)
        return ds.take(steps) if steps else ds

    last = spec.first_epoch + spec.epochs if spec.epochs else (1 << 62)
    return tf.data.Dataset.range(spec.first_epoch, last).flat_map(epoch), False, parse_chunks


def build_dataset(spec: PipelineSpecBase, resume: dict | None = None):
    """The tf.data graph for ``spec``: batches of ``(features, label)`` (or a dict, or serialized records).
    ``resume``: an input state (``pipeline.input_state``) of a spec that builds the resumable order (a seeded
    File-mode spec, unless ``resumable=False``: ``pipeline.plan.graphplan.resume_choice``) to continue from."""
    plan = plan_graph(spec, resuming=resume is not None)
    if plan.graph == "plain" and spec.tune == "on-first-use":
        tuned = _tune_on_first_use(spec)
        if tuned is not spec:
            plan = plan_graph(tuned)
    if plan.graph == "service":  # read + parse on a service's workers (pipeline.service)
        from .graph.service import service_dataset

        return service_dataset(plan.spec)
    if plan.graph == "resumable":  # the resumable order (pipeline.graph.resumable)
        from .graph.resumable import build_resumable

        return build_resumable(plan.spec, resume)
    if plan.graph == "columnar":  # a columnar set: blocks decoded per batch (pipeline.graph.columnar)
        from .graph.columnar import build_columnar

        return _cpu_share(build_columnar(plan.spec))
    if plan.graph == "weighted":  # a group of per-label sets, balanced at read time
        return build_weighted(plan.spec)
    return _cpu_share(_build_records(plan))


def _build_records(plan: GraphPlan):
    """The plain (File mode) and Pipe-mode graphs."""
    spec, read = plan.spec, plan.read
    repeat_left, parsed = True, False
    if plan.graph == "pipe":
        ds, repeat_left, parsed = _pipe_epochs(plan)
        read = None
    else:
        ds, batched = _file_source(plan)
        if spec.num_shards > 1:
            ds = ds.shard(spec.num_shards, spec.shard_index)
        ds = cache_dataset(ds, spec)
        if _chunked(spec, read):
            # read in chunks; asked-for or tuned chunks are parsed in one call each (less CPU per record), the
            # rule's are read as runs of batches and parsed per batch (holds its share of the CPU on a busy host)
            unit, _ = _read_unit(spec, read)
            if not batched:  # one sequential stream: batches of the unit are uniform already
                ds = ds.batch(unit, drop_remainder=spec.drop_remainder and unit == spec.batch_size)
            if spec.parse:
                ds = parse_batches(ds, spec, _parse_calls(spec, read), spec.deterministic)
                parsed = True
            if batched or unit != spec.batch_size:  # per-file batches end short at file ends: re-cut them
                ds = ds.rebatch(spec.batch_size, drop_remainder=spec.drop_remainder)
        else:
            ds = _shuffle_batch(ds, spec, batched)
        if plan.steps is not None:
            ds = ds.take(plan.steps)
    return graph_tail(ds, spec, calls=_parse_calls(spec, read), deterministic=spec.deterministic,
                      parsed=parsed, repeat=repeat_left)


def _cpu_share(ds):
    """Where this process may use fewer vCPUs than the host shows (a cgroup quota, other local ranks), size
    tf.data's thread pool and autotune's CPU budget to that share, not to every core (records unchanged)."""
    cpus = process_cpus()
    if cpus >= (os.cpu_count() or 1):
        return ds
    import tensorflow as tf

    opts = tf.data.Options()
    opts.threading.private_threadpool_size = cpus
    opts.autotune.cpu_budget = cpus
    log.info("tf.data sized to this process's %d vCPU(s) of %d", cpus, os.cpu_count())
    return ds.with_options(opts)


def _tune_on_first_use(spec: PipelineSpecBase) -> PipelineSpec:
    """``tune="on-first-use"``: no stored result matches, so time the candidates now (≤ 10 s), store the
    winner and use it. Specs that cannot be tuned (shuffle, Pipe mode, no manifest, ...) keep the rule."""
    from .plan.readplan import data_fingerprint, tunable
    from .plan.tunestore import machine_fingerprint

    data = data_fingerprint(spec)
    tuning = spec.tuning
    if (tunable(spec) is not None or data is None or spec.cores != machine_fingerprint()["cpu_count"]
            or (tuning is not None and tuning.config is not None and tuning.matches(data))):
        return spec
    from .plan.tuning import ON_FIRST_USE_ROUNDS, ON_FIRST_USE_SECONDS, tune_read

    log.info("tune='on-first-use': timing the read candidates for up to %.0f s", ON_FIRST_USE_SECONDS)
    report = tune_read(spec, build_dataset, seconds=ON_FIRST_USE_SECONDS, rounds=ON_FIRST_USE_ROUNDS, quick=True)
    return spec.with_(tuning=report.lookup())
