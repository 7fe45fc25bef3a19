"""`tfpipe bench tune`: the paired summary on synthetic rates, and a tiny smoke run (no timing asserted)."""
from __future__ import annotations

import json

import pytest

from bench.commands.tune import TUNED, UNTUNED, format_report, summarize
from converters.cli import main

HAND = ["h1", "h2"]


def test_summarize_pairs_rounds():
    slow = [1.0, 0.5, 2.0]                     # per-round machine speed
    rates = {UNTUNED: [90 * s for s in slow], TUNED: [99 * s for s in slow], "h1": [100 * s for s in slow],
             "h2": [80 * s for s in slow], "naive": [5 * s for s in slow]}
    out = summarize(rates, HAND)
    assert out["best_hand_tuned"] == "h1"
    assert out["figures"] == pytest.approx({"tuned_vs_best_hand_tuned": 0.99, "untuned_vs_best_hand_tuned": 0.9,
                                            "tuned_vs_naive": 19.8})
    assert out["met"] == {"tuned_vs_best_hand_tuned": True, "untuned_vs_best_hand_tuned": True,
                          "tuned_vs_naive": True}
    rates[TUNED] = [95 * s for s in slow]
    assert summarize(rates, HAND)["met"]["tuned_vs_best_hand_tuned"] is False
    out["meta"] = {"records": 10, "shards": 1, "batch_size": 2, "rounds": 3, "window_batches": 5, "cpu_count": 2,
                   "tuned_winner": "sequential", "tuned_vs_rule": 1.0}
    text = format_report(out)
    assert "(best hand-tuned)" in text and "tuned default vs best hand-tuned" in text
    assert "target ≥ 0.97x: met" in text


def test_table_is_ranked_by_the_paired_ratio_and_says_so():
    """The untuned default's runs fell in fast rounds: the highest median records/s, yet 0.95x the best
    hand-tuned graph round by round. The table ranks by the paired ratio and says so in one line."""
    slow = [1.0, 0.5, 2.0]
    rates = {UNTUNED: [120, 45, 190], TUNED: [99 * s for s in slow], "h1": [100 * s for s in slow],
             "h2": [80 * s for s in slow], "naive": [5 * s for s in slow]}
    out = summarize(rates, HAND)
    out["meta"] = {"records": 10, "shards": 1, "batch_size": 2, "rounds": 3, "window_batches": 5, "cpu_count": 2,
                   "tuned_winner": "sequential", "tuned_vs_rule": 1.0}
    text = format_report(out)
    assert "ranked by 'vs best hand-tuned': the median over paired rounds" in text
    order = [n for ln in text.splitlines() for n in rates if ln.startswith(n + " ")]
    assert order == ["h1", TUNED, UNTUNED, "h2", "naive"]
    # the untuned default's rounds: 1.2x, 0.9x, 0.95x the best hand-tuned graph; the lowest is shown
    assert "lowest paired round vs best hand-tuned: tuned default 0.99x, untuned default 0.90x" in text
    assert max(rates, key=lambda n: sorted(rates[n])[1]) == UNTUNED      # the unpaired median would put it first


@pytest.mark.parametrize("beside", ["none", "busy", "matmul"])    # tuned and timed beside busy loops, TF matmuls
def test_smoke(tmp_path, capsys, monkeypatch, beside):
    monkeypatch.setenv("TFPIPE_CACHE", str(tmp_path / "cache"))
    js = tmp_path / "out.json"
    rc = main(["bench", "tune", "--generate", "3000", "--batch-size", "128", "--repeats", "1", "--tune-seconds", "2",
               "--window-batches", "3", "--max-seconds", "0.5", "--json-out", str(js), "--beside", beside])
    assert rc == 0
    out = capsys.readouterr().out
    for needle in (UNTUNED, TUNED, "naive", "interleave_per_file_batched", "tuned default vs naive"):
        assert needle in out
    doc = json.loads(js.read_text())
    assert set(doc["figures"]) == {"tuned_vs_best_hand_tuned", "untuned_vs_best_hand_tuned", "tuned_vs_naive"}
    assert doc["meta"]["records"] == 3000 and doc["meta"]["stored"] is None and doc["meta"]["beside"] == beside
    assert ("beside: busy" in out) == (beside == "busy")
    assert not (tmp_path / "cache").exists()       # tuned into a private cache, removed afterwards


@pytest.mark.parametrize("argv,msg", [(["--repeats", "0"], "argument --repeats"), (["--rounds", "0"], "--rounds"),
                                      (["--window-batches", "0"], "window")])
def test_bad_arguments(capsys, argv, msg):
    with pytest.raises(SystemExit) as e:  # a usage error
        main(["bench", "tune", *argv])
    assert e.value.code == 64 and msg in capsys.readouterr().err
