"""The resumable shuffle's delay order (pipeline.resume.delayorder): the streamed scan equals the definition (records
stably sorted by key), a resume point rebuilds any suffix exactly, about B records wait (the memory of
shuffle(B)), and on ONE file it moves records at least as far as shuffle(B) of the same size."""
from __future__ import annotations

import numpy as np
import pytest
from pipeline_data import batches_of, write_indexed_set

from pipeline import PipelineSpec, build_dataset
from pipeline.resume import delayorder
from pipeline.resume.delayorder import (STEP_CHUNKS, STEP_RECORDS, chunk_size, delay_key, delay_order, max_delay,
                                        range_keys, resume_point, step_chunks, step_records)
from pipeline.graph.resumable import cut_batches

# records a scan step takes in at least: 0 gives the smallest steps (2 chunks), 50 a few chunks, the default
# one step for the small sets here; the order is the same whatever the step
STEPS = [0, 50, STEP_RECORDS]


def chunk_keys(key, chunk, n, buffer: int, total):
    """Keys of the first ``n`` records of chunk ``chunk`` (int64 ``[n]``; a short last chunk takes a prefix)."""
    return range_keys(key, chunk, 1, buffer, total)[0, :n]


def _key():
    import tensorflow as tf

    return delay_key(tf.constant([3, 4], tf.int64))


