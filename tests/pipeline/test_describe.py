"""describe: stages in order, with settings and reasons."""
from __future__ import annotations

import pytest
from pipeline_data import write_indexed_set

from pipeline import PipelineSpec, describe


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    d = tmp_path_factory.mktemp("indexed")
    write_indexed_set(d, 500)
    return str(d)


def _stage_lines(text):
    return [line.split()[1] for line in text.splitlines() if line[:1].isdigit()]


def test_order_and_reasons(data):
    text = describe(PipelineSpec.from_manifest(data, 32, epochs=3, shuffle_buffer=100, seed=1, resumable=False))
    assert _stage_lines(text) == ["source", "shard", "cache", "shuffle", "batch", "parse", "repeat", "prefetch"]
    assert "policy=memory" in text and "< 25% of RAM" in text
    assert "why: per-record shuffle" in text
    assert "read=sequential" in text


@pytest.mark.parametrize("kw,needle", [
    ({}, "cache    off  policy=none"),
    ({}, "one epoch: a cache would be filled once"),
    ({"num_shards": 2, "shard_index": 1}, "take     on   steps=8"),
    ({"num_shards": 2, "shard_index": 1}, "equal steps on every rank"),
    ({"prefetch": 0}, "prefetch off"),
    ({"mode": "pipe", "channel": "train"}, "fifo=/opt/ml/input/data/train_0"),
    ({"mode": "pipe", "channel": "train", "epochs": 2}, "next epoch = next FIFO"),
    ({"epochs": 2, "memory_bytes": 1 << 10}, "a memory cache could exhaust RAM"),
])
def test_describe_mentions(data, kw, needle):
    assert needle in describe(PipelineSpec.from_manifest(data, 32, **kw))


def test_describe_explains_a_sparse_set(tmp_path):
    from converters.libsvm.convert import convert_libsvm

    (tmp_path / "in.txt").write_bytes(b"1 4:1\n0 2:1 9:1\n")
    convert_libsvm(tmp_path / "in.txt", tmp_path / "o", sparse=True)
    text = describe(PipelineSpec.from_manifest(tmp_path / "o", 4))
    assert "varlen=ids,values as tf.SparseTensor" in text
    assert "ids/values as tf.SparseTensor [batch, 9] with indices [row, id]" in text
    assert "tf.sparse.sparse_dense_matmul(values, W)" in text
