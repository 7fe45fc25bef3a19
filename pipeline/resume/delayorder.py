"""The resumable shuffle: a stateless "random delay" order that mixes like ``shuffle(B)`` with the same memory.

Number an epoch's records ``i = 0 .. N-1`` in their read order (the epoch's permuted files, concatenated).
Record ``i`` gets a delay ``r_i = floor(B · z_i²)`` with ``z_i`` a standard normal drawn statelessly (Philox,
key from (seed, epoch), counter from ``i``; :func:`range_keys`) — a pure function, so any record's delay can
be computed again anywhere — capped at ``D - 1``. Its key is ``min(i + r_i, N - 1)`` and the
epoch's order is the records sorted by key (stable: ties by ``i``). ``B·z²`` is a Gamma(½) delay of mean ``B``:
a ``shuffle(B)`` buffer holds a record for a geometric time of mean ``B`` (an exponential, Gamma(1)); the
Gamma(½) delay has the same mean, so the same number of records waits at any time (the memory), but a wider
spread, so records move further (measured in docs/pipeline.md).

Streaming it (:func:`delay_order`): the records are cut into chunks of ``c = ceil(B / 2)``; a
``tf.data.Dataset.scan`` keeps the *pending* records (read, key not yet reached) in index order. For chunk
``q`` (records up to ``T = (q + 1)·c``) it emits, sorted by key, the pending and new records whose key is below
``T`` and keeps the rest. Keys are ``≥ i``, so all is emitted by the last chunk, and each epoch starts with
nothing pending. One scan step takes in ``k`` chunks (:func:`step_chunks`: ``s = k·c`` records, at least
``2c ≈ B`` and at least ``STEP_RECORDS``) and emits what those chunks would have emitted one by one — the same
records in the same order, since the order is the records sorted by key whatever the step. About ``B``
records pend between steps (the mean delay), ``B + s`` while a step runs, and the next step's ``s`` records are
read meanwhile (a prefetch of one step: the read and the sort run on two threads); a step copies the pending and new
records once into one tensor, then the ones kept and the ones emitted once each by a gather: about
``2B/s + 2`` copies per record (2.4 at ``B = 1,000``), and each step's fixed cost (some 50 small ops) is spread
over ``s`` records. The step's output is a *run* (a 1-D tensor of the records it emits, in order), cut into
batches by ``rebatch``: one tf.data step per batch, not two per record as ``unbatch().batch()``.

Resuming at output position ``P`` (:func:`resume_point`, eager): ``count(m)``, the records emitted before
chunk ``m``, is ``m·c - D`` plus those of the ``D`` records before ``m·c`` whose key is below ``m·c`` (every
earlier record's key is). The chunk ``m`` whose emission holds ``P`` is found from the delays of at most
``2D/c + 1`` chunks (one eager draw); reading restarts at record ``m·c - D``: those ``D`` records, read as one
element, refill the waiting records exactly (the ones whose key is not below ``m·c``) and emit nothing; the
scan goes on from chunk ``m`` and ``P - count(m)`` records of its output are dropped.
"""
from __future__ import annotations

__all__ = ["chunk_size", "max_delay", "step_chunks", "step_records", "delay_key", "range_keys", "delay_order",
           "resume_point"]

CHUNKS_PER_BUFFER = 2      # c = B / 2: the unit of the keys and of a resume (a multiple of it is a step)
STEP_CHUNKS = 2            # chunks a scan step takes in at least (s = 2c ≈ B): 1.15-1.45x the records per CPU-s of 1
STEP_RECORDS = 4096        # records a scan step takes in at least: small buffers copy less, amortize the step's ops
DELAY_BUFFERS = 8          # D = 8 B: a Gamma(½) delay of mean B exceeds it with probability 0.5 %


