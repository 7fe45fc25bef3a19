"""Shuffling the rows of a columnar set across blocks when it does not read the resumable order over rows
(``pipeline.graph.resumerows``: the default of a seeded read on one rank): without a seed, record-level ranks,
or ``resumable=False``. Whole decoded chunks at a time: a pool of rows kept
between chunks; each chunk of decoded rows joins the pool, the pool's rows are put in a random order, and all
but ``pool`` of them leave (the last chunk empties the pool). Like ``shuffle(B)`` on single records, a row stays
for a random number of chunks (on average about ``pool / chunk``), so it moves about as far, but the work is a
few vectorized ops per chunk instead of a step per row. The memory is the pool plus one chunk: the spec's
``shuffle_buffer`` rows in all.

Seeded: the random stream is a ``tf.random.Generator`` from ``seed`` (a new order every epoch, the same orders
on every run with that seed); ``seed=None``: a non-deterministic one."""
from __future__ import annotations

from typing import Any

__all__ = ["pool_rows", "row_generator", "shuffle_rows"]


def pool_rows(buffer_rows: int, chunk_rows: int) -> int:
    """Rows kept between chunks so that the pool and one chunk hold ``buffer_rows`` rows in all."""
    return max(0, buffer_rows - chunk_rows)


def row_generator(seed: int | None) -> Any:
    """The random stream of a shuffled read, made once per graph (outside any tf.data function): its state
    goes on from epoch to epoch, so each epoch gets a new order."""
    import tensorflow as tf

    return (tf.random.Generator.from_seed(seed) if seed is not None
            else tf.random.Generator.from_non_deterministic_state())


def shuffle_rows(ds: Any, pool: int, gen: Any) -> Any:
    """``ds`` (dicts of decoded column chunks, rows first) with its rows shuffled through a pool of ``pool``
    rows, the order drawn from ``gen`` (:func:`row_generator`); elements keep the chunk's size (none while the
    pool fills, the whole pool at the end)."""
    import tensorflow as tf

    specs = ds.element_spec
    first = sorted(specs)[0]
    empty = {k: tf.zeros([0, *s.shape[1:]], s.dtype) for k, s in specs.items()}
    tagged = ds.map(lambda x: (x, False)).concatenate(tf.data.Dataset.from_tensors((empty, True)))

    def step(held, elem):
        x, last = elem
        rows = {k: tf.concat([held[k], x[k]], 0) for k in held}
        total = tf.shape(rows[first], out_type=tf.int64)[0]
        leave = tf.where(last, total, tf.maximum(tf.constant(0, tf.int64), total - pool))
        order = tf.argsort(gen.uniform([total]))
        out = {k: tf.gather(v, order[:leave]) for k, v in rows.items()}
        keep = {k: tf.gather(v, order[leave:]) for k, v in rows.items()}
        return keep, out

    return tagged.scan(empty, step).filter(lambda x: tf.shape(x[first])[0] > 0)
