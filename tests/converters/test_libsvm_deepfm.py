"""Positional LibSVM against the DeepFM sample's own records: a ``val.tfrecords`` laid out as the sample's
``tools/libsvm_to_tfrecord.py`` writes it (10,000 ``tf.train.Example`` with ``label`` float32 [], ``ids`` int64
[39], ``values`` float32 [39]; one-based ids as written, ~0.2 % rows repeating id 13), written back as LibSVM
lines and converted with ``--field-size 39`` alone, parses to exactly the sample's tensors."""
from __future__ import annotations

import numpy as np
import pytest

tf = pytest.importorskip("tensorflow")

from deepfm_sample import FEATURES, N, parse_all, sample_arrays, write_sample  # noqa: E402

from converters.cli import main  # noqa: E402
from converters.shardset.reader import read_manifest  # noqa: E402


def libsvm_lines(t: dict[str, np.ndarray]) -> bytes:
    """The parsed records as LibSVM lines, every number in the shortest decimal that reads back to the same
    float32 (as short as the sample's own text; the test checks the round trip bit for bit)."""
    def num(v) -> str:
        return np.format_float_positional(np.float32(v), unique=True, trim="-")

    rows = (" ".join([num(t["label"][i])] + [f"{d}:{num(v)}" for d, v in zip(t["ids"][i], t["values"][i])])
            for i in range(t["label"].shape[0]))
    return ("\n".join(rows) + "\n").encode()


def test_sample_records_convert_back_to_the_same_tensors(tmp_path, capsys):
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
    capsys.readouterr()
    assert main(["inspect", str(out)]) == 0
    shown = capsys.readouterr().out
    assert "note    20 x ids_unordered" in shown and "positional (line order, repeats kept), as written" in shown
    rows = np.flatnonzero((np.diff(got["ids"], axis=1) <= 0).any(axis=1))
    assert rows.tolist() == a["repeat"].tolist() and (got["ids"][rows, 12:14] == 13).all()
