"""converters.prep.writer end to end, through the converters and reshard: a label-sorted input shuffled
globally (every shard mixed, rank correlation ~0, the same records, the same bytes for any worker count),
exact balancing, per-label shard sets (a group manifest that inspect/verify/upload/download/reshard read), the
refusals, and bounded memory."""
from __future__ import annotations

import collections
import json
import os
import re
import subprocess
import sys
import time

import numpy as np
import pytest
from notices import without_compile_notices

from converters.cli import main
from converters.libsvm.convert import convert_libsvm
from converters.prep.balance import BalanceOptions
from converters.prep.options import PrepOptions
from converters.prep.shuffle import WriteShuffleOptions
from converters.shardset.reader import read_manifest
from converters.shardset.verify import verify
from converters.tfrecord.reader import read_records

ZEROS, ONES = 60_000, 20_000


def sorted_lines(zeros: int, ones: int) -> bytes:
    """Label-sorted LibSVM: ``zeros`` lines of label 0, then ``ones`` of label 1; every line is unique."""
    rng = np.random.default_rng(0)
    vals = rng.integers(1, 1_000_000, size=(zeros + ones, 2))
    return b"".join(b"%d 1:%d 2:%d\n" % (int(i >= zeros), a, b) for i, (a, b) in enumerate(vals))


@pytest.fixture(scope="module")
def sorted_input(tmp_path_factory):
    p = tmp_path_factory.mktemp("prep") / "sorted.libsvm"
    p.write_bytes(sorted_lines(ZEROS, ONES))
    return p


def labels_of_shards(m) -> list[np.ndarray]:
    """Each shard's labels in order (decoded from the Example bytes: the label is the only float scalar)."""
    import tensorflow as tf

    spec = {"label": tf.io.FixedLenFeature([], tf.float32)}
    out = []
    for path in m.shard_paths():
        recs = list(read_records(path))
        out.append(tf.io.parse_example(tf.constant(recs), spec)["label"].numpy())
    return out


def records_of(m) -> list[bytes]:
    return [r for path in m.shard_paths() for r in read_records(path)]


def dir_bytes(path) -> dict:
    return {n: (path / n).read_bytes() for n in sorted(os.listdir(path)) if (path / n).is_file()}


def shuffled(seed: int):
    return PrepOptions(shuffle=WriteShuffleOptions(seed=seed, memory=8 << 20))


def test_shuffle_mixes_a_label_sorted_input(sorted_input, tmp_path):
    opts = dict(field_size=2, shard_size=200_000)
    plain = convert_libsvm(sorted_input, tmp_path / "plain", workers=1, **opts)
    m = convert_libsvm(sorted_input, tmp_path / "w1", workers=1, prep=shuffled(7), **opts)
    m2 = convert_libsvm(sorted_input, tmp_path / "w2", workers=2, prep=shuffled(7), **opts)
    assert dir_bytes(tmp_path / "w1") == dir_bytes(tmp_path / "w2")         # any worker count, same bytes
    shares = [(len(lab), lab.mean()) for lab in labels_of_shards(m)]
    assert len(shares) >= 4 and all(abs(share - 0.25) <= 0.03 for n, share in shares if n >= 2000), shares
    assert abs(m.extra["shuffle"]["rank_correlation"]) < 0.02
    assert m.extra["shuffle"]["label_mix_max_deviation"] <= 0.03 and m.options["shuffle"] == {
        "seed": 7, "method": "external-bucket-sort-by-keyed-hash"}
    assert collections.Counter(records_of(m)) == collections.Counter(records_of(plain))   # same multiset
    assert records_of(m) != records_of(plain)
    assert [len(lab) for lab in labels_of_shards(plain)] and max(lab.mean() for lab in labels_of_shards(plain)) == 1
    m8 = convert_libsvm(sorted_input, tmp_path / "s8", workers=1, prep=shuffled(8), **opts)
    assert records_of(m8) != records_of(m) and sorted(records_of(m8)) == sorted(records_of(m))
    assert m.inputs == m2.inputs == plain.inputs and verify(str(tmp_path / "w1")).ok
    assert not [n for n in os.listdir(tmp_path / "w1") if n.startswith(".tfpipe-tmp")]   # temporary files gone


