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
    assert m.extra["categorical"] == [{"column": "c", **m.extra["categorical"][0]}]
    assert m.extra["categorical"][0]["table_size"] == layer.vocabulary_size()


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


# Values with many ties: short (one 8-byte key) and long ones, shared prefixes, non-UTF-8 bytes.
TIES = [b"a", b"ab", b"b", b"B", b"\xff", b"\xfe\x01", b"zz", b"z", b"12345678", b"1234567", b"123456789",
        b"long value one", b"long value two", b"long value", b"x y", b"a\x00b", b"~", b"0"]
TWO = TableSchema("two", (Column("y", "label"), Column("n", "numeric"), Column("c", "categorical"),
                          Column("d", "categorical")))


def _ties_table(path, seed=11):
    """Rows whose two columns hold each of ``TIES`` 1, 2 or 3 times (and missing values), shuffled: every count
    is shared by several values."""
    import random

    rng = random.Random(seed)
    cols = []
    for shift in (0, 1):
        col = [v for k, v in enumerate(TIES) for _ in range(1 + (k + shift) % 3)] + [b""] * 4
        rng.shuffle(col)
        cols.append(col)
    with open(path, "wb") as fh:
        for c, d in zip(*cols):
            fh.write(b"%d\t%d\t%s\t%s\n" % (rng.randint(0, 1), rng.randint(0, 9), c, d))
    return cols


@pytest.mark.parametrize("min_count", [1, 2])
def test_ids_are_string_lookup_adapt_s(tmp_path, min_count):
    """Ties ordered as Keras orders them (count descending, then bytes descending): StringLookup.adapt over the
    non-missing training values gives tfpipe's ids (min count 1; with a threshold, the same ids among the values
    seen often enough)."""
    import json

    import tensorflow as tf

    cols = _ties_table(tmp_path / "t.tsv")
    (tmp_path / "two.json").write_text(json.dumps(TWO.to_json()))
    opts = TabularOptions(schema=str(tmp_path / "two.json"), target="dlrm", min_count=min_count)
    m = run_job(TabularJob.create([str(tmp_path / "t.tsv")], str(tmp_path / "s"), opts))
    got = read_back(m)["sparse"]
    for j, vals in enumerate(cols):
        counts = {v: vals.count(v) for v in set(vals) if v}
        assert len(set(counts.values())) == 3 < len(counts)  # many ties
        layer = tf.keras.layers.StringLookup(num_oov_indices=1)
        layer.adapt(tf.constant([v for v in vals if v]))
        want = layer(tf.constant(vals)).numpy()
        keep = np.array([counts.get(v, 0) >= min_count for v in vals])
        np.testing.assert_array_equal(got[keep, j], want[keep])
        assert (got[~keep, j] == 0).all()
        if min_count == 1:
            vocab = (tmp_path / "s" / "vocab" / f"{TWO.categorical[j]}.txt").read_bytes().splitlines()
            assert layer(tf.constant(vocab)).numpy().tolist() == list(range(1, layer.vocabulary_size()))


def test_a_set_written_before_keeps_its_ids_through_its_files(tmp_path):
    """A set written before (``extra.categorical`` keyed by name, its vocabulary in another order: ties
    ascending) verifies, and ``--vocab-from`` it gives the ids StringLookup gives over its files."""
    import hashlib
    import json

    import tensorflow as tf

    from converters.shardset.verify import verify

    cols = _ties_table(tmp_path / "t.tsv")
    (tmp_path / "two.json").write_text(json.dumps(TWO.to_json()))
    opts = TabularOptions(schema=str(tmp_path / "two.json"), target="dlrm")
    run_job(TabularJob.create([str(tmp_path / "t.tsv")], str(tmp_path / "old"), opts))
    man = json.loads((tmp_path / "old" / "index.json").read_text())
    for e in man["extra"]["categorical"]:  # the ties of each count in ascending bytes, as sets were written
        path = tmp_path / "old" / e["vocab"]
        lines = path.read_bytes().splitlines()
        n = {v: cols[TWO.categorical.index(e["column"])].count(v) for v in lines}
        data = b"".join(v + b"\n" for v in sorted(lines, key=lambda v: (-n[v], v)))
        assert data != path.read_bytes()
        path.write_bytes(data)
        e["sha256"] = hashlib.sha256(data).hexdigest()
        next(f for f in man["extra"]["files"] if f["name"] == e["vocab"])["sha256"] = e["sha256"]
    man["extra"]["categorical"] = {e.pop("column"): e for e in man["extra"]["categorical"][::-1]}
    (tmp_path / "old" / "index.json").write_text(json.dumps(man))
    assert verify(str(tmp_path / "old")).ok
    new = TabularOptions(schema=str(tmp_path / "two.json"), target="dlrm", vocab_from=str(tmp_path / "old"))
    got = read_back(run_job(TabularJob.create([str(tmp_path / "t.tsv")], str(tmp_path / "new"), new)))["sparse"]
    for j, vals in enumerate(cols):
        layer = tf.keras.layers.StringLookup(vocabulary=str(tmp_path / "old" / "vocab" / f"{TWO.categorical[j]}.txt"),
                                             num_oov_indices=1)
        np.testing.assert_array_equal(got[:, j], layer(tf.constant(vals)).numpy())


@pytest.mark.parametrize("target", ["dlrm", "deepfm"])
def test_trailing_nul_bytes_are_not_part_of_a_value(tmp_path, target):
    """One rule for vocabularies and --hash-buckets alike: a value's trailing NUL bytes are not part of it
    (``ab\\x00`` is ``ab``); Keras Hashing over the values with them stripped, as docs/tabular.md serves them
    (``tf.strings.regex_replace``), gives tfpipe's bins, short and long values alike."""
    import json

    import tensorflow as tf

    vals = [b"ab\x00", b"ab", b"a\x00b", b"x\x00\x00", b"long value\x00", b"long value", b"\x00z", b"q"] * 3
    with open(tmp_path / "t.tsv", "wb") as fh:
        fh.writelines(b"1\t%d\t%s\t%s\n" % (k, v, v[::-1]) for k, v in enumerate(vals))
    (tmp_path / "two.json").write_text(json.dumps(TWO.to_json()))
    opts = TabularOptions(schema=str(tmp_path / "two.json"), target=target, hash_buckets=1 << 20)
    got = read_back(run_job(TabularJob.create([str(tmp_path / "t.tsv")], str(tmp_path / "s"), opts)))
    raw = tf.constant([[v, v[::-1]] for v in vals])
    served = tf.keras.layers.Hashing(num_bins=1 << 20)(tf.strings.regex_replace(raw, r"\x00+$", "")).numpy()
    want = served if target == "dlrm" else 1 + served + np.array([0, 1 << 20])
    np.testing.assert_array_equal(got["sparse"] if target == "dlrm" else got["ids"][:, 1:], want)
    unstripped = tf.keras.layers.Hashing(num_bins=1 << 20)(raw).numpy()
    assert (unstripped != served).any()  # the rule matters: the raw strings would get other bins
