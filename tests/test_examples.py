import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from converters.libsvm.options import libsvm_schema
from converters.libsvm.synthetic import criteo_arrays
from converters.tfrecord.examples import (
    column_payloads,
    framed_lengths,
    serialize_batch,
)
from converters.tfrecord.schema import FeatureSpec, Schema


def _payloads(framed, lengths):
    out, pos = [], 0
    for ln in lengths:
        out.append(framed[pos + 12:pos + ln - 4].tobytes())
        pos += ln
    return out


@pytest.mark.parametrize("arrays", [
    criteo_arrays(50, seed=1),
    {"label": np.array([0.0, 1.0], np.float32), "ids": np.array([[0] * 39, [2**62] * 39]),
     "values": np.array([[np.inf] * 39, [-0.0] * 39], np.float32)},
])
def test_bytes_equal_protobuf_deterministic_serialization(arrays):
    import tensorflow as tf

    schema = libsvm_schema(39)
    framed, lengths = serialize_batch(schema, arrays)
    for i, payload in enumerate(_payloads(framed, lengths)):
        ex = tf.train.Example(features=tf.train.Features(feature={
            "label": tf.train.Feature(float_list=tf.train.FloatList(value=[arrays["label"][i]])),
            "ids": tf.train.Feature(int64_list=tf.train.Int64List(value=arrays["ids"][i])),
            "values": tf.train.Feature(float_list=tf.train.FloatList(value=arrays["values"][i])),
        }))
        assert payload == ex.SerializeToString(deterministic=True)


def test_round_trip_through_parse_example(tmp_path):
    import tensorflow as tf

    schema = Schema((FeatureSpec("input_ids", "int64", (9,)), FeatureSpec("neg", "int64", (2,)),
                     FeatureSpec("w", "float32")))
    rng = np.random.default_rng(0)
    cols = {"input_ids": rng.integers(0, 2**40, (100, 9)), "neg": rng.integers(-5, 5, (100, 2)),
            "w": rng.random(100).astype(np.float32)}
    framed, lengths = serialize_batch(schema, cols)
    assert framed.size == lengths.sum()
    path = tmp_path / "x.tfrecord"
    path.write_bytes(framed.tobytes())
    spec = {"input_ids": tf.io.FixedLenFeature([9], tf.int64), "neg": tf.io.FixedLenFeature([2], tf.int64),
            "w": tf.io.FixedLenFeature([], tf.float32)}
    batch = next(iter(tf.data.TFRecordDataset(str(path)).batch(1000).map(lambda x: tf.io.parse_example(x, spec))))
    for k in cols:
        np.testing.assert_array_equal(batch[k].numpy(), cols[k].reshape(batch[k].shape))


@pytest.mark.parametrize("kwargs,match", [
    ({"name": "", "dtype": "int64"}, "name"),
    ({"name": "a", "dtype": "bytes"}, "bytes"),   # ("string" is valid: BytesList features of adopted sets)
    ({"name": "a", "dtype": "int64", "shape": (0,)}, r"\(0,\)"),
    ({"name": "a", "dtype": "int64", "shape": (2, 3)}, r"\(2, 3\)"),
])
def test_feature_spec_validation(kwargs, match):
    with pytest.raises(ValueError, match=match):
        FeatureSpec(**kwargs)


def test_string_features_and_raw_schemas_are_never_serialized():
    with pytest.raises(ValueError, match="string features"):
        serialize_batch(Schema((FeatureSpec("s", "string"),)), {"s": np.zeros((1, 1))})
    with pytest.raises(ValueError, match="raw schema"):
        serialize_batch(Schema.raw_records(), {})


def test_schema_validation_and_json():
    with pytest.raises(ValueError, match="duplicate"):
        Schema((FeatureSpec("a", "int64"), FeatureSpec("a", "float32")))
    with pytest.raises(ValueError, match="label"):
        Schema((FeatureSpec("a", "int64"),), label="y")
    s = libsvm_schema(7)
    assert Schema.from_json(s.to_json()) == s
    assert [f.name for f in s.features] == ["ids", "label", "values"]


@pytest.mark.parametrize("cols,match", [
    ({"label": np.zeros(3), "ids": np.zeros((3, 39))}, "missing"),
    ({"label": np.zeros(3), "ids": np.zeros((3, 38)), "values": np.zeros((3, 39))}, "width"),
    ({"label": np.zeros(3), "ids": np.zeros((4, 39)), "values": np.zeros((3, 39))}, "rows"),
])
def test_serialize_rejects_bad_columns(cols, match):
    with pytest.raises(ValueError, match=match):
        serialize_batch(libsvm_schema(39), cols)


