"""Where the time goes: a PNG with one stacked bar per variant (mean compute vs mean input wait per step).

Matplotlib is imported lazily with the non-interactive Agg backend.
"""
from __future__ import annotations

import os
from typing import Sequence

from .measure import Report

__all__ = ["plot_reports", "COLORS"]

COLORS = {"compute": "#4C72B0", "wait": "#DD4444", "other": "#BBBBBB"}


def plot_reports(reports: Sequence[Report], path: str | os.PathLike, *, title: str | None = None) -> str:
    """Write the chart to ``path`` (PNG, written to a temporary name then renamed); returns the path.

    Each bar is one variant's mean step: blue = compute (the step function), red = waiting for the next
    batch (accelerator idle), grey = loop bookkeeping; the label above is the input-wait % and verdict
    (shortened to its first word — highly / moderately / not input-bound — beyond five variants).
    """
    if not reports:
        raise ValueError("plot_reports needs at least one report")
    import matplotlib

    matplotlib.use("Agg", force=True)
    from matplotlib.figure import Figure

    names = [r.name or f"run {i}" for i, r in enumerate(reports)]
    compute = [r.compute_ms.mean for r in reports]
    wait = [r.wait_ms.mean for r in reports]
    other = [max(0.0, r.step_ms.mean - c - w) for r, c, w in zip(reports, compute, wait)]

    fig = Figure(figsize=(max(6.0, 1.3 * len(reports) + 2.5), 4.8), dpi=100)
    ax = fig.add_subplot(1, 1, 1)
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
    ax.set_xticks(x)
    ax.set_xticklabels(names, rotation=20 if len(reports) > 4 else 0, ha="right" if len(reports) > 4 else "center")
    ax.set_ylabel("ms per training step (mean)")
    ax.set_ylim(0, top * 1.3)
    ax.set_title(title or "Where each training step's time goes")
    ax.legend(loc="upper right", fontsize=8)
    fig.tight_layout()

    path = os.fspath(path)
    tmp = f"{path}.tmp-{os.getpid()}.png"
    try:
        fig.savefig(tmp, format="png")
        os.replace(tmp, path)
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)
    return path
