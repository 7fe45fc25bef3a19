"""``tfpipe bench resume``: a tiny run times both graphs in paired rounds with the order alternating, reports the
median and range of the per-round ratios and the load, and cleans up (not the speed: the figures are in the docs)."""
from __future__ import annotations

import json

import pytest

from bench.commands.resume import GRAPHS, format_report, paired_rounds, run_benchmark
from converters.cli import main


def test_smoke_run(tmp_path):
    r = run_benchmark(records=3_000, shards=3, batch_size=64, shuffle_buffer=200, rounds=2, workdir=str(tmp_path))
    assert r["benchmark"] == "resume" and r["rounds"] == 2 and len(r["cpu_ratios"]) == 2
    assert r["cpu_ratio_min"] <= r["cpu_ratio"] <= r["cpu_ratio_max"]
    assert all(r[f"{g}_rec_per_cpu_s"] > 0 and r[f"{g}_rec_s"] > 0 for g in GRAPHS)
    assert 0 < r["records"] < 3_000 and r["load_min"] <= r["load_max"] and r["shuffle_buffer"] == 200
    text = format_report(r)
    assert "per CPU-second" in text and "median of 2 paired rounds" in text and "the bar >= 0.95x" in text
    marked = [line for line in text.splitlines() if "<- tfpipe's default" in line]   # a seeded spec's graph
    assert len(marked) == 1 and marked[0].lstrip().startswith("resumable")
    assert list(tmp_path.iterdir()) == []


def test_rounds_alternate_which_graph_goes_first(tmp_path, monkeypatch):
    import bench.commands.resume as mod

    orders = []
    monkeypatch.setattr(mod, "_round", lambda path, order, **sizes: orders.append(tuple(order)) or {
        g: {"records": 640, "records_per_cpu_s": 2.0 if g == "resumable" else 1.0, "records_per_s": 1.0}
        for g in GRAPHS})
    r = paired_rounds(str(tmp_path), rounds=3)
    assert orders == [GRAPHS, GRAPHS[::-1], GRAPHS]
    assert r["cpu_ratio"] == 2.0 and r["wall_ratio"] == 1.0


def test_no_rounds_is_refused(tmp_path):
    with pytest.raises(ValueError, match="rounds must be >= 1, got 0"):
        paired_rounds(str(tmp_path), rounds=0)


def test_cli_json_beside_a_busy_loop_as_rank_0_of_2(capsys):
    assert main(["bench", "resume", "--records", "3000", "--shards", "3", "--batch-size", "64",
                 "--shuffle-buffer", "200", "--repeats", "1", "--busy", "1", "--ranks", "2", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["benchmark"] == "resume" and out["busy_loops"] == 1 and out["ranks"] == 2 and out["cpu_ratio"] > 0
