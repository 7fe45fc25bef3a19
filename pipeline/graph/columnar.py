"""The graph of a columnar set (``converters.tfrecord.layout``): read blocks, decode whole batches of blocks
(every block checked, then each column cut and cast in one pass by the column kernel,
``pipeline.graph.cutkernel``, or by ``tf.io.decode_raw`` where it is off: no per-row work in Python or
tf.data), shuffle rows across blocks
(``pipeline.graph.rowshuffle``), cut to ``batch_size`` with ``rebatch``.

source (files, a streamed remote set, or a Pipe-mode FIFO per epoch) → block-level shard(n, i) → cache →
batch(blocks per decode) → decode → row shuffle → rebatch(batch_size) → take(equal steps) → repeat → prefetch.

Ranks take whole blocks in turn (block ``g`` of the set to rank ``g % n``), read in manifest order, so every
rank knows every rank's rows (``pipeline.spec.blocks``) and ``take`` gives all the same steps."""
from __future__ import annotations

import logging
from dataclasses import replace
from typing import Any

from ..plan.readplan import AUTOTUNE, ReadPlan
from ..spec.blocks import decode_rows_for
from ..spec.options import DEFAULT_BUFFER_BYTES
from ..spec.pipelinespec import PipelineSpecBase
from ..spec.stage import Stage
from .blockcheck import decode_blocks_fn  # noqa: F401 - the bare decode, named here too
from .cutkernel import KERNEL_FN
from .rowshuffle import pool_rows, row_generator, shuffle_rows

__all__ = ["decode_blocks_fn", "decode_rows", "blocks_per_decode", "shuffle_step", "columnar_stages",
           "row_output", "columnar_output", "build_columnar", "stages", "build"]

log = logging.getLogger(__name__)

SHUFFLE_CHUNK_FRACTION = 16  # a shuffled read decodes chunks of at most shuffle_buffer / 16 rows (the pool the rest)


def decode_rows(spec: PipelineSpecBase, read: ReadPlan) -> int:
    """Rows per decode call: the read plan's ``chunk_records`` (the rule's ``decode_rows_for(schema)``, a tuned or an
    asked-for one); a shuffled read no more than one shuffle step."""
    rows = read.config.chunk_records or decode_rows_for(spec.schema)
    return min(rows, shuffle_step(spec)) if spec.shuffle_buffer else rows


def _calls(spec: PipelineSpecBase, read: ReadPlan) -> int:
    """num_parallel_calls of the decode map: the read plan's parse parallelism (-1: AUTOTUNE)."""
    return read.config.parse_parallelism if spec.mode == "file" else (
        AUTOTUNE if spec.parse_parallelism is None else spec.parse_parallelism)


