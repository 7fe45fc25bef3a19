import io

import numpy as np

from converters.libsvm.synthetic import criteo_arrays, criteo_lines


def test_lines_match_arrays_through_sklearn():
    from sklearn.datasets import load_svmlight_file

    n = 200
    a = criteo_arrays(n, seed=5)
    X, y = load_svmlight_file(io.BytesIO(criteo_lines(n, seed=5)), zero_based=False, dtype=np.float64)
    np.testing.assert_array_equal(y.astype(np.float32), a["label"])
    X = X.tocsr()
    for i in range(n):
        row = X.getrow(i)
        np.testing.assert_array_equal(row.indices, a["ids"][i])
        np.testing.assert_array_equal(row.data.astype(np.float32), a["values"][i])


def test_ids_strictly_increasing_and_deterministic():
    a = criteo_arrays(500, seed=1)
    assert (np.diff(a["ids"], axis=1) > 0).all()
    assert criteo_lines(50, seed=2) == criteo_lines(50, seed=2)
    assert criteo_lines(50, seed=2) != criteo_lines(50, seed=3)


def test_sparse_lines_parse_as_described():
    from converters.libsvm.block import parse_block
    from converters.libsvm.synthetic import sparse_lines

    text = sparse_lines(500, seed=4, qid=True)
    assert text == sparse_lines(500, seed=4, qid=True)
    r = parse_block(text, sparse=True, keep_qid=True)
    nnz = r.row_splits[1:] - r.row_splits[:-1]
    assert r.n == 500 and r.fallback_lines == 0 and nnz.max() <= 150 and nnz.min() >= 0
    assert r.ids.max() < 200_000 and set(r.label.tolist()) == {1.0, -1.0} and r.qid[-1] == 4_000_000 + 499 // 20