def test_balance_equal_keeps_exactly_the_minimum_of_each_label(sorted_input, tmp_path):
    prep = PrepOptions(balance=BalanceOptions("equal", seed=3))
    m = convert_libsvm(sorted_input, tmp_path / "a", field_size=2, workers=2, prep=prep)
    convert_libsvm(sorted_input, tmp_path / "b", field_size=2, workers=1, prep=prep)
    assert dir_bytes(tmp_path / "a") == dir_bytes(tmp_path / "b")           # rerun, other workers: same bytes
    labels = np.concatenate(labels_of_shards(m))
    assert (labels == 0).sum() == ONES and (labels == 1).sum() == ONES
    recs = records_of(m)
    assert len(set(recs)) == len(recs)                                      # nothing duplicated
    whole = set(records_of(convert_libsvm(sorted_input, tmp_path / "all", field_size=2, workers=1)))
    assert set(recs) <= whole                                               # nothing altered
    st = m.inputs[0]
    assert st.records_read == ZEROS + ONES == st.records_written + st.records_skipped
    assert st.skipped == {"sampled_out": ZEROS - ONES}
    assert m.extra["balance"]["sampled_out"] == {"0": ZEROS - ONES}
    assert m.extra["balance"]["counts_out"] == {"0": ONES, "1": ONES}
    other = convert_libsvm(sorted_input, tmp_path / "c", field_size=2, workers=1,
                           prep=PrepOptions(balance=BalanceOptions("equal", seed=4)))
    assert set(records_of(other)) != set(recs)                              # another seed, another sample


