"""Positional LibSVM against the DeepFM sample's own records: a ``val.tfrecords`` laid out as the sample's
``tools/libsvm_to_tfrecord.py`` writes it (10,000 ``tf.train.Example`` with ``label`` float32 [], ``ids`` int64
[39], ``values`` float32 [39]; one-based ids as written, ~0.2 % rows repeating id 13), written back as LibSVM
lines and converted with ``--field-size 39`` alone, parses to exactly the sample's tensors."""
from __future__ import annotations

import numpy as np
import pytest

tf = pytest.importorskip("tensorflow")

from converters.cli import main  # noqa: E402
from converters.shardset.reader import read_manifest  # noqa: E402

N, FIELDS, NUMERIC = 10_000, 39, 13
FEATURES = {"label": tf.io.FixedLenFeature([], tf.float32), "ids": tf.io.FixedLenFeature([FIELDS], tf.int64),
            "values": tf.io.FixedLenFeature([FIELDS], tf.float32)}  # the sample's input_fn


def sample_arrays(seed: int = 20) -> dict[str, np.ndarray]:
    """The sample's tensors, generated deterministically: numeric fields 1..13 with their values (zeros too),
    categorical fields one-hot (value 1) with ids from a shared dictionary; 0.2 % of the rows map their first
    categorical field to id 13, as the DeepFM preprocessing does (``12:0.0 13:0.2 13:1.0 580:1.0``)."""
    rng = np.random.default_rng(seed)
    ids = np.empty((N, FIELDS), np.int64)
    ids[:, :NUMERIC] = np.arange(1, NUMERIC + 1)
    # each categorical field owns a range of the feature dictionary, in field order
    ids[:, NUMERIC:] = 14 + np.arange(FIELDS - NUMERIC) * 4000 + rng.integers(0, 4000, (N, FIELDS - NUMERIC))
    repeat = rng.choice(N, N // 500, replace=False)
    ids[repeat, NUMERIC] = 13
    values = np.ones((N, FIELDS), np.float32)
    values[:, :NUMERIC] = np.round(rng.exponential(0.3, (N, NUMERIC)), rng.integers(0, 7)).astype(np.float32)
    values[:, :NUMERIC][rng.random((N, NUMERIC)) < 0.1] = 0.0
    label = (rng.random(N) < 0.26).astype(np.float32)
    return {"label": label, "ids": ids, "values": values, "repeat": np.sort(repeat)}


def write_sample(path, a) -> None:
    """``val.tfrecords`` as the sample's converter writes it: one tf.train.Example per line."""
    with tf.io.TFRecordWriter(str(path)) as w:
        for i in range(N):
            ex = tf.train.Example(features=tf.train.Features(feature={
                "label": tf.train.Feature(float_list=tf.train.FloatList(value=[a["label"][i]])),
                "ids": tf.train.Feature(int64_list=tf.train.Int64List(value=a["ids"][i])),
                "values": tf.train.Feature(float_list=tf.train.FloatList(value=a["values"][i])),
            }))
            w.write(ex.SerializeToString())


def parse_all(paths) -> dict[str, np.ndarray]:
    """Every record of ``paths``, parsed in one batch with the sample's feature spec."""
    ds = tf.data.TFRecordDataset([str(p) for p in paths]).batch(1 << 20)
    batch = next(iter(ds.map(lambda x: tf.io.parse_example(x, FEATURES))))
    return {k: v.numpy() for k, v in batch.items()}


def libsvm_lines(t: dict[str, np.ndarray]) -> bytes:
    """The parsed records as LibSVM lines, every number in the shortest decimal that reads back to the same
    float32 (as short as the sample's own text; the test checks the round trip bit for bit)."""
    def num(v) -> str:
        return np.format_float_positional(np.float32(v), unique=True, trim="-")

    rows = (" ".join([num(t["label"][i])] + [f"{d}:{num(v)}" for d, v in zip(t["ids"][i], t["values"][i])])
            for i in range(t["label"].shape[0]))
    return ("\n".join(rows) + "\n").encode()


def test_sample_records_convert_back_to_the_same_tensors(tmp_path):
    a = sample_arrays()
    write_sample(tmp_path / "val.tfrecords", a)
    sample = parse_all([tmp_path / "val.tfrecords"])
    assert np.array_equal(sample["ids"], a["ids"])  # the sample file holds what was generated
    text = libsvm_lines(sample)
    assert b" 13:" in text and len(a["repeat"]) == 20
    (tmp_path / "val.libsvm").write_bytes(text)
    out = tmp_path / "converted"
    assert main(["convert", "libsvm", str(tmp_path / "val.libsvm"), "--out", str(out), "--field-size", "39",
                 "--no-progress"]) == 0
    m = read_manifest(out)
    got = parse_all(m.shard_paths())
    assert m.records == got["label"].shape[0] == N and m.skipped == {}
    assert m.inputs[0].notes == {"ids_unordered": len(a["repeat"])}
    for k in FEATURES:
        assert got[k].dtype == sample[k].dtype and got[k].shape == sample[k].shape
        assert np.array_equal(got[k].view(np.uint32) if k != "ids" else got[k],
                              sample[k].view(np.uint32) if k != "ids" else sample[k]), k
    rows = np.flatnonzero((np.diff(got["ids"], axis=1) <= 0).any(axis=1))
    assert rows.tolist() == a["repeat"].tolist() and (got["ids"][rows, 12:14] == 13).all()
