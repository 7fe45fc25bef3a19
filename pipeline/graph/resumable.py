"""The resumable File-mode graph (``resumable=True``): one global record order per epoch, a pure function of
(manifest, seed, epoch), read from any position without reading through the records before it.

Epoch ``e``'s order: the files in a seeded permutation (``index_shuffle`` with seed (seed, e)), their
records concatenated, then shuffled by ``pipeline.resume.delayorder``: each record waits a random delay (a pure
function of (seed, e, its position), mean ``shuffle_buffer``) and records leave in the order of position +
delay, which moves records as far as ``shuffle(shuffle_buffer)`` or further with about as many records held.
Then batches of ``batch_size`` and ``shard(num_shards, shard_index)`` of the batches: rank ``i`` takes
batches ``i, i + n, ...`` (the ``i``-th slice of every global batch), and every rank runs
``floor(records / (batch_size × n))`` steps (one rank: ``ceil`` unless ``drop_remainder``).

Resuming at (epoch, position) is planned eagerly at build time (Python ints): ``delayorder.resume_point``
gives the record where reading restarts (at most ``8 × shuffle_buffer`` records before the position's chunk);
whole files before it are skipped by the manifest's record counts (never opened) and a file is entered in the
middle only through :func:`enter`. Those records refill the delay order's waiting records in one step, and it
emits from the position's chunk on. Later epochs are one generic graph over the epoch number. Everything runs
in tf.data ops: nothing in Python per record.

A streamed remote set reads the same order through ``pipeline.graph.resumestream`` (its shards fetched in that
order, from the entry point on); a balanced group (``label_weights``) is one endless sampled stream of its
parts' own orders (:func:`sampled_batches`, planned by ``pipeline.graph.resumeweighted``); a columnar set's
order is over its decoded rows, positions in rows (``pipeline.graph.resumerows``), shuffled by the window order
(``pipeline.resume.windoworder``) instead of the delay order.
"""
from __future__ import annotations

from .tail import Tail, tail_stages
from ..plan.readplan import AUTOTUNE, DEFAULT_BUFFER_BYTES
from ..spec.blocks import locate
from ..spec.stage import Stage
from ..resume.delayorder import chunk_size, delay_key, delay_order, max_delay, resume_point, step_records
from ..resume.state import check_resumable, epoch_records, order_epoch_steps, resume_position, steps_for
from ..resume.seek import seek_pays
from .resumeweighted import BLOCK_KEY, block_positions, part_counts, part_spec, sampled_stages, sampled_steps

__all__ = ["stages", "build", "build_resumable", "resumable_stages", "enter", "order_from", "order_of", "cut_batches", "sampled_batches",
           "FILE_KEY", "CHUNK_KEY"]

FILE_KEY = (1 << 32) - 1     # folded into (seed, epoch) for the seed that orders the files
CHUNK_KEY = (1 << 32) - 2    # folded into (seed, epoch) for the key of the delays (delayorder.delay_key)
WINDOW_KEY = (1 << 32) - 3   # folded into (seed, epoch) for a columnar set's window permutations


def _seed(seed, epoch, what):
    """A stateless [2] seed derived from (seed, epoch, what) by ``stateless_fold_in`` (the random ops keep
    32 bits of each seed word, so the three are folded in, never packed into one word)."""
    import tensorflow as tf

    fold = tf.random.experimental.stateless_fold_in
    base = tf.constant([seed & 0xFFFFFFFF, seed >> 32], tf.int64)
    return fold(fold(base, tf.cast(epoch, tf.int64)), tf.cast(what, tf.int64))


def enter(path: str, k: int, compression_type, buffer_size, records: int | None = None,
          sha256: str | None = None):
    """The records of ``path`` from its record ``k`` (the one place a file is entered in the middle): a seek
    by the file's record-offset index (``seeksource.records_from``) when it is cached or the bytes before
    ``k`` are many, else ``skip`` (GZIP files and a TensorFlow without the seek op always read through).
    ``records``, ``sha256``: the file's record count and digest from the manifest (the digest is the key the
    index is cached under, by ``tfpipe pipeline offsets`` too)."""
    from .seeksource import records_from

    if k > 0 and "://" not in path and not compression_type and not seek_pays(path, k, records, sha256):
        import tensorflow as tf

        return tf.data.TFRecordDataset(path, compression_type, buffer_size).skip(k)
    return records_from(path, k, compression_type=compression_type, buffer_size=buffer_size, records=records,
                        sha256=sha256)


