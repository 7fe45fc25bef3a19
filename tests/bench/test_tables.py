"""bench.report.tables: the one mark on tfpipe's default row, in ``format_table`` and for the commands' own
tables (``mark_default``)."""
from __future__ import annotations

import pytest

from bench.core.measure import Report
from bench.report.tables import DEFAULT_MARK, format_table, mark_default


def test_mark_default():
    assert mark_default("  local  12 rec/s") == f"  local  12 rec/s  {DEFAULT_MARK}"
    assert mark_default("row", "no service=") == f"row  {DEFAULT_MARK} (no service=)"


def _report(name: str) -> Report:
    from bench.core.measure import Percentiles

    p = Percentiles.of([1.0, 2.0, 3.0])
    return Report(steps=3, warmup=1, input_wait_pct=10.0, batches_per_s=100.0, records_per_s=800.0, records=24,
                  wall_s=0.03, step_ms=p, wait_ms=p, compute_ms=p, name=name)


@pytest.mark.parametrize("default, marked", [("vectorized", ["vectorized"]), (None, []), ("absent", [])])
def test_format_table_marks_the_default_row_only(default, marked):
    reports = [_report("vectorized"), _report("no_prefetch")]
    text = format_table(reports, default=default, default_what="build_dataset's defaults")
    rows = text.splitlines()[2:]
    assert [r.split()[0] for r in rows if DEFAULT_MARK in r] == marked
    if marked:
        assert rows[0].endswith(f"{DEFAULT_MARK} (build_dataset's defaults)")