# -- variable-length features ---------------------------------------------------------------------------------

VARLEN = Schema((FeatureSpec("label", "float32"), FeatureSpec("ids", "int64", None),
                 FeatureSpec("w", "float32", None), FeatureSpec("q", "int64")), label="label")


def test_variable_length_bytes_equal_protobuf_empty_rows_included():
    import tensorflow as tf

    rng = np.random.default_rng(3)
    n = 300
    splits = np.concatenate([[0], np.cumsum(rng.integers(0, 6, n))])        # many empty rows
    wsplits = np.concatenate([[0], np.cumsum(rng.integers(0, 3, n))])
    ids = rng.integers(-2**40, 2**62, splits[-1])
    w = rng.standard_normal(wsplits[-1]).astype(np.float32)
    cols = {"label": rng.random(n).astype(np.float32), "ids": (ids, splits), "w": (w, wsplits),
            "q": rng.integers(-5, 5, n)}
    framed, lengths = serialize_batch(VARLEN, cols)
    for i, payload in enumerate(_payloads(framed, lengths)):
        ex = tf.train.Example(features=tf.train.Features(feature={
            "label": tf.train.Feature(float_list=tf.train.FloatList(value=[cols["label"][i]])),
            "ids": tf.train.Feature(int64_list=tf.train.Int64List(value=ids[splits[i]:splits[i + 1]])),
            "w": tf.train.Feature(float_list=tf.train.FloatList(value=w[wsplits[i]:wsplits[i + 1]])),
            "q": tf.train.Feature(int64_list=tf.train.Int64List(value=[cols["q"][i]])),
        }))
        assert payload == ex.SerializeToString(deterministic=True)


@pytest.mark.parametrize("column,match", [
    (np.zeros(3), "give \\(values, row_splits\\)"),
    ((np.zeros(3), [1, 2, 3, 3]), "rise from 0"),
    ((np.zeros(3), [0, 2, 1, 3]), "rise from 0"),
    ((np.zeros(3), [0, 1, 2, 4]), "len\\(values\\) = 3"),
    ((np.zeros(3), [0, 3]), "1 rows, expected 3"),
])
def test_serialize_rejects_bad_variable_length_columns(column, match):
    cols = {"label": np.zeros(3), "ids": (np.zeros(2), [0, 1, 1, 2]), "w": column, "q": np.zeros(3)}
    with pytest.raises(ValueError, match=match):
        serialize_batch(VARLEN, cols)


def test_variable_length_spec_and_json():
    f = FeatureSpec("ids", "int64", None)
    assert f.varlen and not FeatureSpec("ids", "int64", (3,)).varlen
    with pytest.raises(ValueError, match="variable length"):
        f.width
    assert f.to_json() == {"dtype": "int64", "shape": None}
    assert Schema.from_json(VARLEN.to_json()) == VARLEN and VARLEN.varlen == ("ids", "w")
    sparse = libsvm_schema(None, multilabel=True, qid="qid")
    assert sparse.to_json()["features"]["label"] == {"dtype": "float32", "shape": None}
    assert sparse["qid"].shape == () and libsvm_schema(39).varlen == ()
    with pytest.raises(ValueError, match="or None"):
        FeatureSpec("a", "int64", "x")


@settings(max_examples=100, deadline=None)
@given(st.lists(st.tuples(st.sampled_from(["int64", "float32"]), st.integers(1, 5)), min_size=1, max_size=4),
       st.integers(1, 6), st.integers(0, 2**63 - 1), st.data())
def test_framed_lengths_without_serializing(features, n, high, data):
    """``framed_lengths(column_payloads(...))`` equals ``serialize_batch``'s lengths (any ints, negatives too)."""
    schema = Schema(tuple(FeatureSpec(f"f{i}" * (1 + i * 40), d, (w,)) for i, (d, w) in enumerate(features)))
    rng = np.random.default_rng(data.draw(st.integers(0, 1000)))
    cols = {}
    for f in schema.features:
        if f.dtype == "int64":
            cols[f.name] = rng.integers(-high - 1, high, (n, f.width), dtype=np.int64, endpoint=True)
        else:
            cols[f.name] = rng.random((n, f.width)).astype(np.float32)
    _, lengths = serialize_batch(schema, cols)
    assert framed_lengths(schema, column_payloads(schema, cols)).tolist() == lengths.tolist()