def _file_order(spec, e):
    """Epoch ``e``'s file permutation (int64 tensor of file numbers)."""
    import tensorflow as tf

    nf = len(spec.files)
    order = tf.range(nf, dtype=tf.int64)
    if spec.shuffle_buffer > 0 and nf > 1:
        order = tf.random.experimental.index_shuffle(order, _seed(spec.seed or 0, e, FILE_KEY),
                                                     tf.constant(nf - 1, tf.int64))
    return order


def _io(spec):
    return spec.compression_type, (spec.buffer_size or DEFAULT_BUFFER_BYTES)


def cut_batches(recs, size: int, drop_remainder: bool):
    """Batches of ``size`` records of an order: ``recs`` is records (scalars) or the delay order's runs (1-D:
    cut by ``rebatch``, the same batches as ``unbatch().batch(size)`` with one tf.data step per batch)."""
    if isinstance(recs.element_spec, (dict, tuple)) or recs.element_spec.shape.rank == 1:   # runs, decoded rows
        return recs.rebatch(size, drop_remainder=drop_remainder)
    return recs.batch(size, drop_remainder=drop_remainder)


def _batches(spec, recs, steps):
    """The rank's ``steps`` batches of an epoch's order."""
    sharded = spec.num_shards > 1
    ds = cut_batches(recs, spec.batch_size, spec.drop_remainder or sharded)
    if sharded:
        ds = ds.shard(spec.num_shards, spec.shard_index)
    return ds.take(steps)


def _read_from(spec, names: list[str], counts: list[int], start: int, digests: list[str | None]):
    """The records of the concatenation of ``names`` (``counts`` records each, ``digests`` their sha256 or
    None) from its record ``start``: whole files before it are skipped by their counts, the file holding it
    is entered with :func:`enter`."""
    import tensorflow as tf

    ctype, buf = _io(spec)
    j, k = locate(counts, start)
    recs = enter(names[j], k, ctype, buf, counts[j], digests[j])
    if j + 1 < len(names):
        recs = recs.concatenate(tf.data.TFRecordDataset(names[j + 1:], ctype, buf))
    return recs


def order_from(spec, e, pos, source=None):
    """The records of epoch ``e``'s order (runs of them when shuffled: ``delayorder.delay_order``) from output
    position ``pos``, planned eagerly: where reading starts (file, record) is Python
    ints, and a file is entered in the middle only through :func:`enter` (or, streamed, by ``source``: a
    ``resumestream.StreamedShards``)."""
    total = sum(spec.file_records)
    order = [int(x) for x in _file_order(spec, e).numpy()]
    names = [spec.files[f] for f in order]
    counts = [spec.file_records[f] for f in order]
    digests = [spec.file_sha256[f] if spec.file_sha256 else None for f in order]

    def read(start):                # the epoch's records from record ``start``
        if spec.layout is not None:     # a columnar set: its decoded rows, positions in rows (graph.resumerows)
            from .resumerows import rows_reader

            return rows_reader(spec, order, enter, source)(start)
        if source is not None:
            return source.read_from(order, start)
        return _read_from(spec, names, counts, start, digests)

    if spec.shuffle_buffer <= 0:
        return read(min(pos, total))
    if spec.layout is not None:     # a columnar set: the window order over its rows (resume.windoworder)
        from .resumerows import blocks_reader, windows
        from ..resume.windoworder import file_window_entry, window_blocks, window_entry, within_files

        k = window_blocks(spec.shuffle_buffer, spec.layout.block_rows)
        within = within_files(spec)
        j, block, w, drop = (file_window_entry if within else window_entry)(counts, spec.layout.block_rows, k, pos)
        chunks, tables = blocks_reader(spec, order, enter, source, k, within)(j, block)
        return windows(spec, chunks, tables, _seed(spec.seed, e, WINDOW_KEY), w, drop, within)
    key = delay_key(_seed(spec.seed, e, CHUNK_KEY))
    q0, m, drop = resume_point(key, spec.shuffle_buffer, total, pos)
    c = chunk_size(spec.shuffle_buffer)
    if source is not None:
        # one read from record q0·c on (a stream fetches each shard once): the delay order started afresh at
        # chunk q0 emits, from chunk m on, exactly what the epoch's order does (every record before q0·c has
        # left by chunk m), and pos - q0·c records before that
        return delay_order(read(q0 * c), key, spec.shuffle_buffer, total, q0, skip=pos - q0 * c)
    rebuild = None
    if q0 < m:      # the records that may still wait at chunk m: one read, one refill, no output
        rebuild = read(q0 * c)
        rebuild = rebuild if spec.layout is not None else rebuild.take((m - q0) * c)   # rows: delay_order cuts
    return delay_order(read(m * c), key, spec.shuffle_buffer, total, m, rebuild, q0, skip=drop)


