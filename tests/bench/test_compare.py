"""bench.core.compare and bench.report.tables: variants against one step in one process, cost view, table and JSON."""
from __future__ import annotations

import json
import time

import pytest

from bench.core.compare import compare, idle_cost
from bench.core.measure import Percentiles, Report
from bench.core.steps import simulated_step
from bench.report.tables import format_table, reports_to_json


def slow_source(d_ms, batch=8):
    def gen():
        i = 0
        while True:
            time.sleep(d_ms / 1e3)
            yield [i] * batch
            i += 1
    return gen()


def fast_source(batch=8):
    while True:
        yield [0] * batch


def test_compare_ranks_variants_against_the_same_step():
    variants = {"slow": lambda: slow_source(40), "fast": fast_source}
    reports = compare(variants, simulated_step(10, device="host"), steps=10, warmup=1, price_per_hour=3.0,
                      records_per_epoch=80_000)
    assert [r.name for r in reports] == ["slow", "fast"]
    slow, fast = reports
    assert slow.verdict == "highly input-bound" and slow.input_wait_pct > 60
    assert fast.verdict == "not input-bound"
    ex = dict(slow.extra)
    assert ex["idle_dollars_per_hour"] == pytest.approx(slow.idle_fraction * 3.0)
    assert ex["idle_gpu_hours_per_epoch"] == pytest.approx(80_000 / slow.records_per_s / 3600 * slow.idle_fraction)
    assert ex["idle_dollars_per_epoch"] == pytest.approx(ex["idle_gpu_hours_per_epoch"] * 3.0)

    table = format_table(reports)
    lines = table.splitlines()
    assert len(lines) == 4 and "input wait %" in lines[0] and "idle $/epoch" in lines[0]
    assert lines[2].startswith("slow") and "highly input-bound" in lines[2]
    doc = json.loads(reports_to_json(reports, meta={"step_ms": 10}))
    assert doc["meta"] == {"step_ms": 10}
    assert [v["name"] for v in doc["variants"]] == ["slow", "fast"]
    assert doc["variants"][0]["extra"]["idle_dollars_per_epoch"] == pytest.approx(ex["idle_dollars_per_epoch"],
                                                                                  rel=1e-6)


def _report(pct, rps=1000.0):
    p = Percentiles.of([10.0])
    return Report(steps=1, warmup=0, input_wait_pct=pct, batches_per_s=1.0, records_per_s=rps, records=1,
                  wall_s=1.0, step_ms=p, wait_ms=p, compute_ms=p, name="v")


@pytest.mark.parametrize("pct, price, records, want", [
    (50.0, None, None, {"idle_fraction": 0.5}),
    (50.0, 4.0, None, {"idle_fraction": 0.5, "idle_dollars_per_hour": 2.0}),
    (25.0, None, 3_600_000, {"idle_fraction": 0.25, "epoch_hours": 1.0, "idle_gpu_hours_per_epoch": 0.25}),
    (25.0, 8.0, 3_600_000, {"idle_fraction": 0.25, "epoch_hours": 1.0, "idle_gpu_hours_per_epoch": 0.25,
                            "idle_dollars_per_hour": 2.0, "idle_dollars_per_epoch": 2.0, "dollars_per_epoch": 8.0}),
])
def test_idle_cost_table(pct, price, records, want):
    got = idle_cost(_report(pct), price_per_hour=price, records_per_epoch=records)
    assert got == pytest.approx(want)


@pytest.mark.parametrize("kw, match", [
    ({"price_per_hour": -1.0}, "price_per_hour"), ({"records_per_epoch": -1}, "records_per_epoch")])
def test_idle_cost_validates(kw, match):
    with pytest.raises(ValueError, match=match):
        idle_cost(_report(10.0), **kw)


def test_compare_validates():
    with pytest.raises(ValueError, match="at least one"):
        compare({}, lambda b: None)
    with pytest.raises(ValueError, match="factory"):
        compare({"x": [1, 2, 3]}, lambda b: None)


def test_table_extra_columns():
    t = format_table([_report(1.0)], extra_columns={"no-step rec/s": {"v": "123,456"}})
    head, _, row = t.splitlines()
    assert head.index("no-step rec/s") < head.index("records/s")
    assert "123,456" in row and "not input-bound" in row
