"""``tfpipe convert libsvm --sparse`` end to end: scikit-learn's own test files and 20,000 random sparse rows
converted, read back through TensorFlow and compared with ``load_svmlight_file`` bit for bit; the manifest's
``num_features`` and nonzero counts; the pipeline reading the set."""
import json
import os

import numpy as np
import pytest
from built_once import built_once
from cli_batch import Run, run_commands
from number_formats import number_text

from converters.libsvm.convert import convert_libsvm
from converters.shardset.reader import read_manifest


def bits(a):
    return np.asarray(a, dtype=np.float32).view(np.uint32)


def sklearn_file(name: str) -> str:
    """One of scikit-learn's svmlight test files, read from the installed package (skipped if absent)."""
    sklearn = pytest.importorskip("sklearn")
    path = os.path.join(os.path.dirname(sklearn.__file__), "datasets", "tests", "data", name)
    if not os.path.exists(path):
        pytest.skip(f"scikit-learn's {name} is not installed")
    return path


def read_back(out, multilabel=False, qid=False):
    """Every record of a sparse set through tf.data + parse_example with VarLenFeatures, as CSR arrays."""
    import tensorflow as tf

    m = read_manifest(out)
    feats = {"ids": tf.io.VarLenFeature(tf.int64), "values": tf.io.VarLenFeature(tf.float32),
             "label": tf.io.VarLenFeature(tf.float32) if multilabel else tf.io.FixedLenFeature([], tf.float32)}
    if qid:
        feats["qid"] = tf.io.FixedLenFeature([], tf.int64)
    ds = tf.data.TFRecordDataset(m.shard_paths()).batch(1 << 20).map(lambda x: tf.io.parse_example(x, feats))
    b = next(iter(ds))
    n = int(b["ids"].dense_shape[0])
    splits = np.concatenate([[0], np.cumsum(np.bincount(b["ids"].indices[:, 0].numpy(), minlength=n))])
    out = {"ids": b["ids"].values.numpy(), "values": b["values"].values.numpy(), "splits": splits, "n": n,
           "manifest": m}
    if multilabel:
        lab = b["label"]
        out["label"] = [lab.values.numpy()[lab.indices[:, 0].numpy() == i].tolist() for i in range(n)]
    else:
        out["label"] = b["label"].numpy()
    if qid:
        out["qid"] = b["qid"].numpy()
    return out


def assert_equals_sklearn(got, X, y):
    assert got["n"] == X.shape[0]
    assert (got["splits"] == X.indptr).all()
    assert (got["ids"] == X.indices).all()
    assert (bits(got["values"]) == bits(X.data.astype(np.float32))).all()
    assert got["manifest"].extra["num_features"] == X.shape[1]
    if isinstance(got["label"], list):
        assert got["label"] == [[float(np.float32(v)) for v in t] for t in y]
    else:
        assert (bits(got["label"]) == bits(y.astype(np.float32))).all()


# -- scikit-learn's own test files ----------------------------------------------------------------------------

INVALID = [("svmlight_invalid.txt", "bad_label"), ("svmlight_invalid_order.txt", "unsorted_index")]
INVALID_EXTRA = [[], ["--multilabel"], ["--keep-qid"]]


@pytest.fixture(scope="module")
def sklearn_runs(tmp_path_factory):
    """``tfpipe convert libsvm --sparse`` of scikit-learn's files, every command line in one fresh process (as a
    user's ``tfpipe`` runs them), built once per test run and then only read: {key: (output directory, run)}
    for "classification", "multilabel" and (name, *extra) of each invalid file."""
    commands = {"classification": (sklearn_file("svmlight_classification.txt"), []),
                "multilabel": (sklearn_file("svmlight_multilabel.txt"), ["--multilabel"])}
    for name, _ in INVALID:
        for extra in INVALID_EXTRA:
            commands[(name, *extra)] = (sklearn_file(name), extra)

    def build(root):
        argvs = [["convert", "libsvm", path, "--out", str(root / f"o{i}"), "--sparse", *extra, "--no-progress"]
                 for i, (path, extra) in enumerate(commands.values())]
        run_commands(argvs, str(root / "runs.json"))

    root = built_once(tmp_path_factory, "sparse-sklearn-files", build)
    with open(root / "runs.json", encoding="utf-8") as f:
        runs = [Run(**r) for r in json.load(f)]
    return {key: (root / f"o{i}", run) for i, (key, run) in enumerate(zip(commands, runs))}