def test_balance_then_shuffle_then_split(sorted_input, tmp_path):
    prep = PrepOptions(shuffle=WriteShuffleOptions(seed=1, memory=8 << 20),
                       balance=BalanceOptions.parse("0=0.5", seed=1), split_by_label=True)
    m = convert_libsvm(sorted_input, tmp_path / "g", field_size=2, workers=2, prep=prep)
    assert [(p.path, p.records) for p in m.parts] == [("label=0", ZEROS // 2), ("label=1", ONES)]
    assert m.inputs[0].skipped == {"sampled_out": ZEROS // 2}


def test_split_by_label_group_reads_as_one_set(sorted_input, tmp_path, capsys):
    out = tmp_path / "split"
    assert main(["convert", "libsvm", str(sorted_input), "--out", str(out), "--field-size", "2",
                 "--split-by-label", "--shard-size", "300000"]) == 0
    assert sorted(os.listdir(out)) == ["index.json", "label=0", "label=1"]
    parts = {p: read_manifest(out / p) for p in ("label=0", "label=1")}
    assert parts["label=0"].records == ZEROS and parts["label=1"].records == ONES
    assert all(set(np.concatenate(labels_of_shards(m))) == {float(p[-1])} for p, m in parts.items())
    group = read_manifest(out)
    assert group.records == ZEROS + ONES and [p.path for p in group.parts] == ["label=0", "label=1"]
    assert all(s.name.startswith(("label=0/", "label=1/")) for s in group.shards)
    assert json.loads((out / "index.json").read_text())["kind"] == "group"
    capsys.readouterr()
    assert main(["verify", str(out), "--no-progress"]) == 0 and "80,000 records" in capsys.readouterr().out
    assert main(["inspect", str(out)]) == 0 and "part label=1: 20,000 records" in capsys.readouterr().out
    # a part manifest that does not match the group is damage, named
    (out / "label=1" / "index.json").write_bytes((out / "label=1" / "index.json").read_bytes() + b" ")
    assert main(["verify", str(out)]) != 0 and "label=1/index.json differs" in capsys.readouterr().err


def test_group_overwrite_reshard_and_foreign_files(sorted_input, tmp_path, capsys):
    out = tmp_path / "g"
    argv = ["convert", "libsvm", str(sorted_input), "--out", str(out), "--field-size", "2", "--split-by-label"]
    assert main(argv) == 0
    assert main(argv) == 3                                                   # not empty: refused
    assert main(argv + ["--overwrite"]) == 0 and verify(str(out)).ok         # a group replaces a group
    assert main(["reshard", str(out), "--out", str(tmp_path / "r"), "--num-shards", "3"]) == 0
    r = read_manifest(tmp_path / "r")
    assert r.records == ZEROS + ONES and len(r.shards) == 3 and not r.parts
    (out / "label=0" / "notes.txt").write_text("mine")
    capsys.readouterr()
    assert main(argv + ["--overwrite"]) == 3 and "label=0/notes.txt" in capsys.readouterr().err
    assert (out / "label=0" / "notes.txt").exists()


def test_reshard_shuffle_mixes_a_label_sorted_set(sorted_input, tmp_path, capsys):
    convert_libsvm(sorted_input, tmp_path / "src", field_size=2, workers=1)
    assert main(["reshard", str(tmp_path / "src"), "--out", str(tmp_path / "r"), "--num-shards", "8",
                 "--shuffle", "--seed", "5"]) == 0
    assert "rank correlation" in capsys.readouterr().out
    m = read_manifest(tmp_path / "r")
    labels = labels_of_shards(m)
    assert len(labels) == 8 and max(len(x) for x in labels) - min(len(x) for x in labels) <= 1
    assert all(abs(x.mean() - 0.25) <= 0.03 for x in labels)
    assert abs(m.extra["shuffle"]["rank_correlation"]) < 0.02 and m.options["reshard"]["shuffle"]["seed"] == 5


@pytest.mark.parametrize("argv, message", [
    (["--shuffle"], "--shuffle needs --seed"),
    (["--balance", "equal"], "--balance needs --seed"),
    (["--balance", "0=2", "--seed", "1"], "in \\[0, 1\\]"),
    (["--shuffle-memory", "64MiB"], "apply to --shuffle"),
    (["--balance", "7=0.5", "--seed", "1"], "label\\(s\\) 7, which the input does not have"),
])
def test_refusals_are_one_line(sorted_input, tmp_path, capsys, argv, message):
    code = main(["convert", "libsvm", str(sorted_input), "--out", str(tmp_path / "o"), "--field-size", "2", *argv])
    err = capsys.readouterr().err
    assert code != 0 and re.search(message, err) and without_compile_notices(err).count("\n") == 1, err
    assert not (tmp_path / "o" / "index.json").exists()


def test_text_windows_shuffle_and_refuse_labels(tmp_path, capsys):
    from converters.text.convert import convert_text
    from converters.text.synthetic import write_pile_jsonl

    src = write_pile_jsonl(tmp_path / "d.jsonl", 40, seed=1)
    plain = convert_text(src, str(tmp_path / "p"), seq_len=63, workers=1)
    m = convert_text(src, str(tmp_path / "s"), seq_len=63, workers=2, prep=shuffled(3))
    assert sorted(records_of(m)) == sorted(records_of(plain)) and records_of(m) != records_of(plain)
    with pytest.raises(SystemExit) as e:                                    # no such option for text
        main(["convert", "text", src, "--out", str(tmp_path / "x"), "--seq-len", "63", "--split-by-label"])
    assert e.value.code == 64 and "unrecognized arguments: --split-by-label" in capsys.readouterr().err
    with pytest.raises(ValueError, match="text windows have none"):
        convert_text(src, str(tmp_path / "y"), seq_len=63, prep=PrepOptions(split_by_label=True))


def test_shuffle_memory_is_bounded(tmp_path):
    """1.2M lines shuffled with --shuffle-memory 64MiB: the peak RSS of the whole process tree (the converter
    and its workers) stays below 600 MiB."""
    src = tmp_path / "big.libsvm"
    rng = np.random.default_rng(1)
    with open(src, "wb") as f:
        for start in range(0, 1_200_000, 200_000):
            v = rng.integers(1, 1 << 40, size=(200_000, 3))
            f.write(b"".join(b"%d 1:%d 2:%d 3:%d\n" % (i % 2, a, b, c) for i, (a, b, c) in enumerate(v)))
    import psutil

    argv = ["-v", "convert", "libsvm", str(src), "--out", str(tmp_path / "o"), "--field-size", "3", "--shuffle",
            "--seed", "2", "--shuffle-memory", "64MiB", "--workers", "2", "--no-progress"]
    log = open(tmp_path / "log", "w+")
    proc = subprocess.Popen([sys.executable, "-m", "converters.cli", *argv], stdout=subprocess.DEVNULL,
                            stderr=log, text=True)
    tree, peak = psutil.Process(proc.pid), 0
    while proc.poll() is None:                       # the tree's RSS, sampled from outside every 20 ms
        try:
            peak = max(peak, tree.memory_info().rss + sum(c.memory_info().rss for c in tree.children(True)))
        except psutil.Error:
            pass
        time.sleep(0.02)
    code = proc.wait(timeout=600)
    log.seek(0)
    text = log.read()
    assert code == 0, text
    assert peak < 600 << 20, f"peak RSS {peak >> 20} MiB"
    m = read_manifest(tmp_path / "o")
    assert m.records == 1_200_000 and abs(m.extra["shuffle"]["rank_correlation"]) < 0.01
    buckets, largest = map(int, re.search(r"sorted in (\d+) bucket\(s\), the largest (\d+) bytes", text).groups())
    assert buckets > 1 and largest <= (64 << 20) // 3                       # sorted one share at a time
