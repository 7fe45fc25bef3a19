"""tfpipe pipeline explain / tune / lint: argv -> output and exit code."""
from __future__ import annotations

import json

import pytest
from pipeline_data import write_indexed_set

from converters.cli import main


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    d = tmp_path_factory.mktemp("indexed")
    write_indexed_set(d, 300)
    return str(d)


@pytest.mark.parametrize("extra,needles", [
    ([], ["1. source", "read=interleave", "prefetch on"]),
    (["--epochs", "3"], ["policy=memory", "< 25% of RAM", "epochs=3"]),
    (["--epochs", "forever"], ["epochs=forever"]),
    (["--shuffle-buffer", "100", "--seed", "4"], ["buffer=100 seed=4", "read=sequential"]),
    (["--ranks", "2", "--rank", "1"], ["shard    on", "take     on"]),
    (["--mode", "pipe", "--channel", "train"], ["reader=tfpipe FIFO reader", "fifo=/opt/ml/input/data/train_0"]),
])
def test_explain(data, capsys, extra, needles):
    assert main(["pipeline", "explain", data, "--batch-size", "32", *extra]) == 0
    out = capsys.readouterr().out
    for n in needles:
        assert n in out


@pytest.mark.parametrize("argv,code,msg", [
    (["--batch-size", "8", "--rank", "3", "--ranks", "2"], 2, "shard_index must be in [0, 2), got 3"),
    (["--batch-size", "8", "--cache", "disk"], 2, "cache must be one of"),
    (["--batch-size", "8", "--mode", "pipe"], 2, "pipe mode needs a channel"),
    (["--batch-size", str(2**64)], 2, "batch_size must be at most 2**63 - 1 (TensorFlow's int64), got 1844"),
    (["--batch-size", "8", "--seed", str(2**63)], 2, "seed must be at most 2**63 - 1 (TensorFlow's int64), got 9"),
    (["--batch-size", "8", "--epochs", str(2**63)], 2, "epochs must be at most 2**63 - 1 (TensorFlow's int64)"),
    (["--batch-size", "8", "--shuffle-buffer", str(2**64)], 2, "shuffle_buffer must be at most 2**63 - 1"),
])
def test_explain_errors(data, capsys, argv, code, msg):
    assert main(["pipeline", "explain", data, *argv]) == code
    err = capsys.readouterr().err
    assert err.startswith("tfpipe: error:") and msg in err and err.count("\n") == 1


@pytest.mark.parametrize("extra,needle", [([], "ids/values as tf.SparseTensor [batch, 9] with indices [row, id]"),
                                          (["--sparse-as", "ragged"], "as tf.RaggedTensor [batch, None]")])
def test_explain_a_sparse_set(tmp_path, capsys, extra, needle):
    (tmp_path / "in.txt").write_bytes(b"1 4:1\n0 2:1 9:1\n")
    assert main(["convert", "libsvm", str(tmp_path / "in.txt"), "--out", str(tmp_path / "o"), "--sparse",
                 "--no-progress"]) == 0
    capsys.readouterr()
    assert main(["pipeline", "explain", str(tmp_path / "o"), "--batch-size", "8", *extra]) == 0
    assert needle in capsys.readouterr().out


def test_tune_then_explain_uses_it(data, capsys, tmp_path, monkeypatch):
    monkeypatch.setenv("TFPIPE_CACHE", str(tmp_path))
    assert main(["pipeline", "explain", data, "--batch-size", "32"]) == 0
    assert "chosen_by=rule" in capsys.readouterr().out
    assert main(["pipeline", "tune", data, "--batch-size", "32", "--seconds", "3", "--repeats", "3"]) == 0
    out = capsys.readouterr().out
    for needle in ("candidate", "records/s", "vs rule", "ranked by 'vs rule'", "<- winner", "(built-in rule)",
                   "stored in", f"PipelineSpec.from_manifest({data!r}, 32, read="):
        assert needle in out
    assert main(["pipeline", "explain", data, "--batch-size", "32"]) == 0
    assert "chosen_by=tuned" in capsys.readouterr().out
    assert main(["pipeline", "explain", data, "--batch-size", "32", "--tune", "off"]) == 0
    assert "chosen_by=rule" in capsys.readouterr().out