def test_sklearn_classification_file(sklearn_runs):
    from sklearn.datasets import load_svmlight_file

    out, run = sklearn_runs["classification"]
    assert run.code == 0, run.err
    assert "sparse: num_features 21, nonzeros per row min 0 mean 1.3333 max 3" in run.out
    X, y = load_svmlight_file(sklearn_file("svmlight_classification.txt"), dtype=np.float32)
    got = read_back(out)
    assert_equals_sklearn(got, X, y)
    assert 0.0 in got["values"].tolist()  # the explicit zero '3:0' is kept
    assert got["manifest"].extra["nonzeros"] == {"min": 0, "mean": 1.3333, "max": 3, "total": 8}


def test_sklearn_multilabel_file(sklearn_runs):
    from sklearn.datasets import load_svmlight_file

    out, run = sklearn_runs["multilabel"]
    assert run.code == 0, run.err
    X, y = load_svmlight_file(sklearn_file("svmlight_multilabel.txt"), dtype=np.float32, multilabel=True)
    got = read_back(out, multilabel=True)
    assert_equals_sklearn(got, X, y)
    assert got["label"] == [[0.0, 1.0], [2.0], [], [1.0, 2.0]]
    assert read_manifest(out).schema["label"].varlen


@pytest.mark.parametrize("name,reason", INVALID)
@pytest.mark.parametrize("extra", INVALID_EXTRA)
def test_sklearn_invalid_files_fail_at_line_1(sklearn_runs, name, reason, extra):
    from sklearn.datasets import load_svmlight_file

    path = sklearn_file(name)
    with pytest.raises(ValueError):
        load_svmlight_file(path)
    out, run = sklearn_runs[(name, *extra)]
    err = run.err
    assert run.code == 2
    reason = "missing_qid" if extra == ["--keep-qid"] and reason != "bad_label" else reason
    assert err.strip().splitlines() == [err.strip()] and err.startswith(f"tfpipe: error: {path}:1: {reason}: ")
    assert not (out / "index.json").exists()


# -- 20,000 random sparse rows ----------------------------------------------------------------------------------

ROWS = 20_000


def random_sparse_text(seed: int = 11, rows: int = ROWS) -> bytes:
    """``rows`` random rows (the first ``k`` rows of a seed are the same whatever ``rows`` is)."""
    rng = np.random.default_rng(seed)
    labels = ["+1", "-1", "2.5"]
    lines = []
    for i in range(rows):
        k = int(rng.integers(0, 151))
        ids = np.sort(rng.choice(200_000, size=k, replace=False)) + 1
        mags = 10.0 ** rng.integers(-12, 12, size=k)
        vals = (rng.standard_normal(k) * mags).tolist()
        parts = [labels[i % 3], f"qid:{i // 7}"]
        parts += [f"{j}:{number_text(rng, v)}" for j, v in zip(ids.tolist(), vals)]
        sep = "\t" if i % 11 == 0 else " "
        lines.append(sep.join(parts) + (" # a comment" if i % 13 == 0 else ""))
        if i % 97 == 0:
            lines.append("# a comment line")
    return ("\n".join(lines) + "\n").encode()


@pytest.fixture(scope="module")
def random_set(tmp_path_factory):
    """The 20,000 rows and their converted set, built once per test run (shared by the xdist workers: only
    read)."""
    def build(d):
        (d / "random.libsvm").write_bytes(random_sparse_text())
        (run,) = run_commands([["convert", "libsvm", str(d / "random.libsvm"), "--out", str(d / "shards"),
                                "--sparse", "--keep-qid", "--workers", "2", "--shard-size", "4MiB",
                                "--no-progress"]], str(d / "run.json"))
        assert run.code == 0, run.err

    d = built_once(tmp_path_factory, "sparse20k", build)
    return d / "random.libsvm", d / "shards"


def test_random_rows_equal_sklearn_bit_for_bit(random_set):
    from sklearn.datasets import load_svmlight_file

    src, out = random_set
    X, y, q = load_svmlight_file(str(src), dtype=np.float32, query_id=True)
    got = read_back(out, qid=True)
    assert got["n"] == ROWS
    assert_equals_sklearn(got, X, y)
    assert (got["qid"] == q).all()
    m = got["manifest"]
    nnz = np.diff(X.indptr)
    assert m.extra["nonzeros"] == {"min": int(nnz.min()), "mean": round(float(nnz.mean()), 4),
                                   "max": int(nnz.max()), "total": int(nnz.sum())}
    assert len(m.shards) > 1 and m.records == ROWS and m.options["keep_qid"] is True
    assert [f.name for f in m.schema.features if f.varlen] == ["ids", "values"]


