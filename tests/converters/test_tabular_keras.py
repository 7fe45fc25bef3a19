"""Serving agrees with the conversion: tf.keras.layers.StringLookup over a set's vocabulary files gives the
ids the set holds (odd values included: spaces, "[UNK]", non-UTF-8 bytes; empty and never-seen values are 0),
and --hash-buckets N gives the bins tf.keras.layers.Hashing(num_bins=N) gives the raw strings."""
from __future__ import annotations

import numpy as np
import pytest
import tabularref as R
from tfread import read_back

from converters.engines.inprocess import run_job
from converters.shardset.options import ShardOutputOptions
from converters.tabular.job import TabularJob
from converters.tabular.options import TabularOptions
from converters.tabular.schema import Column, TableSchema

ODD = [b"a b", b" lead", b"[UNK]", b"\xff\xfe", b"#x", b"tail ", b"x\r", b"long value of many bytes", b"z"]
SCHEMA = TableSchema("odd", (Column("y", "label"), Column("n", "numeric"), Column("c", "categorical"),
                             Column("rest", "ignore")))  # "x\r" mid-line: at a line's end it would be CRLF


def _odd_table(path, rows=200, seed=5):
    import random

    rng = random.Random(seed)
    vals = []
    with open(path, "wb") as fh:
        for _ in range(rows):
            v = rng.choice(ODD + [b""] + [b"v%d" % rng.randint(0, 30)])
            vals.append(v)
            fh.write(b"%d\t%d\t%s\tend\n" % (rng.randint(0, 1), rng.randint(0, 9), v))
    return vals


def _schema_file(tmp_path):
    import json

    p = tmp_path / "odd.json"
    p.write_text(json.dumps(SCHEMA.to_json()))
    return p


def test_string_lookup_over_the_vocabulary_file_gives_the_ids(tmp_path):
    import tensorflow as tf

    vals = _odd_table(tmp_path / "t.tsv")
    opts = TabularOptions(schema=str(_schema_file(tmp_path)), target="dlrm", output=ShardOutputOptions())
    m = run_job(TabularJob.create([str(tmp_path / "t.tsv")], str(tmp_path / "s"), opts))
    ids = read_back(m)["sparse"].reshape(-1)
    layer = tf.keras.layers.StringLookup(vocabulary=str(tmp_path / "s" / "vocab" / "c.txt"), num_oov_indices=1)
    served = layer(tf.constant(vals)).numpy()
    np.testing.assert_array_equal(ids, served)
    assert (ids[[v in (b"", b"x\r") for v in vals]] == 0).all()  # missing; a value StringLookup cannot read back
    assert (ids[[v == b"[UNK]" for v in vals]] > 0).all()
    assert layer(tf.constant([b"never seen", b""])).numpy().tolist() == [0, 0]
    assert m.extra["categorical"]["c"]["table_size"] == layer.vocabulary_size()


@pytest.mark.parametrize("buckets", [1, 97, 1 << 20])
def test_hash_buckets_agree_with_keras_hashing(tmp_path, buckets):
    import tensorflow as tf

    lines = R.day_lines(3, 120)
    R.write_day(tmp_path / "day", lines)
    opts = TabularOptions(hash_buckets=buckets, target="dlrm", output=ShardOutputOptions())
    m = run_job(TabularJob.create([str(tmp_path / "day")], str(tmp_path / "s"), opts))
    assert not (tmp_path / "s" / "vocab").exists() and m.extra["feature_size"] == 13 + 26 * buckets
    raw = np.array([R.fields(ln)[14:] for ln in lines], dtype=object)
    want = tf.keras.layers.Hashing(num_bins=buckets)(tf.constant(raw.astype(str))).numpy()
    np.testing.assert_array_equal(read_back(m)["sparse"], want)


@pytest.mark.parametrize("target", ["deepfm", "dlrm"])
def test_ids_past_32_bits_are_kept_whole(tmp_path, target):
    """--hash-buckets 2**33: DeepFM's global ids (and DLRM's bins) pass 2**32; pass 1 keeps them as int64."""
    import tensorflow as tf

    lines = R.day_lines(4, 60)
    R.write_day(tmp_path / "day", lines)
    buckets = 1 << 33
    opts = TabularOptions(hash_buckets=buckets, target=target, output=ShardOutputOptions())
    m = run_job(TabularJob.create([str(tmp_path / "day")], str(tmp_path / "s"), opts, chunk_rows=16))
    raw = np.array([R.fields(ln)[14:] for ln in lines], dtype=object)
    bins = tf.keras.layers.Hashing(num_bins=buckets)(tf.constant(raw.astype(str))).numpy()
    got = read_back(m)
    if target == "dlrm":
        np.testing.assert_array_equal(got["sparse"], bins)
    else:
        want = 13 + np.arange(26, dtype=np.int64) * buckets + bins
        np.testing.assert_array_equal(got["ids"][:, 13:], want)
        assert want.max() >= 1 << 32
