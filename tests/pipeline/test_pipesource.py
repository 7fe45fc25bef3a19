"""Pipe mode with real FIFOs (os.mkfifo) fed by writer threads: exactly once per epoch, next epoch = next FIFO,
timeouts instead of hangs, one reader per channel per host, CRC/truncation errors with offsets."""
from __future__ import annotations

import os
import threading
import time
from collections import Counter

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pipeline_data import batches_of, labels_of, write_indexed_set

from converters.shardset.reader import read_manifest
from converters.tfrecord.reader import read_records
from converters.util.errors import IntegrityError, TfpipeError
from pipeline import PipelineSpec, build_dataset
from pipeline.graph.pipesource import (
    channel_lock,
    fifo_path,
    iter_chunks,
    simulate_channel,
    wait_for_fifo,
)

N = 1000
B = 64


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    d = tmp_path_factory.mktemp("indexed")
    write_indexed_set(d, N)
    return str(d)


def _files(d):
    return read_manifest(d).shard_paths()


def _pipe_spec(data, pipe_dir, **kw):
    kw.setdefault("pipe_timeout", 20)
    return PipelineSpec.from_manifest(data, B, mode="pipe", channel=kw.pop("channel", "train"),
                                      pipe_dir=str(pipe_dir), **kw)


@pytest.mark.parametrize("ranks", [1, 2, 3])
@pytest.mark.parametrize("shuffle", [0, 100])
def test_every_record_exactly_once_per_epoch(data, tmp_path, ranks, shuffle):
    seen = Counter()
    for i in range(ranks):
        pipe_dir = tmp_path / f"rank{i}"             # each rank its own host/channel dir here
        writer = simulate_channel(str(pipe_dir), "train", _files(data), epochs=2)
        spec = _pipe_spec(data, pipe_dir, epochs=2, shuffle_buffer=shuffle, seed=5, num_shards=ranks,
                          shard_index=i, equal_steps=False)
        got = labels_of(build_dataset(spec))
        writer.join(10)
        assert writer.error is None
        seen.update(got)
    assert sorted(seen) == list(range(N))
    assert set(seen.values()) == {2}                # once per epoch, two epochs


def test_pipe_order_without_shuffle_is_stream_order(data, tmp_path):
    simulate_channel(str(tmp_path), "train", _files(data))
    assert labels_of(build_dataset(_pipe_spec(data, tmp_path))) == list(range(N))


def test_pipe_matches_file_mode_batches(data, tmp_path):
    simulate_channel(str(tmp_path), "train", _files(data))
    pipe = batches_of(build_dataset(_pipe_spec(data, tmp_path, drop_remainder=True)))
    file = batches_of(build_dataset(PipelineSpec.from_manifest(data, B, drop_remainder=True, read="sequential")))
    assert pipe == file


def test_pipe_gzip(tmp_path):
    d = tmp_path / "gz"
    write_indexed_set(d, N, compression="gzip")
    simulate_channel(str(tmp_path / "p"), "train", _files(str(d)))
    spec = _pipe_spec(str(d), tmp_path / "p")
    assert spec.compression == "gzip"
    assert labels_of(build_dataset(spec)) == list(range(N))


def test_pipe_equal_steps_two_epochs(data, tmp_path):
    # take(steps) stops reading early; the next epoch must still open its FIFO (lock released)
    simulate_channel(str(tmp_path), "train", _files(data), epochs=2)
    spec = _pipe_spec(data, tmp_path, epochs=2, num_shards=3, shard_index=0)
    batches = batches_of(build_dataset(spec))
    assert len(batches) == 2 * spec.take_steps


def test_first_epoch_offset(data, tmp_path):
    simulate_channel(str(tmp_path), "train", _files(data), first_epoch=3)
    spec = _pipe_spec(data, tmp_path, first_epoch=3)
    assert len(labels_of(build_dataset(spec))) == N


def test_missing_fifo_times_out(data, tmp_path):
    spec = _pipe_spec(data, tmp_path, pipe_timeout=0.3)
    t = time.monotonic()
    with pytest.raises(Exception, match=r"did not appear within 0.3 s"):
        labels_of(build_dataset(spec))
    assert time.monotonic() - t < 60     # without the timeout the read waits for the FIFO for ever


