"""Where the time goes: PNG charts of a pipeline benchmark.

``plot_reports``: one stacked bar per variant (mean compute vs mean input wait per step).
``plot_pipeline``: two panels — left, each variant's throughput with no step (records/s, naive and best
marked); right, the per-step wait/compute split against the simulated step. The variant a user gets (the
``build_dataset`` defaults, ``vectorized``) is marked "default ← you" in both; the best is the fastest *File
mode* graph, and Pipe mode, another input mode, gets its own colour and says so; a one-line takeaway sits
under the title and one short line per variant under the panels says what its name means.

Legends sit above the plotting area, never over the bars or their labels. Matplotlib is imported lazily
with the non-interactive Agg backend; files are written to a temporary name, then renamed.
"""
from __future__ import annotations

import io
import os
from typing import Mapping, Sequence

from converters.util.errors import TfpipeError

from ..core.measure import Report

__all__ = ["plot_reports", "plot_pipeline", "check_plotting", "MissingExtraError", "takeaway", "COLORS",
           "VARIANT_NOTES", "DEFAULT_VARIANT", "OTHER_MODES"]

COLORS = {"compute": "#4C72B0", "wait": "#DD4444", "other": "#BBBBBB", "throughput": "#8FA9C9",
          "naive": "#DD8844", "best": "#2E8B57", "other_mode": "#9A86B8"}

DEFAULT_VARIANT = "vectorized"      # what build_dataset(PipelineSpec.from_manifest(...)) gives a user
YOU = "default ← you"
OTHER_MODES = {"pipe": "Pipe mode"}  # variants that are another input mode, not another File-mode graph
VARIANT_NOTES = {
    "naive": "parse one record at a time (parse_single_example), then batch: the usual first attempt",
    "vectorized": "tfpipe's build_dataset defaults: batch, one parse_example per batch, prefetch",
    "sequential_batch_parse_prefetch": "hand-tuned: read the files in order, batch, parse per batch, prefetch",
    "parallel_reads_autotune": "hand-tuned: read files in parallel (num_parallel_reads=AUTOTUNE), batch, parse",
    "interleave_per_file_batched": "hand-tuned: interleave the files, batching within each file, then parse",
    "map_and_batch_vectorized": "hand-tuned: batch + parse with deterministic=False (record order not kept)",
    "no_prefetch": "the default without prefetch: input never overlaps the step",
    "cache_before_parse": "the default with the raw records cached in memory (2 epochs)",
    "cache_after_parse": "parsed batches cached in memory (2 epochs)",
    "pipe": "Pipe mode (SageMaker streams shards through a FIFO): another input mode, not a File-mode setting",
    "shuffle": "the default with a 10,000-record shuffle buffer",
}


class MissingExtraError(TfpipeError):
    """An option needs an optional dependency that is not installed (exit 2: the command line asks for what
    this install cannot do)."""

    exit_code = 2


def check_plotting(option: str = "--png") -> None:
    """Refuse ``option`` in one line, naming the extra to install, when matplotlib cannot be imported: called
    before the first measurement, not after minutes of measuring."""
    try:
        import matplotlib  # noqa: F401
        import matplotlib.figure  # noqa: F401
    except ImportError:
        raise MissingExtraError(f"{option} needs matplotlib, which is not installed: pip install "
                                f"'tfpipe[bench]' (or leave out {option})") from None


def _figure(width: float, height: float, panels: int = 1):
    import matplotlib

    matplotlib.use("Agg", force=True)
    from matplotlib.figure import Figure

    fig = Figure(figsize=(width, height), dpi=100, layout="constrained")
    return fig, [fig.add_subplot(1, panels, i + 1) for i in range(panels)]


def _save(fig, path: str | os.PathLike) -> str:
    """Render ``fig`` as PNG in memory, then write it with the one output writer (atomic for a file, through a
    link, directly to a device or FIFO)."""
    from converters.util.outfile import write_output

    path = os.fspath(path)
    buf = io.BytesIO()
    fig.savefig(buf, format="png")
    write_output(path, buf.getvalue())
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
        verdict = r.verdict if len(reports) <= 5 else r.verdict.replace(" ", "\n", 1)  # whole, on two lines
        ax.text(i, total + 0.02 * top, f"{r.input_wait_pct:.1f}%\n{verdict}", ha="center", va="bottom",
                fontsize=8 if len(reports) <= 5 else 6.5)
    rotate = len(reports) > 4
    ax.set_xticks(x)
    ax.set_xticklabels([_name(n) for n in names], rotation=30 if rotate else 0, ha="right" if rotate else "center",
                       fontsize=8)
    _bold_default(ax.get_xticklabels())
    ax.set_ylabel("ms per training step (mean)")
    ax.set_ylim(0, top * (1.25 if len(reports) <= 5 else 1.35))  # room for the labels above the tallest bar
    ax.set_title(title, fontsize=10, pad=24)
    ax.legend(loc="lower center", bbox_to_anchor=(0.5, 1.0), ncol=3, fontsize=8, frameon=False)


