"""Shuffling the rows of a columnar set across blocks, whole decoded chunks at a time: a pool of rows kept
between chunks; each chunk of decoded rows joins the pool, the pool's rows are put in a random order, and all
but ``pool`` of them leave (the last chunk empties the pool). Like ``shuffle(B)`` on single records, a row stays
for a random number of chunks (on average about ``pool / chunk``), so it moves about as far, but the work is a
few vectorized ops per chunk instead of a step per row. The memory is the pool plus one chunk: the spec's
``shuffle_buffer`` rows in all.

Seeded: the random stream is a ``tf.random.Generator`` from ``seed`` (a new order every epoch, the same orders
on every run with that seed); ``seed=None``: a non-deterministic one."""
from __future__ import annotations

from typing import Any

__all__ = ["pool_rows", "shuffle_rows"]


def pool_rows(buffer_rows: int, chunk_rows: int) -> int:
    """Rows kept between chunks so that the pool and one chunk hold ``buffer_rows`` rows in all."""
    return max(0, buffer_rows - chunk_rows)


def shuffle_rows(ds: Any, pool: int, seed: int | None) -> Any:
    """``ds`` (dicts of decoded column chunks, rows first) with its rows shuffled through a pool of ``pool``
    rows; elements keep the chunk's size (the first few are smaller while the pool fills, the last larger)."""
    import tensorflow as tf

    gen = (tf.random.Generator.from_seed(seed) if seed is not None
           else tf.random.Generator.from_non_deterministic_state())
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
