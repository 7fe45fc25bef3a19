"""Where the time goes: PNG charts of a pipeline benchmark.

``plot_reports``: one stacked bar per variant (mean compute vs mean input wait per step).
``plot_pipeline``: two panels — left, each variant's throughput with no step (records/s, naive and best
marked); right, the per-step wait/compute split against the simulated step.

Legends sit above the plotting area, never over the bars or their labels. Matplotlib is imported lazily
with the non-interactive Agg backend; files are written to a temporary name, then renamed.
"""
from __future__ import annotations

import os
from typing import Mapping, Sequence

from .measure import Report

__all__ = ["plot_reports", "plot_pipeline", "COLORS"]

COLORS = {"compute": "#4C72B0", "wait": "#DD4444", "other": "#BBBBBB", "throughput": "#8FA9C9",
          "naive": "#DD8844", "best": "#2E8B57"}


def _figure(width: float, height: float, panels: int = 1):
    import matplotlib

    matplotlib.use("Agg", force=True)
    from matplotlib.figure import Figure

    fig = Figure(figsize=(width, height), dpi=100, layout="constrained")
    return fig, [fig.add_subplot(1, panels, i + 1) for i in range(panels)]


def _save(fig, path: str | os.PathLike) -> str:
    path = os.fspath(path)
    tmp = f"{path}.tmp-{os.getpid()}.png"
    try:
        fig.savefig(tmp, format="png")
        os.replace(tmp, path)
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)
    return path


def _draw_steps(ax, reports: Sequence[Report], title: str) -> None:
    """Stacked bars: compute, wait, loop overhead per mean step; wait % and verdict above each bar."""
    names = [r.name or f"run {i}" for i, r in enumerate(reports)]
    compute = [r.compute_ms.mean for r in reports]
    wait = [r.wait_ms.mean for r in reports]
    other = [max(0.0, r.step_ms.mean - c - w) for r, c, w in zip(reports, compute, wait)]
    x = list(range(len(reports)))
    ax.bar(x, compute, color=COLORS["compute"], label="compute (step)")
    ax.bar(x, wait, bottom=compute, color=COLORS["wait"], label="waiting for input (idle)")
    ax.bar(x, other, bottom=[c + w for c, w in zip(compute, wait)], color=COLORS["other"], label="loop overhead")
    top = max(c + w + o for c, w, o in zip(compute, wait, other)) or 1.0
    for i, r in enumerate(reports):
        total = compute[i] + wait[i] + other[i]
        verdict = r.verdict if len(reports) <= 5 else r.verdict.split()[0]  # "highly", "moderately", "not"
        ax.text(i, total + 0.02 * top, f"{r.input_wait_pct:.1f}%\n{verdict}", ha="center", va="bottom",
                fontsize=8)
    rotate = len(reports) > 4
    ax.set_xticks(x)
    ax.set_xticklabels(names, rotation=30 if rotate else 0, ha="right" if rotate else "center", fontsize=8)
    ax.set_ylabel("ms per training step (mean)")
    ax.set_ylim(0, top * 1.25)  # room for the labels above the tallest bar
    ax.set_title(title, fontsize=10, pad=24)
    ax.legend(loc="lower center", bbox_to_anchor=(0.5, 1.0), ncol=3, fontsize=8, frameon=False)


def _draw_throughput(ax, throughput: Mapping[str, float], title: str, naive: str = "naive") -> None:
    """Horizontal bars of records/s with no step; the naive and the best variant marked and labelled."""
    names = list(throughput)
    rates = [throughput[n] for n in names]
    best = max(names, key=lambda n: throughput[n])
    colors = [COLORS["naive"] if n == naive else COLORS["best"] if n == best else COLORS["throughput"]
              for n in names]
    y = list(range(len(names)))[::-1]  # first variant on top
    ax.barh(y, rates, color=colors)
    top = max(rates) or 1.0
    base = throughput.get(naive)
    for yi, n, v in zip(y, names, rates):
        label = f"{v / 1000:,.0f}k"
        if base:
            label += f" ({v / base:.1f}× naive)"
        if n == best:
            label += "  best"
        ax.text(v + 0.01 * top, yi, label, va="center", ha="left", fontsize=8)
    if base:
        ax.axvline(base, color=COLORS["naive"], linestyle="--", linewidth=1)
    ax.axvline(top, color=COLORS["best"], linestyle=":", linewidth=1)
    ax.set_yticks(y)
    ax.set_yticklabels(names, fontsize=8)
    ax.set_xlim(0, top * 1.45)  # room for the value labels right of the longest bar
    from matplotlib.ticker import FuncFormatter

    ax.xaxis.set_major_formatter(FuncFormatter(lambda v, _: f"{v / 1000:,.0f}k" if v else "0"))
    ax.set_xlabel("records/s with no training step")
    ax.set_title(title, fontsize=10, pad=24)
    from matplotlib.patches import Patch

    handles = [Patch(color=COLORS["naive"], label="naive (per-record parse)"),
               Patch(color=COLORS["best"], label="best")]
    ax.legend(handles=handles, loc="lower center", bbox_to_anchor=(0.5, 1.0), ncol=2, fontsize=8, frameon=False)


def plot_reports(reports: Sequence[Report], path: str | os.PathLike, *, title: str | None = None) -> str:
    """Write the per-step chart to ``path`` (PNG); returns the path.

    Each bar is one variant's mean step: blue = compute (the step function), red = waiting for the next
    batch (accelerator idle), grey = loop bookkeeping; the label above is the input-wait % and verdict
    (shortened to its first word — highly / moderately / not input-bound — beyond five variants).
    """
    return _save(_reports_figure(reports, title), path)


def _reports_figure(reports: Sequence[Report], title: str | None = None):
    if not reports:
        raise ValueError("plot_reports needs at least one report")
    fig, (ax,) = _figure(max(6.0, 1.3 * len(reports) + 2.5), 5.2)
    _draw_steps(ax, reports, title or "Where each training step's time goes")
    return fig


def plot_pipeline(reports: Sequence[Report], throughput: Mapping[str, float], path: str | os.PathLike, *,
                  title: str | None = None, throughput_title: str | None = None,
                  step_title: str | None = None) -> str:
    """Two panels in one PNG: ``throughput`` ({variant: records/s with no step}) on the left, the per-step
    split of ``reports`` on the right (either may be empty, not both). Returns the path."""
    return _save(_pipeline_figure(reports, throughput, title, throughput_title, step_title), path)


def _pipeline_figure(reports: Sequence[Report], throughput: Mapping[str, float], title: str | None = None,
                     throughput_title: str | None = None, step_title: str | None = None):
    if not reports and not throughput:
        raise ValueError("plot_pipeline needs reports or throughput figures")
    panels = int(bool(throughput)) + int(bool(reports))
    n = max(len(reports), len(throughput))
    fig, axes = _figure(max(7.0, 6.0 * panels + 0.4 * n), max(5.2, 0.35 * n + 3.0), panels)
    i = 0
    if throughput:
        _draw_throughput(axes[i], throughput, throughput_title or "Pipeline throughput, no step")
        i += 1
    if reports:
        _draw_steps(axes[i], reports, step_title or "Where each training step's time goes")
    if title:
        fig.suptitle(title, fontsize=11)
    return fig