def chunk_size(buffer: int) -> int:
    """Records per scan step ``c`` for a shuffle buffer of ``buffer`` records."""
    return max(1, -(-buffer // CHUNKS_PER_BUFFER))


def max_delay(buffer: int) -> int:
    """``D``: delays are capped at ``D - 1``; a multiple of the chunk size."""
    c = chunk_size(buffer)
    return c * max(1, -(-DELAY_BUFFERS * buffer // c))


def step_chunks(buffer: int) -> int:
    """Chunks ``k`` a scan step takes in: at least ``STEP_CHUNKS``, and at least ``STEP_RECORDS`` records
    (``B = 1,000``: ``k = 9``, 4,500 records; ``B ≥ 8,192``: ``k = 2``). The order does not depend on it."""
    c = chunk_size(buffer)
    return max(STEP_CHUNKS, -(-STEP_RECORDS // c))


def step_records(buffer: int) -> int:
    """Records ``s = k·c`` one scan step takes in (``describe`` shows it)."""
    return step_chunks(buffer) * chunk_size(buffer)


def delay_key(seed_pair):
    """The Philox key (uint64 ``[1]``) of an epoch's delays, from its stateless ``[2]`` seed."""
    import tensorflow as tf

    return tf.raw_ops.StatelessRandomGetKeyCounter(seed=seed_pair)[0]


def range_keys(key, first_chunk, chunks, buffer: int, total):
    """Keys (int64 ``[chunks, c]``) of the records of chunks ``first_chunk ..``: ``min(i + r_i, total - 1)``.
    The normals are one Philox stream per epoch (one counter step gives two float64 normals), chunk ``q``
    taking ``2·ceil(c/2)`` of them from counter ``q·ceil(c/2)``: one draw for many chunks gives the same
    numbers as one draw per chunk, so the eager resume arithmetic and the graph agree bit for bit."""
    import tensorflow as tf

    c = chunk_size(buffer)
    half = -(-c // 2)
    q = tf.cast(first_chunk, tf.int64)
    counter = tf.cast(tf.stack([q * half, tf.zeros_like(q)]), tf.uint64)
    z = tf.raw_ops.StatelessRandomNormalV2(shape=tf.reshape(tf.cast(chunks, tf.int64) * 2 * half, [1]), key=key,
                                           counter=counter, alg=1, dtype=tf.float64)          # alg 1: Philox
    z = tf.reshape(z, [-1, 2 * half])[:, :c]
    r = tf.minimum(tf.cast(float(buffer) * z * z, tf.int64), max_delay(buffer) - 1)     # >= 0: cast = floor
    i = tf.reshape(q * c + tf.range(tf.shape(z, out_type=tf.int64)[0] * c, dtype=tf.int64), [-1, c])
    return tf.minimum(i + r, tf.cast(total, tf.int64) - 1)


def delay_order(records, key, buffer: int, total, first_chunk=0, rebuild=None, rebuild_chunk=0, skip=0):
    """``records`` (a dataset of scalar strings, record ``first_chunk · c`` of the epoch first) in the delay
    order, as **runs**: a dataset of 1-D string tensors (one per scan step, some empty) whose concatenation is
    the order, its first ``skip`` records left out. ``records`` may also be decoded rows (dicts of columns,
    rows first, in chunks of any size): the order is then over rows, and runs are dicts of rows (a columnar
    set's resumable graph uses the window order instead: ``pipeline.resume.windoworder``). Cut them with ``rebatch`` (one copy per record, one
    tf.data step per batch), not ``unbatch().batch()`` (two tf.data steps per record). A resume also gives
    ``rebuild``: the records of chunks ``rebuild_chunk .. first_chunk - 1`` (those that may still wait at
    ``first_chunk``), read as one element that refills the waiting records and emits nothing. No map
    function: the keys are drawn inside the scan step (each tf.data function costs its instantiation on the
    first element, which a resume would pay twice)."""
    import tensorflow as tf

    c = chunk_size(buffer)
    i64 = tf.int64
    k = step_chunks(buffer)
    nest = tf.nest
    rows = isinstance(records.element_spec, dict)   # a columnar set's decoded rows: dicts of columns, rows first

    def cut(ds, size):     # elements of ``size`` records (rows: rebatch the decoded chunks)
        return ds.rebatch(size) if rows else ds.batch(size)

    @tf.autograph.experimental.do_not_convert       # no Python control flow here: spare the conversion
    def step(state, element):
        held, held_keys, left = state           # left: records still to leave out (skip)
        e, chunk = element                      # e: the element's number (-1: the refill), its records
        q = tf.where(e < 0, tf.constant(rebuild_chunk, i64), first_chunk + e * k)   # its first chunk number
        n = tf.shape(nest.flatten(chunk)[0], out_type=i64)[0]
        spans = (n + c - 1) // c
        chunk_key = tf.reshape(range_keys(key, q, spans, buffer, total), [-1])[:n]
        keys = tf.concat([held_keys, chunk_key], 0)
        due = keys < (q + spans) * c
        due_at, keep_at = tf.where(due)[:, 0], tf.where(tf.logical_not(due))[:, 0]
        out_at = tf.gather(due_at, tf.argsort(tf.gather(keys, due_at), stable=True))
        nd = tf.shape(out_at, out_type=i64)[0]
        gone = tf.where(q >= first_chunk, tf.minimum(left, nd), nd)     # a refill emits nothing
        # the pending records stay in index order; the due ones leave sorted by key (stable): one gather each,
        # on the indices (a record is copied by the gathers only, never to be left out)
        both = nest.map_structure(lambda a, b: tf.concat([a, b], 0), held, chunk)
        left = tf.where(q >= first_chunk, left - gone, left)
        return ((nest.map_structure(lambda v: tf.gather(v, keep_at), both), tf.gather(keys, keep_at), left),
                nest.map_structure(lambda v: tf.gather(v, out_at[gone:]), both))

    chunks = cut(records, k * c).prefetch(1).enumerate()     # the next step's records are read while a step sorts
    if rebuild is not None and rebuild_chunk < first_chunk:
        chunks = cut(rebuild, (first_chunk - rebuild_chunk) * c).take(1).enumerate(-1).concatenate(chunks)
    empty = nest.map_structure(lambda s: tf.zeros([0, *s.shape[1:]], s.dtype), chunks.element_spec[1])
    init = (empty, tf.zeros([0], i64), tf.constant(skip, i64))
    return chunks.scan(init, step)


def resume_point(key, buffer: int, total: int, position: int) -> tuple[int, int, int]:
    """(first chunk to read, first chunk that emits, records to drop from its emission) to resume the delay
    order of ``total`` records at output ``position`` (eager; Python ints)."""
    import numpy as np

    if position <= 0:
        return 0, 0, 0
    c, d = chunk_size(buffer), max_delay(buffer)
    last = max(0, -(-total // c) - 1)                   # the last chunk's number
    lo_m, hi_m = min(position // c, last), min((position + d) // c, last)
    lo = max(0, lo_m * c - d)
    hi = min(total, (hi_m + 1) * c)
    first, last_read = lo // c, -(-hi // c)
    keys = range_keys(key, first, last_read - first, buffer, total).numpy().reshape(-1)[:hi - lo]
    idx = np.arange(lo, lo + len(keys))

    def count(m: int) -> int:               # records emitted before chunk m
        if m > last:
            return total
        return lo + int(np.count_nonzero(keys[idx < m * c] < m * c))

    m = lo_m
    while m < hi_m and count(m + 1) <= position:
        m += 1
    start = max(0, m * c - d)
    return start // c, m, position - count(m)