def test_fifo_without_writer_times_out(tmp_path):
    path = fifo_path(str(tmp_path), "train", 0)
    os.mkfifo(path)
    with pytest.raises(TfpipeError, match="no writer opened FIFO"):
        wait_for_fifo(path, 0.3)


def test_second_reader_on_channel_refused(tmp_path):
    with channel_lock(str(tmp_path), "train"):
        with pytest.raises(TfpipeError, match="already being read"):
            with channel_lock(str(tmp_path), "train"):
                pass
        with channel_lock(str(tmp_path), "eval"):      # other channels are fine
            pass
    with channel_lock(str(tmp_path), "train"):          # released after use
        pass


def test_second_reader_refused_through_dataset(data, tmp_path):
    simulate_channel(str(tmp_path), "train", _files(data))
    spec = _pipe_spec(data, tmp_path)
    with channel_lock(str(tmp_path), "train"):
        with pytest.raises(Exception, match="already being read"):
            labels_of(build_dataset(spec))


def _stream(fd_source: bytes, **kw):
    r, w = os.pipe()

    def feed():
        with os.fdopen(w, "wb") as f:
            f.write(fd_source)

    t = threading.Thread(target=feed, daemon=True)
    t.start()
    try:
        out = []
        for data, starts, lengths in iter_chunks(r, name="stream", **kw):
            out.extend(data[s:s + n] for s, n in zip(starts, lengths))
        return out
    finally:
        os.close(r)
        t.join(5)


def _shard_bytes(data):
    return b"".join(open(p, "rb").read() for p in _files(data))


@settings(max_examples=15, deadline=None)
@given(chunk=st.integers(min_value=16, max_value=5000))
def test_chunk_boundaries_do_not_matter(data, chunk):
    want = [r for p in _files(data) for r in read_records(p)]
    assert _stream(_shard_bytes(data), chunk_bytes=chunk) == want


@pytest.mark.parametrize("n,i", [(2, 0), (2, 1), (3, 2)])
def test_stream_shard_matches_dataset_shard(data, n, i):
    want = [r for p in _files(data) for r in read_records(p)][i::n]
    assert _stream(_shard_bytes(data), chunk_bytes=1000, num_shards=n, shard_index=i) == want


def test_flipped_byte_names_offset(data):
    raw = bytearray(_shard_bytes(data))
    raw[5000] ^= 0xFF
    with pytest.raises(IntegrityError, match=r"stream: corrupt record .* at byte \d+"):
        _stream(bytes(raw))


def test_truncated_stream(data):
    raw = _shard_bytes(data)
    with pytest.raises(IntegrityError, match="truncated"):
        _stream(raw[:-7])


def test_truncated_gzip_stream(tmp_path):
    write_indexed_set(tmp_path / "gz", 200, compression="gzip")
    raw = b"".join(open(p, "rb").read() for p in _files(str(tmp_path / "gz")))
    with pytest.raises(IntegrityError, match="truncated"):
        _stream(raw[:-20], compression="gzip")


def test_sagemaker_pipe_requires_package(data, tmp_path):
    import importlib.util

    if importlib.util.find_spec("sagemaker_tensorflow") is not None:
        pytest.skip("sagemaker_tensorflow installed")
    spec = _pipe_spec(data, tmp_path, use_sagemaker_pipe=True)
    with pytest.raises(TfpipeError, match="sagemaker_tensorflow"):
        build_dataset(spec)


def test_tfrecorddataset_on_fifo_is_the_known_trap(data, tmp_path):
    """Why the reader exists: TensorFlow's positioned reads fail on a FIFO."""
    import tensorflow as tf

    simulate_channel(str(tmp_path), "train", _files(data))
    path = fifo_path(str(tmp_path), "train", 0)
    while not os.path.exists(path):
        time.sleep(0.01)
    with pytest.raises(tf.errors.OpError, match="(?i)illegal seek|seek"):
        for _ in tf.data.TFRecordDataset(path):
            pass