def test_tune_json_no_store(data, capsys, tmp_path, monkeypatch):
    monkeypatch.setenv("TFPIPE_CACHE", str(tmp_path))
    assert main(["pipeline", "tune", data, "--batch-size", "16", "--seconds", "2", "--repeats", "1", "--json",
                 "--no-store", "--ranks", "2"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["path"] is None and doc["data"]["batch_size"] == 16 and doc["data"]["num_shards"] == 2
    assert {c["config"]["read"] for c in doc["candidates"]} == {"sequential"}
    assert not (tmp_path / "tune").exists()


@pytest.mark.parametrize("argv,msg", [  # usage errors: exit 64, the command's usage and one error line
    (["tune", "--batch-size", "8", "--seconds", "0"], "argument --seconds: expected a positive number of seconds"),
    (["tune", "--batch-size", "0"], "argument --batch-size: expected a positive integer, got '0'"),
    (["tune", "--batch-size", "8", "--repeats", "0"], "argument --repeats: expected a positive integer"),
    (["explain", "--batch-size", "0"], "argument --batch-size: expected a positive integer, got '0'"),
    (["explain", "--batch-size", "8", "--ranks", "0"], "argument --ranks: expected a positive integer"),
    (["explain", "--batch-size", "8", "--rank", "-1"], "argument --rank: expected a non-negative integer"),
    (["explain", "--batch-size", "8", "--epochs", "-2"], "expected a positive number of epochs or 'forever'"),
    (["explain", "--batch-size", "8", "--cores", "0"], "argument --cores: expected a positive integer"),
])
def test_usage_errors(data, capsys, argv, msg):
    with pytest.raises(SystemExit) as e:
        main(["pipeline", argv[0], data, *argv[1:]])
    assert e.value.code == 64
    err = capsys.readouterr().err
    assert err.startswith("usage: tfpipe pipeline " + argv[0]) and msg in err


def test_explain_missing_manifest(tmp_path, capsys):
    assert main(["pipeline", "explain", str(tmp_path), "--batch-size", "8"]) != 0
    assert "no manifest" in capsys.readouterr().err


SCRIPT = '''
import tensorflow as tf
from pipeline.build import feature_spec
from pipeline import PipelineSpec, build_dataset

DATA = {data!r}

def bad():
    spec = PipelineSpec.from_manifest(DATA, 8)
    fs = feature_spec(spec.schema)
    return tf.data.TFRecordDataset(list(spec.files)).map(lambda x: tf.io.parse_single_example(x, fs)).batch(8)

def good():
    return build_dataset(PipelineSpec.from_manifest(DATA, 8))

def not_a_dataset():
    return 3
'''


@pytest.fixture(scope="module")
def script(data, tmp_path_factory):
    p = tmp_path_factory.mktemp("script") / "train.py"
    p.write_text(SCRIPT.format(data=data))
    return str(p)


@pytest.mark.parametrize("func,code,needles", [
    ("bad", 1, ["map-before-batch:", "no-prefetch:"]),
    ("good", 0, ["no findings"]),
])
def test_lint(script, capsys, func, code, needles):
    assert main(["pipeline", "lint", f"{script}:{func}"]) == code
    out = capsys.readouterr().out
    for n in needles:
        assert n in out


@pytest.mark.parametrize("target,msg", [
    ("nope.py:f", "no such file"),
    ("{script}:missing", "no function 'missing'"),
    ("{script}", "script.py:function"),
    ("{script}:not_a_dataset", "not a tf.data.Dataset"),
])
def test_lint_errors(script, capsys, target, msg):
    assert main(["pipeline", "lint", target.format(script=script)]) != 0
    err = capsys.readouterr().err
    assert err.startswith("tfpipe: error:") and msg in err and err.count("\n") == 1
