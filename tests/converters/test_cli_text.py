"""``tfpipe convert text`` and ``tfpipe tokenizer train``: argv -> exit code and message."""
import json
import os
import subprocess
import sys

import pytest

from converters.cli import main
from converters.shardset.reader import read_manifest
from converters.text.synthetic import write_pile_jsonl
from converters.tfrecord.crc import masked_crc32c

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


@pytest.fixture
def files(tmp_path):
    write_pile_jsonl(tmp_path / "pile.jsonl.zst", 40, seed=5, mean_words=30)
    (tmp_path / "bad.jsonl").write_bytes(b'{"text": "ok"}\n{"text": 3}\n\n{oops\n{"text": ""}\n')
    (tmp_path / "doc.txt").write_text("one\ntwo\n\nthree\n")
    length = (4).to_bytes(8, "little")
    (tmp_path / "part.tfrecord").write_bytes(length + masked_crc32c(length).to_bytes(4, "little") + b"abcd"
                                             + masked_crc32c(b"abcd").to_bytes(4, "little"))
    (tmp_path / "taken").mkdir()
    (tmp_path / "taken" / "notes.txt").write_text("x")
    return tmp_path


CASES = [
    # argv, exit code, stdout has, stderr has
    (["{d}/pile.jsonl.zst", "--out", "{d}/o", "--seq-len", "64"], 0,
     ["converted 1 input(s): 40 documents read, 40 tokenized, 0 skipped", "tokenizer byte (vocab 257, EOD 256)",
      "windows of 65 ids in 1 shard(s)", "index.json"], []),
    (["{d}/pile.jsonl.zst", "--out", "{d}/o", "--seq-len", "64", "--shard-size", "4KiB", "--workers", "3",
      "--compression", "gzip", "--prefix", "part", "--no-progress"], 0, ["shard(s)"], []),
    (["{d}/pile.jsonl.zst", "--out", "{d}/o", "--seq-len", "64", "--include-subsets", "Pile-CC, ArXiv"], 0,
     ["subset_filtered"], []),
    (["{d}/bad.jsonl", "--out", "{d}/o", "--seq-len", "8"], 2, [],
     ["tfpipe: error: {d}/bad.jsonl:2: 'text' is a int, not a string (reason: text_not_string",
      "--on-error skip"]),
    (["{d}/bad.jsonl", "--out", "{d}/o", "--seq-len", "8", "--on-error", "skip"], 0,
     ["4 documents read, 1 tokenized, 3 skipped (empty_text 1, invalid_json 1, text_not_string 1)"],
     ["skipped 2 bad record(s): invalid_json 1, text_not_string 1", "{d}/bad.jsonl:2: text_not_string",
      "{d}/bad.jsonl:4: invalid_json"]),
    (["{d}/doc.txt", "--out", "{d}/o", "--seq-len", "4", "--no-cross-doc"], 0,
     ["2 documents read", "padding"], []),
    (["{d}/doc.txt", "--out", "{d}/o", "--seq-len", "4", "--txt-mode", "file", "--pad-last"], 0,
     ["1 documents read"], []),
    (["{d}/pile.jsonl.zst", "--out", "{d}/taken", "--seq-len", "8"], 3, [], ["is not empty", "--overwrite"]),
    (["{d}/pile.jsonl.zst", "--out", "{d}/o", "--seq-len", "8", "--tokenizer", "gpt9"], 1, [],
     ["unknown tokenizer 'gpt9'"]),
    (["{d}/missing.jsonl", "--out", "{d}/o", "--seq-len", "8"], 2, [], ["does not exist"]),
    (["{d}/part.tfrecord", "--out", "{d}/o", "--seq-len", "8", "--on-error", "skip"], 2, [],
     ["{d}/part.tfrecord is a TFRecord file", "`tfpipe index {d}/part.tfrecord`"]),
    (["{d}/taken/notes.txt", "--out", "{d}/o", "--seq-len", "8", "--eod-token", "x"], 2, [],
     ["applies to a tokenizer.json"]),
]