def shuffle_step(spec: PipelineSpecBase) -> int:
    """Rows that join (and leave) the shuffle pool at a time: a sixteenth of ``shuffle_buffer``. Smaller steps
    move rows further (closer to ``shuffle(B)``, where one record enters at a time: 0.94x of its mean
    displacement at an eighth, 0.97x at a sixteenth, B=10,000) but copy the pool more often."""
    return max(1, spec.shuffle_buffer // SHUFFLE_CHUNK_FRACTION)


def blocks_per_decode(spec: PipelineSpecBase, read: ReadPlan) -> int:
    return max(1, round(decode_rows(spec, read) / spec.layout.block_rows))


def _sequential(spec: PipelineSpecBase) -> bool:
    """Blocks in manifest order from one reader: under a block-level shard every rank must see one order."""
    return spec.num_shards > 1


def _file_shuffle(spec: PipelineSpecBase) -> bool:
    from ..plan.cachepolicy import choose_cache

    return bool(spec.shuffle_buffer) and len(spec.files) > 1 and choose_cache(spec)[0] == "none" \
        and spec.num_shards == 1


def _read_config(spec: PipelineSpecBase, read: ReadPlan):
    """The read plan's config (the rule: one sequential reader; a block is hundreds of rows, so one reader
    keeps the decode busy, and rows come in the stored order), sequential under a block-level shard."""
    cfg = read.config
    if _sequential(spec) or cfg.parallelism == 1:
        cfg = replace(cfg, read="sequential", parallelism=1)
    return cfg


def columnar_stages(spec: PipelineSpecBase, read: ReadPlan) -> list[Stage]:
    """The stages ``build_columnar(spec, read)`` builds, with settings and reasons (pure)."""
    from ..plan.cachepolicy import choose_cache
    from .tail import tail_stages

    lay = spec.layout
    stored = ", ".join(f"{n}:{t}" for n, t in lay.stored)
    stages: list[Stage] = []
    if spec.mode == "pipe":
        from .pipesource import fifo_path

        stages.append(Stage("source", True, {"mode": "pipe", "layout": "columnar", "block_rows": lay.block_rows,
                                             "fifo": fifo_path(spec.pipe_dir, spec.channel, spec.first_epoch)},
                            "one FIFO per epoch, records are blocks of rows"))
    else:
        cfg = _read_config(spec, read)
        if spec.stream is not None:
            from ..remote.stream import stream_stage

            stages.append(stream_stage(spec, cfg, _file_shuffle(spec)))
        stages.append(Stage("source", True, {"mode": "file", "layout": "columnar", "block_rows": lay.block_rows,
                                             "files": len(spec.files), "read": cfg.read,
                                             "parallelism": cfg.parallelism, "chosen_by": read.source,
                                             "file_order": (f"shuffled per epoch (seed={spec.seed})"
                                                            if _file_shuffle(spec) else "manifest order")},
                            read.why))
    sharded = spec.num_shards > 1
    stages.append(Stage("shard", sharded, {"num_shards": spec.num_shards, "index": spec.shard_index,
                                           "unit": "block"},
                        "block-level shard(n, i) in manifest order: rank i takes blocks i, i+n, ..." if sharded
                        else "single rank (or per-rank file list)"))
    policy, path, why = choose_cache(spec)
    stages.append(Stage("cache", policy != "none", {"policy": policy, **({"path": path} if path else {})}, why))
    k = blocks_per_decode(spec, read)
    calls = _calls(spec, read)
    stages.append(Stage("decode", True, {"blocks_per_call": k, "rows_per_call": k * lay.block_rows,
                                         "fn": KERNEL_FN, "stored": stored,
                                         "num_parallel_calls": "AUTOTUNE" if calls == AUTOTUNE else calls,
                                         "output": spec.output},
                        "every block checked, then each column cut and cast to "
                        "the schema's dtypes"))
    if spec.shuffle_buffer:
        step = shuffle_step(spec)
        pool = pool_rows(spec.shuffle_buffer, step)
        stages.append(Stage("shuffle", True, {"buffer": spec.shuffle_buffer, "pool": pool, "step": step,
                                              "seed": spec.seed, "unit": "row"},
                            f"rows mixed across blocks: {step} decoded rows at a time join a pool of {pool}, "
                            f"and {step} rows picked at random from all of them leave"))
    else:
        stages.append(Stage("shuffle", False, {"buffer": 0}, "off (shuffle_buffer=0)"))
    stages.append(Stage("batch", True, {"batch_size": spec.batch_size, "drop_remainder": spec.drop_remainder,
                                        "how": "rebatch of decoded chunks"},
                        "any batch size: rebatch cuts the decoded columns, no per-row step"))
    steps = spec.take_steps
    if steps is not None:
        why = "explicit steps" if spec.steps is not None else (
            f"equal steps on every rank: the smallest rank has {steps_rows(spec)} rows")
        stages.append(Stage("take", True, {"steps": steps}, why))
    why = "next epoch = next FIFO" if spec.mode == "pipe" else "after cache, so memory does not grow"
    tail = tail_stages(spec, calls=calls, deterministic=spec.deterministic, repeat_why=why)
    return stages + [s for s in tail if s.name != "parse"]


def steps_rows(spec: PipelineSpecBase) -> int:
    from ..spec.blocks import smallest_rank_rows, spec_file_rows

    return smallest_rank_rows(spec_file_rows(spec), spec.layout.block_rows, spec.num_shards)


def _decoded(blocks: Any, spec: PipelineSpecBase, read: ReadPlan, gen: Any, tables=None) -> Any:
    """``blocks``: chunks of tagged blocks (``blockcheck.tag_file`` / ``tag_stream``), checked as they are
    decoded."""
    from .blockcheck import block_decoder

    calls = _calls(spec, read)
    decode, out = block_decoder(spec, tables, regrouped=spec.num_shards > 1), row_output(spec)
    if spec.shuffle_buffer:     # the row shuffle works on the dict: the output is made after it
        out = (lambda d: d)
    ds = blocks.map(lambda *chunk: out(decode(*chunk)), num_parallel_calls=calls, deterministic=spec.deterministic)
    if spec.shuffle_buffer:   # the pool and one step of rows hold shuffle_buffer rows, as shuffle(B) holds B
        step = shuffle_step(spec)
        ds = shuffle_rows(ds.rebatch(step), pool_rows(spec.shuffle_buffer, step), gen)
    ds = ds.rebatch(spec.batch_size, drop_remainder=spec.drop_remainder)
    steps = spec.take_steps
    return ds.take(steps) if steps is not None else ds


def row_output(spec: PipelineSpecBase):
    """The function from a dict of decoded columns to the spec's output: the dict, or ``(features, label)``
    (applied in the decode's own function: no tf.data step per batch for it)."""
    label = spec.schema.label
    if spec.output == "dict" or label is None:
        return lambda d: d
    return lambda d: ({k: v for k, v in d.items() if k != label}, d[label])


def columnar_output(ds: Any, spec: PipelineSpecBase) -> Any:
    """Batches of decoded rows as the spec's output (``ds`` already in it when its decode gave it)."""
    if spec.output == "dict" or spec.schema.label is None or not isinstance(ds.element_spec, dict):
        return ds
    return ds.map(row_output(spec))


def _file_blocks(spec: PipelineSpecBase, read: ReadPlan, tables) -> Any:
    """The read's blocks in chunks of ``blocks_per_decode``, tagged with their file and index (``tables``:
    ``blockcheck.file_tables``), or with their index in the read (a streamed set, or no per-file row counts)."""
    import tensorflow as tf

    from .blockcheck import tag_file, tag_stream

    from .buffernotice import absorb_buffer_notice

    cfg = _read_config(spec, read)
    absorb_buffer_notice(cfg.buffer_size)
    if spec.stream is not None:
        from .streamsource import stream_source

        ds, _ = stream_source(spec, replace(cfg, read="sequential" if cfg.read == "interleave" else cfg.read,
                                            chunk_records=0), _file_shuffle(spec))
        return tag_stream(ds, blocks_per_decode(spec, read))
    npr = None if cfg.read == "sequential" else min(cfg.parallelism, len(spec.files))
    ctype, buf = spec.compression_type, cfg.buffer_size or DEFAULT_BUFFER_BYTES
    if tables is None:
        names = tf.data.Dataset.from_tensor_slices(list(spec.files))
        return tag_stream(tf.data.TFRecordDataset(names, ctype, buf, num_parallel_reads=npr),
                          blocks_per_decode(spec, read))
    index = tf.data.Dataset.range(len(spec.files))
    if _file_shuffle(spec):
        index = index.shuffle(len(spec.files), seed=spec.seed, reshuffle_each_iteration=True)
    paths = tf.constant(list(spec.files))

    def one(f):
        return tag_file(spec, tables, f, tf.data.TFRecordDataset(tf.gather(paths, f), ctype, buf),
                        blocks_per_decode(spec, read))

    if npr is None:
        return index.flat_map(one)
    return index.interleave(one, cycle_length=npr, block_length=1, num_parallel_calls=npr, deterministic=True)


def build_columnar(spec: PipelineSpecBase, read: ReadPlan) -> Any:
    """The tf.data graph of a columnar spec: batches of ``(features, label)`` or a dict, the same tensors the
    Example layout gives."""
    import tensorflow as tf

    from ..plan.cachepolicy import cache_dataset
    from .blockcheck import drop_ends, file_tables, knows_files, tag_stream
    from .tail import Tail

    calls = _calls(spec, read)
    gen = row_generator(spec.seed) if spec.shuffle_buffer else None
    if spec.mode == "pipe":
        from .pipesource import pipe_records_dataset

        def epoch(e):
            # the FIFO reader keeps this rank's records (blocks) itself: block g of the stream when g % n == i
            records = tag_stream(pipe_records_dataset(spec, e).unbatch(), blocks_per_decode(spec, read))
            return _decoded(records, spec, read, gen)

        last = spec.first_epoch + spec.epochs if spec.epochs else (1 << 62)
        ds = tf.data.Dataset.range(spec.first_epoch, last).flat_map(epoch)
        repeat = False
    else:
        tables = file_tables(spec) if knows_files(spec) else None
        blocks = _file_blocks(spec, read, tables)
        if spec.num_shards > 1:   # whole blocks in turn (files' end markers checked, dropped), then chunks
            blocks = blocks if tables is None else drop_ends(spec, tables, blocks)
            blocks = blocks.unbatch().shard(spec.num_shards, spec.shard_index).batch(blocks_per_decode(spec, read))
        ds = _decoded(cache_dataset(blocks, spec), spec, read, gen, tables)
        repeat = True
    return columnar_output(ds, spec), Tail(calls, spec.deterministic, parsed=True, repeat=repeat)


def stages(plan) -> list[Stage]:
    """The columnar graph's stages."""
    return columnar_stages(plan.spec, plan.read)


def build(plan, resume: dict | None = None) -> Any:
    """The columnar graph up to its tail, and the tail it gets."""
    return build_columnar(plan.spec, plan.read)