def _all_keys(key, buffer, total):
    c = chunk_size(buffer)
    return np.concatenate([chunk_keys(key, q, min(c, total - q * c), buffer, total).numpy()
                           for q in range(-(-total // c))])


def _stream(key, buffer, total, rebuild_chunk=0, first_chunk=0, drop=0):
    """The streamed order from chunk ``first_chunk``, the waiting records refilled from chunk ``rebuild_chunk``."""
    import tensorflow as tf

    def recs(a, b):
        return tf.data.Dataset.range(a, b).map(tf.strings.as_string)

    c = chunk_size(buffer)
    rebuild = recs(rebuild_chunk * c, first_chunk * c)
    out = delay_order(recs(first_chunk * c, total), key, buffer, total, first_chunk, rebuild, rebuild_chunk, drop)
    return [int(x) for x in out.unbatch().as_numpy_iterator()]


@pytest.mark.parametrize("buffer", [1, 7, 13, 40])
def test_one_draw_for_many_chunks_equals_one_draw_per_chunk(buffer):
    """The eager resume arithmetic draws many chunks at once; the graph draws one chunk per step."""
    key = _key()
    many = range_keys(key, 5, 9, buffer, 10 ** 9).numpy().reshape(-1)
    assert list(many) == [k for q in range(5, 14) for k in chunk_keys(key, q, 10 ** 6, buffer, 10 ** 9).numpy()]


@pytest.mark.parametrize("step_records", STEPS)
@pytest.mark.parametrize("buffer, total", [(40, 1000), (7, 300), (1, 50), (64, 30)])
def test_the_stream_is_the_records_sorted_by_key(buffer, total, step_records, monkeypatch):
    monkeypatch.setattr(delayorder, "STEP_RECORDS", step_records)
    key = _key()
    keys = _all_keys(key, buffer, total)
    i = np.arange(total)
    assert (keys >= i).all() and (keys <= np.minimum(i + max_delay(buffer) - 1, total - 1)).all()
    assert _stream(key, buffer, total) == list(np.argsort(keys, kind="stable"))


@pytest.mark.parametrize("step_records", STEPS)
@pytest.mark.parametrize("buffer, total", [(40, 1000), (7, 300), (64, 30)])
def test_a_resume_point_continues_the_order_exactly(buffer, total, step_records, monkeypatch):
    monkeypatch.setattr(delayorder, "STEP_RECORDS", step_records)
    key = _key()
    full = list(np.argsort(_all_keys(key, buffer, total), kind="stable"))
    for position in sorted({0, 1, total // 3, total // 2 + 1, total - max_delay(buffer) // 2, total - 1, total}):
        position = max(0, min(total, position))
        q0, m, drop = resume_point(key, buffer, total, position)
        assert q0 * chunk_size(buffer) >= max(0, m * chunk_size(buffer) - max_delay(buffer))
        assert _stream(key, buffer, total, q0, m, drop) == full[position:], position


@pytest.mark.parametrize("buffer, at_least, chunks", [
    (1000, 4096, 9),            # c = 500: 4,500 records a step
    (10_000, 4096, STEP_CHUNKS),  # c = 5,000: two chunks are more than 4,096 records
    (8192, 4096, STEP_CHUNKS),
    (1, 4096, 4096),
    (40, 0, STEP_CHUNKS),
    (40, 50, 3),                # c = 20: ceil(50 / 20)
])
def test_a_step_takes_at_least_two_chunks_and_step_records(buffer, at_least, chunks, monkeypatch):
    monkeypatch.setattr(delayorder, "STEP_RECORDS", at_least)
    assert step_chunks(buffer) == chunks
    assert step_records(buffer) == chunks * chunk_size(buffer)


@pytest.mark.parametrize("runs, size, drop", [
    ([[0, 1, 2], [], [3], [4, 5, 6, 7, 8, 9, 10]], 4, False),
    ([[0, 1, 2], [], [3], [4, 5, 6, 7, 8, 9, 10]], 4, True),
    ([[], [0, 1, 2, 3, 4, 5, 6, 7]], 4, True),
    ([[0], [1], [2]], 5, False),
    ([[0], [1], [2]], 5, True),
])
def test_runs_are_cut_into_the_batches_of_their_records(runs, size, drop):
    """The delay order's runs (1-D, some empty) cut by ``rebatch`` give the batches of their records, the
    last one short or dropped as ``batch`` would."""
    import tensorflow as tf

    ds = tf.data.Dataset.from_generator(lambda: (np.array(r, np.int64) for r in runs),
                                        output_signature=tf.TensorSpec([None], tf.int64))
    records = [x for r in runs for x in r]
    want = [records[i:i + size] for i in range(0, len(records), size)]
    if drop:
        want = [b for b in want if len(b) == size]
    assert [list(b) for b in cut_batches(ds, size, drop).as_numpy_iterator()] == want
    assert [list(b) for b in cut_batches(ds.unbatch(), size, drop).as_numpy_iterator()] == want


def test_about_b_records_wait_like_a_shuffle_buffer():
    """Pending after each chunk = records read whose key is not yet reached: on average about B (a Gamma(1/2)
    delay of mean B), the records a shuffle(B) buffer holds."""
    buffer, total = 200, 40_000
    keys = _all_keys(_key(), buffer, total)
    c = chunk_size(buffer)
    ends = np.arange(c, total - max_delay(buffer), c)
    pending = [np.count_nonzero(keys[:t] >= t) for t in ends]
    assert 0.9 * buffer < np.mean(pending) < 1.05 * buffer
    assert max(pending) < 2 * buffer


def _displacement(spec) -> tuple[float, float]:
    out = np.array([x for b in batches_of(build_dataset(spec)) for x in b], dtype=np.float64)
    pos = np.arange(len(out), dtype=np.float64)
    return float(np.corrcoef(np.argsort(np.argsort(out)), pos)[0, 1]), float(np.abs(out - pos).mean())


@pytest.mark.parametrize("seed", [1, 2])
def test_one_file_moves_records_at_least_as_far_as_shuffle_b(tmp_path, seed):
    write_indexed_set(tmp_path, 4000, shard_bytes=1 << 22)
    spec = PipelineSpec.from_manifest(str(tmp_path), 50, shuffle_buffer=200, seed=seed, epochs=1, resumable=False)
    assert len(spec.files) == 1
    today = _displacement(spec)
    resumable = _displacement(spec.with_(resumable=True))
    assert resumable[1] >= today[1], (resumable, today)          # mean |displacement|: further or as far
    assert resumable[0] <= today[0], (resumable, today)          # rank correlation: lower or as low
