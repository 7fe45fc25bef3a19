"""Smoke run of ``tfpipe bench convert-libsvm`` (tiny: checks it runs and reports, not the speed)."""
import json

import pytest

from bench.commands.convert_libsvm import format_report, naive_convert, run_benchmark
from converters.cli import main
from converters.libsvm.synthetic import criteo_arrays, write_criteo_libsvm


def test_naive_baseline_writes_the_same_records(tmp_path):
    import tensorflow as tf

    src = tmp_path / "in.libsvm"
    write_criteo_libsvm(src, 50, seed=4)
    assert naive_convert(str(src), str(tmp_path / "n.tfrecord"), 39) == 50
    feats = {"ids": tf.io.FixedLenFeature([39], tf.int64), "values": tf.io.FixedLenFeature([39], tf.float32)}
    got = next(iter(tf.data.TFRecordDataset(str(tmp_path / "n.tfrecord")).batch(50)
                    .map(lambda x: tf.io.parse_example(x, feats))))
    a = criteo_arrays(50, seed=4)
    assert (got["ids"].numpy() == a["ids"]).all() and (got["values"].numpy() == a["values"]).all()


def test_smoke_run(tmp_path):
    r = run_benchmark(lines=2000, workers_list=(1, 2), workdir=str(tmp_path))
    assert r["protobuf_backend"] == "upb"
    assert r["tfpipe_workers_1"]["records_per_s"] > 0 and r["naive"]["records_per_s"] > 0
    assert r["ratio"] > 0 and [s["workers"] for s in r["scaling"]] == [1, 2]
    text = format_report(r)
    assert "ratio:" in text and "workers  2" in text
    assert list(tmp_path.iterdir()) == []  # cleans up after itself


def test_cli_json(capsys):
    assert main(["bench", "convert-libsvm", "--lines", "500", "--workers-list", "1", "--json"]) == 0
    r = json.loads(capsys.readouterr().out)
    assert r["lines"] == 500 and r["benchmark"] == "convert-libsvm"


def test_sparse_naive_baseline_writes_the_same_records(tmp_path):
    import tensorflow as tf

    from converters.libsvm.convert import convert_libsvm
    from converters.libsvm.synthetic import write_sparse_libsvm

    src = tmp_path / "in.libsvm"
    write_sparse_libsvm(src, 60, seed=2, qid=True)
    assert naive_convert(str(src), str(tmp_path / "n.tfrecord"), None) == 60
    m = convert_libsvm(src, tmp_path / "o", sparse=True, keep_qid=True)
    feats = {"ids": tf.io.VarLenFeature(tf.int64), "values": tf.io.VarLenFeature(tf.float32),
             "qid": tf.io.FixedLenFeature([], tf.int64), "label": tf.io.FixedLenFeature([], tf.float32)}

    def read(files):
        b = next(iter(tf.data.TFRecordDataset(files).batch(100).map(lambda x: tf.io.parse_example(x, feats))))
        return [b[k].values.numpy().tolist() if k in ("ids", "values") else b[k].numpy().tolist() for k in feats]

    assert read(str(tmp_path / "n.tfrecord")) == read(m.shard_paths())


def test_sparse_smoke_run(tmp_path):
    r = run_benchmark(lines=300, workers_list=(1,), workdir=str(tmp_path), sparse=True)
    assert r["sparse"] is True and r["field_size"] is None and r["ratio"] > 0
    assert "sparse lines (0-150 pairs, qid:; --sparse --keep-qid)" in format_report(r)
    assert "--workers 1 --sparse" in format_report(r)
    assert list(tmp_path.iterdir()) == []


def test_beam_engine_smoke(tmp_path, capsys):
    pytest.importorskip("apache_beam")
    from bench.core.convert_beam import format_beam_report, run_beam_benchmark

    r = run_beam_benchmark(lines=300, repeat=1, workdir=str(tmp_path))
    assert r["identical"] and r["beam"]["records_per_s"] > 0 and r["local"]["records_per_s"] > 0
    assert r["ratio"] == round(r["local"]["seconds"] / r["beam"]["seconds"], 3)
    assert "ratio beam/local" in format_beam_report(r)
    assert list(tmp_path.iterdir()) == []
    assert main(["bench", "convert-libsvm", "--engine", "beam", "--lines", "200", "--repeats", "1", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["benchmark"] == "convert-libsvm --engine beam" and out["lines"] == 200
