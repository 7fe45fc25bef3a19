"""bench.report.plot: a valid PNG of where the time goes."""
from __future__ import annotations

import struct

import pytest

from bench.core.measure import Percentiles, Report
from bench.report.plot import plot_reports


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


def _overlaps(fig, ax):
    """Pairs (legend, label or bar) whose drawn boxes overlap."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg

    FigureCanvasAgg(fig).draw()
    renderer = fig.canvas.get_renderer()
    legend = ax.get_legend().get_window_extent(renderer)
    others = [t for t in ax.texts] + [p for p in ax.patches]
    return [o for o in others if legend.overlaps(o.get_window_extent(renderer))]


@pytest.mark.parametrize("n", [2, 5, 11])
@pytest.mark.parametrize("shape", ["equal", "rising"])
def test_legend_never_covers_bars_or_their_labels(n, shape):
    from bench.report.plot import _pipeline_figure, _reports_figure

    # "equal": every variant keeps up with the step, so every label sits just under the top of the axes
    reports = [_report(f"variant-{i}", (0.5 + 0.01 * i) if shape == "equal" else 1 + 3 * i, 20) for i in range(n)]
    fig = _reports_figure(reports)
    assert _overlaps(fig, fig.axes[0]) == []
    fig = _pipeline_figure(reports, {r.name: 1000.0 * (i + 1) for i, r in enumerate(reports)})
    assert len(fig.axes) == 2
    for ax in fig.axes:
        assert _overlaps(fig, ax) == []


def test_two_panel_png(tmp_path):
    from bench.report.plot import plot_pipeline

    reports = [_report("naive", 30, 20), _report("vectorized", 0.5, 20)]
    out = plot_pipeline(reports, {"naive": 23_000.0, "vectorized": 450_000.0}, tmp_path / "two.png", title="t")
    data = (tmp_path / "two.png").read_bytes()
    assert out == str(tmp_path / "two.png") and data[:8] == b"\x89PNG\r\n\x1a\n"
    width, height = struct.unpack(">II", data[16:24])
    assert width > height >= 400
    assert [p.name for p in tmp_path.iterdir()] == ["two.png"]
    plot_pipeline([], {"naive": 1.0}, tmp_path / "left-only.png")
    with pytest.raises(ValueError, match="reports or throughput"):
        plot_pipeline([], {}, tmp_path / "none.png")


def test_throughput_panel_marks_naive_and_best():
    from bench.report.plot import COLORS, _pipeline_figure

    fig = _pipeline_figure([], {"naive": 20_000.0, "vectorized": 400_000.0, "other": 300_000.0})
    ax = fig.axes[0]
    labels = [t.get_text() for t in ax.texts]
    assert labels[0].startswith("20k (1.0× naive)") and labels[1].endswith("best") and "best" not in labels[2]
    from matplotlib.colors import to_hex

    colors = [to_hex(p.get_facecolor()) for p in ax.patches]
    assert colors[0] == COLORS["naive"].lower() and colors[1] == COLORS["best"].lower()


def _texts(fig):
    return [t.get_text() for ax in fig.axes for t in ax.texts]


def test_default_is_marked_in_both_panels():
    from bench.report.plot import _pipeline_figure

    reports = [_report("naive", 30, 20), _report("vectorized", 0.5, 20)]
    fig = _pipeline_figure(reports, {"naive": 20_000.0, "vectorized": 400_000.0})
    left, right = fig.axes
    for labels in (left.get_yticklabels(), right.get_xticklabels()):
        marked = [t for t in labels if "default ← you" in t.get_text()]
        assert [t.get_text() for t in marked] == ["vectorized (default ← you)"]
        assert marked[0].get_fontweight() == "bold"


def test_pipe_mode_is_never_the_green_best():
    from matplotlib.colors import to_hex

    from bench.report.plot import COLORS, _pipeline_figure

    tput = {"naive": 20_000.0, "vectorized": 400_000.0, "parallel_reads_autotune": 420_000.0, "pipe": 900_000.0}
    fig = _pipeline_figure([], tput)
    ax = fig.axes[0]
    colors = dict(zip(tput, (to_hex(p.get_facecolor()) for p in ax.patches)))
    assert colors["pipe"] == COLORS["other_mode"].lower() and colors["parallel_reads_autotune"] == COLORS["best"].lower()
    labels = dict(zip(tput, _texts(fig)))
    assert "other input mode" in labels["pipe"] and "best" not in labels["pipe"]
    assert labels["parallel_reads_autotune"].endswith("best File mode")
    legend = [t.get_text() for t in ax.get_legend().get_texts()]
    assert "Pipe mode (another input mode)" in legend


@pytest.mark.parametrize("tput,hand,want", [
    ({"naive": 20_000.0, "vectorized": 400_000.0, "parallel_reads_autotune": 420_000.0}, None,
     "reads 0.95× the best File-mode graph (parallel_reads_autotune), 20.0× naive: keep it"),
    ({"naive": 20_000.0, "vectorized": 300_000.0, "parallel_reads_autotune": 420_000.0, "cache_after_parse": 9e5},
     ["parallel_reads_autotune"], "reads 0.71× the best hand-tuned graph (parallel_reads_autotune), 15.0× naive: "
                                  "try `tfpipe pipeline tune`"),
    ({"naive": 20_000.0, "vectorized": 500_000.0, "pipe": 900_000.0}, None,
     "the default you get is faster than every File-mode graph here, 25.0× naive: keep it"),
])
def test_takeaway_line_says_what_to_do(tput, hand, want):
    from bench.report.plot import _pipeline_figure, takeaway

    line = takeaway(tput, [_report("vectorized", 0.5, 20)], hand)
    assert line.startswith("Takeaway: ") and want in line
    assert line.endswith("against the step it is not input-bound (2% idle).")
    fig = _pipeline_figure([_report("vectorized", 0.5, 20)], tput, "title", hand_tuned=hand)
    assert fig._suptitle.get_text() == "title\n" + line  # one line under the title


def test_every_variant_is_explained_and_verdicts_are_whole():
    from bench.report.plot import VARIANT_NOTES, _pipeline_figure
    from bench.core.variants import VARIANTS

    assert set(VARIANT_NOTES) == set(VARIANTS)
    reports = [_report(n, 1 + 3 * i, 20) for i, n in enumerate(VARIANTS)]
    fig = _pipeline_figure(reports, {n: 1000.0 * (i + 1) for i, n in enumerate(VARIANTS)})
    notes = fig._supxlabel.get_text().splitlines()
    assert [ln.split(":")[0] for ln in notes] == list(VARIANTS)
    verdicts = [t.get_text() for t in fig.axes[1].texts]
    assert len(verdicts) == len(VARIANTS)
    assert all(v.replace("\n", " ").endswith("input-bound") for v in verdicts), verdicts
