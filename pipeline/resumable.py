"""The resumable File-mode graph (``resumable=True``): one global record order per epoch, a pure function of
(manifest, seed, epoch), read from any position without reading through the records before it.

Epoch ``e``'s order: the files in a seeded permutation (``index_shuffle`` with seed (seed, e)), their
records concatenated, cut into windows of ``shuffle_buffer`` records, each window permuted with a seed
derived from (seed, e, window). Then batches of ``batch_size`` and ``shard(num_shards, shard_index)`` of the
batches: rank ``i`` takes batches ``i, i + n, ...`` (the ``i``-th slice of every global batch), and every
rank runs ``floor(records / (batch_size × n))`` steps (one rank: ``ceil`` unless ``drop_remainder``).

Resuming at (epoch, position): whole files before the position are skipped by the manifest's record counts
(never opened), the file holding the window that contains the position is entered with
``TFRecordDataset.skip`` (reads that file's record headers only), and at most one window is permuted and
dropped up to the position. Everything runs in tf.data ops: nothing in Python per record.
"""
from __future__ import annotations

from .parse import spec_parse_fn
from .read import AUTOTUNE, DEFAULT_BUFFER_BYTES
from .resume import check_resumable, epoch_records, epoch_steps, resume_position, steps_for
from .stage import Stage

__all__ = ["build_resumable", "resumable_stages", "FILE_KEY"]

FILE_KEY = (1 << 32) - 1     # the window number whose seed orders the files (windows are numbered from 0)


def _seed(seed, epoch, window):
    """A stateless [2] seed derived from (seed, epoch, window) by ``stateless_fold_in`` (the shuffle ops keep
    32 bits of each seed word, so the three are folded in, never packed into one word)."""
    import tensorflow as tf

    fold = tf.random.experimental.stateless_fold_in
    base = tf.constant([seed & 0xFFFFFFFF, seed >> 32], tf.int64)
    return fold(fold(base, tf.cast(epoch, tf.int64)), tf.cast(window, tf.int64))


def _epoch(spec, e, start, out_skip, steps):
    """Epoch ``e``'s batches for this rank from window-aligned record ``start`` of its order, dropping the
    first ``out_skip`` records of the order from there, ``steps`` batches."""
    import tensorflow as tf

    files = tf.constant(list(spec.files))
    counts = tf.constant(list(spec.file_records), tf.int64)
    nf = len(spec.files)
    shuffle = spec.shuffle_buffer > 0
    seed = spec.seed or 0
    ctype = "GZIP" if spec.compression == "gzip" else ""
    buf = spec.buffer_size or DEFAULT_BUFFER_BYTES
    order = tf.range(nf, dtype=tf.int64)
    if shuffle and nf > 1:
        order = tf.random.experimental.index_shuffle(order, _seed(seed, e, FILE_KEY), tf.constant(nf - 1, tf.int64))
    c = tf.gather(counts, order)
    ends = tf.cumsum(c)
    j = tf.minimum(tf.reduce_sum(tf.cast(ends <= start, tf.int64)), nf - 1)
    k = start - (ends[j] - c[j])
    names = tf.gather(files, order)
    recs = tf.data.TFRecordDataset(names[j], ctype, buf).skip(k).concatenate(
        tf.data.TFRecordDataset(names[j + 1:], ctype, buf))
    if shuffle:
        w = spec.shuffle_buffer
        first_window = start // w

        def permute(i, window):
            n = tf.cast(tf.shape(window)[0], tf.int64)
            idx = tf.random.experimental.index_shuffle(tf.range(n), _seed(seed, e, first_window + i), n - 1)
            return tf.gather(window, idx)

        recs = recs.batch(w).enumerate().map(permute).unbatch()
    recs = recs.skip(out_skip)
    sharded = spec.num_shards > 1
    ds = recs.batch(spec.batch_size, drop_remainder=spec.drop_remainder or sharded)
    if sharded:
        ds = ds.shard(spec.num_shards, spec.shard_index)
    return ds.take(steps)