def order_of(spec, e, source=None):
    """The records of epoch ``e``'s order (``e`` a tensor; runs of them when shuffled): a generic graph for the
    epochs after the first."""
    import tensorflow as tf

    ctype, buf = _io(spec)
    if spec.layout is not None and spec.shuffle_buffer > 0:    # a columnar set: the window order over its rows
        from .resumerows import epoch_blocks, windows
        from ..resume.windoworder import window_blocks, within_files

        within = within_files(spec)
        chunks, tables = epoch_blocks(spec, _file_order(spec, e), source,
                                      window_blocks(spec.shuffle_buffer, spec.layout.block_rows), within)
        return windows(spec, chunks, tables, _seed(spec.seed, e, WINDOW_KEY), within=within)
    if spec.layout is not None:     # a columnar set's blocks, each checked: the order is over their rows
        from .resumerows import epoch_rows

        recs = epoch_rows(spec, _file_order(spec, e), source)
    elif source is not None:
        recs = source.records(_file_order(spec, e))
    else:
        recs = tf.data.TFRecordDataset(tf.gather(tf.constant(list(spec.files)), _file_order(spec, e)), ctype, buf)
    if spec.shuffle_buffer > 0:
        key = delay_key(_seed(spec.seed, e, CHUNK_KEY))
        recs = delay_order(recs, key, spec.shuffle_buffer, sum(spec.file_records))
    return recs


def _epochs(spec, e0, pos, last, first_steps, per_epoch):
    """The rank's batches of epochs ``e0`` (from ``pos``) .. ``last - 1``."""
    import tensorflow as tf

    source = None
    if spec.stream is not None:     # a remote set: its shards fetched in this order, from the entry point on
        from .resumestream import StreamedShards

        source = StreamedShards(spec)
    first = _batches(spec, order_from(spec, e0, pos, source), first_steps)
    ds = first if e0 < last else first.take(0)
    if e0 + 1 < last:               # later epochs: one generic graph over the epoch number
        later = tf.autograph.experimental.do_not_convert(
            lambda e: _batches(spec, order_of(spec, e, source), per_epoch))
        ds = ds.concatenate(tf.data.Dataset.range(e0 + 1, last).flat_map(later))
    return ds


def _endless(part, start: int):
    """A part's records (``part``: its one-rank spec; runs of them when shuffled) from its position ``start``, over
    its part-epochs, endlessly."""
    import tensorflow as tf

    e, pos = divmod(start, sum(part.file_records))
    later = tf.data.Dataset.range(e + 1, 1 << 62).flat_map(
        tf.autograph.experimental.do_not_convert(lambda x: order_of(part, x)))
    return order_from(part, e, pos).concatenate(later)


def sampled_batches(spec, e0: int, pos: int):
    """The rank's batches of the sampled stream from epoch ``e0``, position ``pos`` (before the parse)."""
    import tensorflow as tf

    weights = [w for _, w in spec.part_weights]
    size = block_positions(weights)
    counts = part_counts(weights, size)
    block, skip = divmod(e0 * epoch_records(spec) + pos, size)
    parts = tuple(cut_batches(_endless(part_spec(spec, k), block * c), c, True)
                  for k, c in enumerate(counts))
    seed = spec.seed or 0

    @tf.autograph.experimental.do_not_convert
    def arrange(b, chunks):
        perm = tf.random.experimental.index_shuffle(tf.range(size, dtype=tf.int64), _seed(seed, b, BLOCK_KEY),
                                                    tf.constant(size - 1, tf.int64))
        return tf.gather(tf.concat(list(chunks), 0), perm)

    recs = tf.data.Dataset.zip(parts).enumerate(block).map(arrange).unbatch().skip(skip)
    ds = recs.batch(spec.batch_size, drop_remainder=True)
    if spec.num_shards > 1:
        ds = ds.shard(spec.num_shards, spec.shard_index)
    return ds.take(sampled_steps(spec, e0, pos))


