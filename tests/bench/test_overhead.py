"""bench overhead: smoke run only (the < 2 % claim is a benchmark, `tfpipe bench overhead`)."""
from __future__ import annotations

import re

from bench.commands.overhead import overhead
from converters.cli import main


def test_overhead_smoke():
    res = overhead(step_ms=2.0, steps=10, rounds=2)
    assert len(res["bare_s"]) == len(res["measured_s"]) == 2
    assert all(s >= 10 * 0.002 for s in res["bare_s"] + res["measured_s"])
    assert 0.5 < res["ratio"] < 2.0


def test_overhead_cli_prints_metric(capsys):
    assert main(["bench", "overhead", "--step-ms", "1", "--steps", "5", "--repeats", "1"]) == 0
    out = capsys.readouterr().out
    assert re.search(r"tfpipe: measure_overhead_pct=(-?[0-9.]+);", out)
