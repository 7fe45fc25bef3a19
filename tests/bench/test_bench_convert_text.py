"""Smoke run of ``tfpipe bench convert-text`` (tiny: checks it runs and reports, not the speed)."""
import json

import pytest

from bench.commands.convert_text import format_report, run_benchmark
from converters.cli import main


def test_smoke_run(tmp_path):
    r = run_benchmark(docs=60, vocab_size=400, threads=1, repeats=1, seq_len=64, mean_words=40,
                      workdir=str(tmp_path))
    assert r["documents"] == 60 and r["vocab_size"] == 400 and r["tokens"] > 0
    assert r["tokenizer"]["seconds"] > 0 and r["convert"]["seconds"] > 0
    conv, tok = r["convert"]["seconds"], r["tokenizer"]["seconds"]   # both rounded to 0.1 ms, the ratio to 0.001
    assert (conv - 5e-5) / (tok + 5e-5) - 5e-4 <= r["ratio"] <= (conv + 5e-5) / max(tok - 5e-5, 1e-9) + 5e-4
    assert r["records"] > 0 and r["shards"] == 1
    text = format_report(r)
    assert "ratio:" in text and "tokenizer alone" in text and "convert_text end to end" in text
    assert list(tmp_path.iterdir()) == []  # cleans up after itself


def test_cli_json(capsys):
    assert main(["bench", "convert-text", "--docs", "40", "--vocab-size", "300", "--workers", "1",
                 "--repeats", "1", "--seq-len", "32", "--json"]) == 0
    r = json.loads(capsys.readouterr().out)
    assert r["benchmark"] == "convert-text" and r["documents"] == 40 and r["target_ratio"] == 1.5


@pytest.mark.parametrize("argv, match", [  # usage errors: exit 64
    (["--docs", "0"], "argument --docs: expected a positive integer"),
    (["--workers", "0"], "argument --workers: expected a positive integer"),
    (["--threads", "2"], "unrecognized arguments: --threads 2"),  # not the vocabulary's spelling: refused
])
def test_cli_rejects_bad_numbers(capsys, argv, match):
    with pytest.raises(SystemExit) as e:
        main(["bench", "convert-text", *argv])
    assert e.value.code == 64 and match in capsys.readouterr().err