def _draw_throughput(ax, throughput: Mapping[str, float], title: str, naive: str = "naive") -> None:
    """Horizontal bars of records/s with no step; the naive and the best variant marked and labelled."""
    names = list(throughput)
    rates = [throughput[n] for n in names]
    best = _best(throughput)
    colors = [COLORS["naive"] if n == naive else COLORS["best"] if n == best else
              COLORS["other_mode"] if n in OTHER_MODES else COLORS["throughput"] for n in names]
    y = list(range(len(names)))[::-1]  # first variant on top
    ax.barh(y, rates, color=colors)
    top = max(rates) or 1.0
    base = throughput.get(naive)
    for yi, n, v in zip(y, names, rates):
        label = f"{v / 1000:,.0f}k"
        if base:
            label += f" ({v / base:.1f}× naive)"
        if n in OTHER_MODES:
            label += f"  {OTHER_MODES[n]}: other input mode"
        elif n == best:
            label += "  best File mode" if any(m in throughput for m in OTHER_MODES) else "  best"
        ax.text(v + 0.01 * top, yi, label, va="center", ha="left", fontsize=8)
    if base:
        ax.axvline(base, color=COLORS["naive"], linestyle="--", linewidth=1)
    if best is not None:
        ax.axvline(throughput[best], color=COLORS["best"], linestyle=":", linewidth=1)
    ax.set_yticks(y)
    ax.set_yticklabels([_name(n) for n in names], fontsize=8)
    _bold_default(ax.get_yticklabels())
    ax.set_xlim(0, top * 1.7)  # room for the value labels right of the longest bar
    from matplotlib.ticker import FuncFormatter

    ax.xaxis.set_major_formatter(FuncFormatter(lambda v, _: f"{v / 1000:,.0f}k" if v else "0"))
    ax.set_xlabel("records/s with no training step")
    ax.set_title(title, fontsize=10, pad=24)
    from matplotlib.patches import Patch

    handles = [Patch(color=COLORS["naive"], label="naive (per-record parse)"),
               Patch(color=COLORS["best"], label="best File mode")]
    handles += [Patch(color=COLORS["other_mode"], label=f"{m} (another input mode)")
                for n, m in OTHER_MODES.items() if n in throughput]
    ax.legend(handles=handles, loc="lower center", bbox_to_anchor=(0.5, 1.0), ncol=len(handles), fontsize=8,
              frameon=False)


def _name(n: str) -> str:
    """A variant's axis label: the default marked as the one the user gets."""
    return f"{n} ({YOU})" if n == DEFAULT_VARIANT else n


def _bold_default(labels) -> None:
    for t in labels:
        if YOU in t.get_text():
            t.set_fontweight("bold")


def _best(throughput: Mapping[str, float]) -> str | None:
    """The fastest File-mode variant (Pipe mode is another input mode, never "best" for a File-mode user)."""
    same = [n for n in throughput if n not in OTHER_MODES]
    return max(same, key=lambda n: throughput[n]) if same else None


def takeaway(throughput: Mapping[str, float], reports: Sequence[Report] = (),
             hand_tuned: Sequence[str] | None = None) -> str:
    """One line saying what the chart means for the user: the default against the best hand-tuned graph (of
    ``hand_tuned``; all File-mode variants when None) and naive, whether to keep it, and its verdict against
    the step."""
    pool = {n: v for n, v in throughput.items() if hand_tuned is None or n in hand_tuned or n == DEFAULT_VARIANT}
    best, d = _best(pool), throughput.get(DEFAULT_VARIANT)
    naive = throughput.get("naive")
    what = "File-mode graph" if hand_tuned is None else "hand-tuned graph"
    if best is None or not d:
        return f"Takeaway: the fastest {what} here is {best}." if best else ""
    ratio = d / throughput[best] if throughput[best] else 0.0
    vs_naive = f", {d / naive:.1f}× naive" if naive else ""
    if best == DEFAULT_VARIANT:
        line = f"Takeaway: the default you get is faster than every {what} here{vs_naive}: keep it"
    elif ratio >= 0.95:
        line = f"Takeaway: the default you get reads {ratio:.2f}× the best {what} ({best}){vs_naive}: keep it"
    else:
        line = (f"Takeaway: the default you get reads {ratio:.2f}× the best {what} ({best}){vs_naive}: "
                "try `tfpipe pipeline tune`")
    mine = [r for r in reports if r.name == DEFAULT_VARIANT]
    if mine:
        line += f"; against the step it is {mine[0].verdict} ({mine[0].input_wait_pct:.0f}% idle)"
    return line + "."


def _notes(names: Sequence[str]) -> str:
    return "\n".join(f"{n}: {VARIANT_NOTES[n]}" for n in names if n in VARIANT_NOTES)


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
                  step_title: str | None = None, hand_tuned: Sequence[str] | None = None) -> str:
    """Two panels in one PNG: ``throughput`` ({variant: records/s with no step}) on the left, the per-step
    split of ``reports`` on the right (either may be empty, not both); the takeaway under the title compares
    the default with the best of ``hand_tuned`` (``bench.core.variants.HAND_TUNED``). Returns the path."""
    return _save(_pipeline_figure(reports, throughput, title, throughput_title, step_title, hand_tuned), path)


def _pipeline_figure(reports: Sequence[Report], throughput: Mapping[str, float], title: str | None = None,
                     throughput_title: str | None = None, step_title: str | None = None,
                     hand_tuned: Sequence[str] | None = None):
    if not reports and not throughput:
        raise ValueError("plot_pipeline needs reports or throughput figures")
    panels = int(bool(throughput)) + int(bool(reports))
    n = max(len(reports), len(throughput))
    names = list(dict.fromkeys([*throughput, *(r.name for r in reports)]))
    notes = _notes(names)
    fig, axes = _figure(max(9.0, 6.0 * panels + 0.7 * n), max(5.2, 0.35 * n + 3.0) + 0.16 * notes.count("\n"),
                        panels)
    i = 0
    if throughput:
        _draw_throughput(axes[i], throughput, throughput_title or "Pipeline throughput, no step")
        i += 1
    if reports:
        _draw_steps(axes[i], reports, step_title or "Where each training step's time goes")
    line = takeaway(throughput, reports, hand_tuned) if throughput else ""
    if title or line:
        fig.suptitle("\n".join(t for t in (title, line) if t), fontsize=10)
    if notes:
        fig.supxlabel(notes, fontsize=7.5, x=0.01, ha="left", multialignment="left")
    return fig
