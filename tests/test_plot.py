"""bench.plot: a valid PNG of where the time goes."""
from __future__ import annotations

import struct

import pytest

from bench.measure import Percentiles, Report
from bench.plot import plot_reports


def _report(name, wait, compute):
    return Report(steps=2, warmup=0, input_wait_pct=100 * wait / (wait + compute), batches_per_s=1.0,
                  records_per_s=1.0, records=2, wall_s=1.0, step_ms=Percentiles.of([wait + compute]),
                  wait_ms=Percentiles.of([wait]), compute_ms=Percentiles.of([compute]), name=name)


def test_png_written_and_valid(tmp_path):
    out = tmp_path / "where.png"
    got = plot_reports([_report("naive", 30, 20), _report("vectorized", 0.5, 20)], out, title="t")
    assert got == str(out)
    data = out.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    assert data[12:16] == b"IHDR"
    width, height = struct.unpack(">II", data[16:24])
    assert width >= 400 and height >= 300
    assert data.endswith(b"IEND\xaeB`\x82")
    assert [p.name for p in tmp_path.iterdir()] == ["where.png"]  # no temp file left behind


def test_many_variants_and_empty(tmp_path):
    reports = [_report(f"variant-{i}", i, 10) for i in range(8)]
    plot_reports(reports, tmp_path / "many.png")
    assert (tmp_path / "many.png").stat().st_size > 1000
    with pytest.raises(ValueError, match="at least one"):
        plot_reports([], tmp_path / "none.png")