def test_pipeline_reads_all_rows_as_a_sparse_matrix(random_set):
    """``PipelineSpec.from_manifest`` on the sparse set: SparseTensors of dense_shape [batch, num_features]
    (indices [row, id]) holding scikit-learn's rows (the batched interleave over the shards mixes their
    order); RaggedTensors on request."""
    from sklearn.datasets import load_svmlight_file

    from pipeline import PipelineSpec, build_dataset, describe

    src, out = random_set
    X, y, q = load_svmlight_file(str(src), dtype=np.float32, query_id=True)
    spec = PipelineSpec.from_manifest(out, 1000, cores=2)
    assert spec.sparse_features == ("ids", "values") and spec.num_features == X.shape[1]
    assert "tf.SparseTensor [batch, %d]" % X.shape[1] in describe(spec)
    got = []
    for feats, label in build_dataset(spec):
        sp = feats["values"]
        n = label.shape[0]
        assert sp.dense_shape.numpy().tolist() == [n, X.shape[1]]
        assert (feats["ids"].indices.numpy() == sp.indices.numpy()).all()
        assert (sp.indices[:, 1].numpy() == feats["ids"].values.numpy()).all()
        splits = np.concatenate([[0], np.cumsum(np.bincount(sp.indices[:, 0].numpy(), minlength=n))])
        ids, vals = sp.indices[:, 1].numpy(), bits(sp.values.numpy())
        got += [(int(bits(label)[i]), int(feats["qid"][i]), ids[splits[i]:splits[i + 1]].tobytes(),
                 vals[splits[i]:splits[i + 1]].tobytes()) for i in range(n)]
    want = [(int(bits(y[i])), int(q[i]), X.indices[X.indptr[i]:X.indptr[i + 1]].astype(np.int64).tobytes(),
             bits(X.data[X.indptr[i]:X.indptr[i + 1]]).tobytes()) for i in range(ROWS)]
    assert len(got) == ROWS and sorted(got) == sorted(want)
    ragged = PipelineSpec.from_manifest(out, 5000, sparse_as="ragged", output="dict", read="sequential", cores=2)
    lengths = np.concatenate([b["ids"].row_lengths().numpy() for b in build_dataset(ragged)])
    assert (lengths == np.diff(X.indptr)).all()  # a sequential reader keeps file order


# -- the converter ---------------------------------------------------------------------------------------------

def test_output_is_byte_identical_whatever_the_workers(tmp_path):
    text = random_sparse_text(3, rows=600)
    assert len(text) > 400_000
    text = text[:400_000]
    text = text[: text.rfind(b"\n") + 1]  # 400 KB of whole lines: many 30,000-byte blocks
    (tmp_path / "in.txt").write_bytes(text)
    shas = set()
    for w, block in ((1, 1 << 20), (2, 30_000)):
        m = convert_libsvm(tmp_path / "in.txt", tmp_path / f"o{w}", sparse=True, keep_qid=True, workers=w,
                           block_bytes=block)
        shas.add(tuple(s.sha256 for s in m.shards))
        assert m.extra["num_features"] > 1000
    assert len(shas) == 1


def test_index_base_auto_over_all_inputs(tmp_path):
    (tmp_path / "a.txt").write_bytes(b"1 1:1 5:2\n")
    (tmp_path / "b.txt").write_bytes(b"1 0:1\n")
    m = convert_libsvm([tmp_path / "a.txt", tmp_path / "b.txt"], tmp_path / "o", sparse=True)
    assert m.extra["index_base"] == 0 and m.extra["num_features"] == 6
    got = read_back(tmp_path / "o")
    assert got["ids"].tolist() == [1, 5, 0]
    m = convert_libsvm(tmp_path / "a.txt", tmp_path / "o1", sparse=True)
    assert m.extra["index_base"] == 1 and m.extra["num_features"] == 5


def test_skip_counts_bad_lines_and_no_feature_rows(tmp_path):
    (tmp_path / "in.txt").write_bytes(b"1 qid:1 2:1\n1 3:1\n\n2 qid:2\n1 qid:x 1:1\n")
    m = convert_libsvm(tmp_path / "in.txt", tmp_path / "o", sparse=True, keep_qid=True, on_error="skip")
    assert m.records == 2 and m.skipped == {"bad_qid": 1, "missing_qid": 1}
    assert m.inputs[0].records_read == 4 and m.inputs[0].blank_lines == 1
    assert m.extra["nonzeros"] == {"min": 0, "mean": 0.5, "max": 1, "total": 1} and m.extra["num_features"] == 2
    (tmp_path / "none.txt").write_bytes(b"1\n-1\n")
    assert convert_libsvm(tmp_path / "none.txt", tmp_path / "o2", sparse=True).extra["num_features"] == 1