def _plan(spec, resume) -> list[tuple[int, int, int, int]]:
    """(epoch, window-aligned start, records to drop, steps) of the first epoch read; later epochs start at 0."""
    e0, pos = resume_position(spec, resume) if resume is not None else (0, 0)
    w = spec.shuffle_buffer or 1
    aligned = pos - pos % w if spec.shuffle_buffer else pos
    return [(e0, aligned, pos - aligned, steps_for(spec, epoch_records(spec) - pos))]


def build_resumable(spec, resume: dict | None = None):
    """The resumable graph for ``spec`` (from the start, or from the input state ``resume``)."""
    import tensorflow as tf

    check_resumable(spec)
    (e0, start, out_skip, steps0), = _plan(spec, resume)
    last = spec.epochs if spec.epochs is not None else 1 << 62
    per_epoch = epoch_steps(spec)
    i64 = tf.int64
    first = tf.data.Dataset.from_tensors((tf.constant(e0, i64), tf.constant(start, i64), tf.constant(out_skip, i64),
                                          tf.constant(steps0, i64)))
    rest = tf.data.Dataset.range(e0 + 1, max(e0 + 1, last)).map(
        lambda e: (e, tf.constant(0, i64), tf.constant(0, i64), tf.constant(per_epoch, i64)))
    epochs = (first if e0 < last else first.take(0)).concatenate(rest)
    ds = epochs.flat_map(lambda e, s, o, n: _epoch(spec, e, s, o, n))
    if spec.parse:
        calls = AUTOTUNE if spec.parse_parallelism is None else spec.parse_parallelism
        # always in order: deterministic=False could swap batches, and a resume must find them where they were
        ds = ds.map(spec_parse_fn(spec), num_parallel_calls=calls, deterministic=True)
    if spec.prefetch != 0:
        ds = ds.prefetch(AUTOTUNE if spec.prefetch is None else spec.prefetch)
    return ds


def resumable_stages(spec) -> list[Stage]:
    """What ``describe`` shows for a resumable spec."""
    check_resumable(spec)
    n = spec.num_shards
    shuffle = spec.shuffle_buffer > 0
    return [
        Stage("source", True, {"mode": "file", "files": len(spec.files), "read": "sequential", "resumable": True,
                               "file_order": f"permuted per epoch (seed={spec.seed})" if shuffle else "manifest order"},
              "resumable: one global order, a pure function of (manifest, seed, epoch); a resume skips whole "
              "files by their record counts"),
        Stage("shuffle", shuffle, {"window": spec.shuffle_buffer, "seed": spec.seed},
              "each window of shuffle_buffer records permuted with a seed from (seed, epoch, window)" if shuffle
              else "off (shuffle_buffer=0)"),
        Stage("batch", True, {"batch_size": spec.batch_size, "drop_remainder": spec.drop_remainder or n > 1},
              "batch before parse: one vectorized parse call per batch"),
        Stage("shard", n > 1, {"num_shards": n, "index": spec.shard_index},
              "rank i takes batches i, i+n, ... of the global order: positions are global" if n > 1
              else "single rank"),
        Stage("take", True, {"steps": epoch_steps(spec)}, "steps per epoch from the global order"),
        Stage("cache", False, {"policy": "none"}, "resumable order reads the files every epoch"),
        Stage("parse", spec.parse, {"fn": "tf.io.parse_example"}, "vectorized parse from the manifest's schema"),
        Stage("repeat", spec.epochs != 1, {"epochs": spec.epochs if spec.epochs else "forever"},
              "one order per epoch, from (seed, epoch)"),
        Stage("prefetch", spec.prefetch != 0, {"buffer": "AUTOTUNE" if spec.prefetch is None else spec.prefetch},
              "last: overlaps input with the training step"),
    ]