@pytest.mark.parametrize("argv, code, out_has, err_has", CASES)
def test_convert_argv_table(files, capsys, argv, code, out_has, err_has):
    d = str(files)
    rc = main(["convert", "text", *[a.format(d=d) for a in argv]])
    out, err = capsys.readouterr()
    assert rc == code, (out, err)
    for s in out_has:
        assert s.format(d=d) in out
    for s in err_has:
        assert s.format(d=d) in err
    if code:
        assert err.count("tfpipe: error:") == 1 and err.strip().count("\n") == 0
        assert not os.path.exists(os.path.join(d, "o", "index.json"))
    else:
        assert read_manifest(os.path.join(d, "o")).kind == "text"


@pytest.mark.parametrize("bad_args", [
    ["--seq-len", "0"], ["--seq-len", "x"], ["--shard-size", "1XB"], ["--workers", "-1"],
    ["--include-subsets", ","], ["--on-error", "ignore"], ["--mask-name", "m"],
])
def test_usage_errors_exit_64(files, capsys, bad_args):
    args = ["convert", "text", str(files / "pile.jsonl.zst"), "--out", str(files / "o"), "--seq-len", "8"]
    with pytest.raises(SystemExit) as ei:
        main(args + bad_args)
    assert ei.value.code == 64  # usage errors have their own exit code (bad input is 2)


def test_no_cross_doc_manifest_has_mask(files, capsys):
    assert main(["convert", "text", str(files / "doc.txt"), "--out", str(files / "o"), "--seq-len", "4",
                 "--no-cross-doc", "--mask-name", "attention_mask"]) == 0
    m = read_manifest(files / "o")
    assert sorted(f.name for f in m.schema.features) == ["attention_mask", "input_ids"]
    assert m.extra["mask"] == "attention_mask"


def test_tokenizer_train_then_convert(files, capsys):
    tok = files / "tok.json"
    assert main(["tokenizer", "train", str(files / "pile.jsonl.zst"), "--vocab-size", "400", "--out",
                 str(tok)]) == 0
    out = capsys.readouterr().out
    assert "trained byte-level BPE: vocab 400" in out and str(tok) in out
    assert json.loads(tok.read_text())["model"]["type"] == "BPE"
    # refuses to overwrite, unless asked
    assert main(["tokenizer", "train", str(files / "pile.jsonl.zst"), "--vocab-size", "400", "--out",
                 str(tok)]) == 3
    assert "exists" in capsys.readouterr().err
    assert main(["tokenizer", "train", str(files / "pile.jsonl.zst"), "--vocab-size", "300", "--out",
                 str(tok), "--overwrite", "--max-chars", "5000"]) == 0
    capsys.readouterr()
    assert main(["convert", "text", str(files / "pile.jsonl.zst"), "--out", str(files / "o"), "--seq-len", "32",
                 "--tokenizer", str(tok)]) == 0
    out = capsys.readouterr().out
    assert "tokenizer hf:tok.json (vocab 300" in out
    assert read_manifest(files / "o").extra["tokenizer"]["vocab_size"] == 300


def test_real_process_exit_code_and_one_line(files):
    r = subprocess.run([sys.executable, "-c", "from converters.cli import main; raise SystemExit(main())",
                        "convert", "text", str(files / "bad.jsonl"), "--out", str(files / "o"), "--seq-len", "8"],
                       capture_output=True, text=True, cwd=ROOT, timeout=120)
    assert r.returncode == 2
    assert r.stderr.strip().startswith("tfpipe: error: ") and "bad.jsonl:2:" in r.stderr
    assert "Traceback" not in r.stderr


def test_help_lists_commands(capsys):
    with pytest.raises(SystemExit):
        main(["tokenizer", "--help"])
    assert "train" in capsys.readouterr().out
    with pytest.raises(SystemExit):
        main(["convert", "text", "--help"])
    out = capsys.readouterr().out
    for opt in ("--seq-len", "--include-subsets", "--exclude-subsets", "--no-cross-doc", "--pad-last",
                "--tokenizer", "--on-error", "--overwrite", "--no-progress", "--text-key", "--workers"):
        assert opt in out