def build_resumable(spec, resume: dict | None = None):
    """The resumable graph for ``spec`` up to its tail (from the start, or from the input state ``resume``), and
    the tail it gets."""
    check_resumable(spec)
    e0, pos = resume_position(spec, resume) if resume is not None else (0, 0)
    if spec.part_weights:           # a group read balanced: one endless sampled stream (graph.resumeweighted)
        ds = sampled_batches(spec, e0, pos)
    else:
        last = spec.epochs if spec.epochs is not None else 1 << 62
        ds = _epochs(spec, e0, pos, last, steps_for(spec, epoch_records(spec) - pos), order_epoch_steps(spec))
    parsed = spec.layout is not None    # a columnar set's rows come decoded
    if parsed:
        from .columnar import columnar_output

        ds = columnar_output(ds, spec)
    # parse always in order: deterministic=False could swap batches, and a resume must find them where they were
    return ds, Tail(_parse_calls(spec), True, parsed=parsed)


def stages(plan) -> list[Stage]:
    """The resumable graph's stages (its variants' included)."""
    return resumable_stages(plan.spec)


def build(plan, resume: dict | None = None):
    """The resumable graph up to its tail (from the start, or from the input state ``resume``), and its tail."""
    return build_resumable(plan.spec, resume)


def _parse_calls(spec) -> int:
    return AUTOTUNE if spec.parse_parallelism is None else spec.parse_parallelism


def resumable_stages(spec) -> list[Stage]:
    """What ``describe`` shows for a resumable spec."""
    check_resumable(spec)
    if spec.part_weights:
        return sampled_stages(spec)
    n = spec.num_shards
    shuffle = spec.shuffle_buffer > 0
    stream = []
    if spec.stream is not None:
        from types import SimpleNamespace

        from ..remote.stream import stream_stage

        stream = [stream_stage(spec, SimpleNamespace(read="sequential", parallelism=1), shuffle)]
    stages = [
        *stream,
        Stage("source", True, {"mode": "file", "files": len(spec.files), "read": "sequential", "resumable": True,
                               "file_order": f"permuted per epoch (seed={spec.seed})" if shuffle else "manifest order"},
              "resumable: one global order, a pure function of (manifest, seed, epoch); a resume skips whole "
              "files by their record counts and enters one mid-file"
              + ("; streamed in that order: a resume never fetches the shards before its entry point" if stream
                 else "")),
        Stage("shuffle", shuffle, {"buffer": spec.shuffle_buffer, "seed": spec.seed, "order": "random-delay",
                                   "chunk": chunk_size(spec.shuffle_buffer) if shuffle else 0,
                                   "step": step_records(spec.shuffle_buffer) if shuffle else 0,
                                   "max_delay": max_delay(spec.shuffle_buffer) if shuffle else 0},
              "each record leaves after a random delay (mean shuffle_buffer, a pure function of (seed, epoch, "
              "position)): moves records as far as shuffle(B) or further, ~B records held, a step's new "
              "records while it sorts them and the next step's, read meanwhile (its output cut into batches by "
              "rebatch)" if shuffle
              else "off (shuffle_buffer=0)"),
        Stage("batch", True, {"batch_size": spec.batch_size, "drop_remainder": spec.drop_remainder or n > 1},
              "batch before parse: one vectorized parse call per batch"),
        Stage("shard", n > 1, {"num_shards": n, "index": spec.shard_index},
              "rank i takes batches i, i+n, ... of the global order: positions are global" if n > 1
              else "single rank"),
        Stage("take", True, {"steps": order_epoch_steps(spec)}, "steps per epoch from the global order"),
        Stage("cache", False, {"policy": "none"}, "resumable order reads the files every epoch"),
        *tail_stages(spec, calls=_parse_calls(spec), deterministic=True,
                     repeat_why="one order per epoch, from (seed, epoch)"),
    ]
    if spec.layout is not None:     # a columnar set: blocks decoded to rows, positions in rows
        from .resumerows import row_stages

        return row_stages(spec, stages)
    return stages
