"""A file laid out like the DeepFM sample's ``val.tfrecords`` (its ``tools/libsvm_to_tfrecord.py`` output): 10,000
``tf.train.Example`` with ``label`` float32 [], ``ids`` int64 [39], ``values`` float32 [39], one-based ids as
written, ~0.2 % rows repeating id 13; generated deterministically (we do not have the real file)."""
from __future__ import annotations

import numpy as np
import tensorflow as tf

__all__ = ["N", "FIELDS", "NUMERIC", "FEATURES", "sample_arrays", "write_sample", "parse_all"]

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
