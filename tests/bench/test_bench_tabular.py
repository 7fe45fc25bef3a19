"""``tfpipe bench tabular`` smoke run: both converters on the same tiny table, every pass timed, the peak
memory of two fresh conversions, and the report's lines."""
from __future__ import annotations

import numpy as np

from bench.commands.tabular import _peak, format_report, run_benchmark, write_rows
from converters.cli.main import main


def test_smoke_run_reports_every_pass_the_ratio_and_the_memory_growth(tmp_path):
    r = run_benchmark(rows=400, workdir=str(tmp_path), scaling=1, workers=2)
    assert r["rows"] == r["naive_rows"] == r["tfpipe"]["records"] == 400  # the per-line converter: the same rows
    assert list(r["tfpipe"]["passes"]) == ["count", "vocabulary", "encode", "plan", "shards", "commit"]
    assert r["ratio_cpu"] == round(r["tfpipe_rows_per_cpu_s"] / r["naive_rows_per_cpu_s"], 1)
    peak = r["peak_rss_mib"]
    assert peak["rows"] > 0 and abs(r["peak_growth"] - peak["rows_x4"] / peak["rows"]) < 0.01
    text = format_report(r)
    assert "(400 rows)" in text and "peak memory --memory 64MiB" in text and "x rows per CPU-second" in text
    c = r["scaling"]
    assert (c["files"], c["workers"], c["rounds"], c["processes"]) == (3, 2, 1, 1)  # 400 rows: work for one
    assert set(c["rows_per_s"]) == set(c["cpu_s"]) == {"1", "2"} and c["wall_ratio"] > 0
    assert "--workers 2 (1 process(es) for this input)" in text
    assert list(tmp_path.iterdir()) == []  # its work folder is removed


def test_cli_takes_fewer_rows_for_the_per_line_converter(capsys):
    assert main(["bench", "tabular", "--rows", "300", "--naive-rows", "100", "--no-memory", "--json"]) == 0
    out = capsys.readouterr().out
    assert '"naive_rows": 100' in out and "peak_rss_mib" not in out


def test_peak_memory_is_the_conversions_own_not_the_callers(tmp_path):
    ballast = np.ones(1 << 27)  # 1 GiB in this process: Linux carries ru_maxrss across fork and exec
    write_rows(str(tmp_path / "day"), 200)
    kib = _peak(str(tmp_path / "day"), str(tmp_path / "out"))
    assert 20 << 10 < kib < 900 << 10 and ballast.sum() == 1 << 27
