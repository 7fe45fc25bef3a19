"""The fixed-width layout's one-pass serializer writes byte for byte what the general serializer writes."""
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from converters.libsvm.emit import max_record_bytes, serialize_fixed
from converters.libsvm.emit_sparse import serialize_csr
from converters.libsvm.options import libsvm_schema
from converters.tfrecord.examples import serialize_batch

_IDS = st.one_of(st.integers(0, 127), st.integers(128, 16383), st.integers(16384, 2**21 - 1),
                 st.integers(2**21 - 2, 2**21 + 2), st.integers(2**21, 2**63 - 1),
                 st.integers(-(2**63), -1))
_F32 = st.floats(width=32, allow_nan=True, allow_infinity=True)


@settings(max_examples=150, deadline=None)
@given(st.integers(1, 6).flatmap(lambda f: st.tuples(
    st.just(f), st.lists(st.tuples(_F32, st.lists(_IDS, min_size=f, max_size=f),
                                   st.lists(_F32, min_size=f, max_size=f)), min_size=1, max_size=8))))
def test_equals_general_serializer(case):
    f, rows = case
    label = np.array([r[0] for r in rows], np.float32)
    ids = np.array([r[1] for r in rows], np.int64)
    values = np.array([r[2] for r in rows], np.float32)
    want = serialize_batch(libsvm_schema(f), {"label": label, "ids": ids, "values": values})
    got = serialize_fixed(label, ids, values, ("label", "ids", "values"))
    assert got[0].tobytes() == want[0].tobytes()
    assert got[1].tolist() == want[1].tolist()
    assert all(n <= max_record_bytes(("label", "ids", "values"), f) for n in got[1])


@pytest.mark.parametrize("keys", [("label", "ids", "values"), ("y", "feat_ids", "feat_vals"),
                                  ("zz", "a", "m"), ("values", "label", "ids"), ("é" * 70, "i" * 200, "v")])
def test_any_feature_names(keys):
    """Names in any sorted order and of any length (varint key lengths past 127 bytes)."""
    rng = np.random.default_rng(1)
    label = rng.standard_normal(20).astype(np.float32)
    ids = rng.integers(0, 1 << 40, size=(20, 39))
    values = rng.standard_normal((20, 39)).astype(np.float32)
    want = serialize_batch(libsvm_schema(39, *keys), dict(zip(keys, (label, ids, values))))
    got = serialize_fixed(label, ids, values, keys)
    assert got[0].tobytes() == want[0].tobytes()
    assert got[1].tolist() == want[1].tolist()


def test_read_back_by_tensorflow(tmp_path):
    import tensorflow as tf

    label = np.array([1, 0], np.float32)
    ids = np.array([[3, 300000], [0, 5]], np.int64)
    values = np.array([[0.5, 1], [-2, 0]], np.float32)
    framed, _ = serialize_fixed(label, ids, values, ("label", "ids", "values"))
    path = tmp_path / "f.tfrecord"
    path.write_bytes(framed.tobytes())
    spec = {"label": tf.io.FixedLenFeature([], tf.float32), "ids": tf.io.FixedLenFeature([2], tf.int64),
            "values": tf.io.FixedLenFeature([2], tf.float32)}
    got = [tf.io.parse_single_example(r, spec) for r in tf.data.TFRecordDataset(str(path))]
    assert [g["ids"].numpy().tolist() for g in got] == ids.tolist()
    assert [g["values"].numpy().tolist() for g in got] == values.tolist()
    assert [float(g["label"]) for g in got] == [1.0, 0.0]


_ROWS = st.lists(st.tuples(st.lists(_F32, max_size=3), st.lists(st.tuples(_IDS, _F32), max_size=6), _IDS),
                 min_size=1, max_size=8)


@settings(max_examples=150, deadline=None)
@given(_ROWS, st.booleans(), st.booleans(),
       st.sampled_from([("label", "ids", "values", "qid"), ("y", "a", "v", "b"), ("z" * 130, "ids", "x", "q")]))
def test_sparse_equals_general_serializer(rows, multilabel, with_qid, keys):
    """CSR rows (empty rows and empty label lists too, negative and 10-byte ids) as serialize_batch writes them."""
    splits = np.cumsum([0] + [len(r[1]) for r in rows])
    ids = np.array([i for r in rows for i, _ in r[1]], np.int64)
    values = np.array([v for r in rows for _, v in r[1]], np.float32)
    if multilabel:
        label = np.array([x for r in rows for x in r[0]], np.float32)
        label_splits = np.cumsum([0] + [len(r[0]) for r in rows])
        label_col = (label, label_splits)
    else:
        label = np.array([(r[0] or [0.5])[0] for r in rows], np.float32)
        label_splits, label_col = None, label
    qid = np.array([r[2] for r in rows], np.int64) if with_qid else None
    schema = libsvm_schema(None, *keys[:3], multilabel=multilabel, qid=keys[3] if with_qid else None)
    cols = {keys[0]: label_col, keys[1]: (ids, splits), keys[2]: (values, splits)}
    if with_qid:
        cols[keys[3]] = qid
    want = serialize_batch(schema, cols)
    got = serialize_csr(label, label_splits, ids, values, splits, qid, keys if with_qid else (*keys[:3], ""))
    assert got[0].tobytes() == want[0].tobytes()
    assert got[1].tolist() == want[1].tolist()
