"""Reports as text and JSON: ``format_table`` (one row per variant, cost columns when present, tfpipe's default
row marked), ``reports_to_json`` (``{"meta": ..., "variants": [...]}``), and ``mark_default``, the one mark every
bench table puts on the row that tfpipe's defaults give — the user's row."""
from __future__ import annotations

import json
from typing import Any, Mapping

from ..core.measure import Report

__all__ = ["format_table", "reports_to_json", "mark_default", "DEFAULT_MARK"]

DEFAULT_MARK = "<- tfpipe's default"


def _fmt_rate(x: float) -> str:
    return f"{x:,.0f}"


def mark_default(row: str, what: str = "") -> str:
    """``row`` of a bench table marked as the one tfpipe's defaults give (``what``: which default, briefly)."""
    return f"{row}  {DEFAULT_MARK}" + (f" ({what})" if what else "")


def format_table(reports: list[Report], *, extra_columns: Mapping[str, Mapping[str, str]] | None = None,
                 default: str | None = None, default_what: str = "") -> str:
    """A plain-text table, one row per report. ``extra_columns``: {column title: {variant name: text}},
    placed after the variant name (e.g. pipeline throughput without a step); the row of the variant named
    ``default`` is marked (``mark_default``)."""
    extra_columns = dict(extra_columns or {})
    has_cost_epoch = any("idle_dollars_per_epoch" in dict(r.extra) for r in reports)
    has_cost_hour = any("idle_dollars_per_hour" in dict(r.extra) for r in reports)
    has_hours = any("idle_gpu_hours_per_epoch" in dict(r.extra) for r in reports)
    has_gpu = any(r.gpu_util for r in reports)
    head = ["variant", *extra_columns, "records/s", "batches/s", "step p50 ms", "wait p50 ms", "wait p99 ms",
            "input wait %", "verdict"]
    if has_gpu:
        head.append("GPU util %")
    if has_hours:
        head.append("idle GPU-h/epoch")
    if has_cost_epoch:
        head.append("idle $/epoch")
    if has_cost_hour:
        head.append("idle $/h")
    rows = []
    for r in reports:
        ex = dict(r.extra)
        row = [r.name or "-", *(col.get(r.name, "") for col in extra_columns.values()),
               _fmt_rate(r.records_per_s), f"{r.batches_per_s:.1f}", f"{r.step_ms.p50:.2f}",
               f"{r.wait_ms.p50:.2f}", f"{r.wait_ms.p99:.2f}", f"{r.input_wait_pct:.1f}", r.verdict]
        if has_gpu:
            row.append("-" if r.gpu_util_mean is None else f"{r.gpu_util_mean:.0f}")
        if has_hours:
            row.append(f"{ex['idle_gpu_hours_per_epoch']:.4f}" if "idle_gpu_hours_per_epoch" in ex else "-")
        if has_cost_epoch:
            row.append(f"{ex['idle_dollars_per_epoch']:.4f}" if "idle_dollars_per_epoch" in ex else "-")
        if has_cost_hour:
            row.append(f"{ex['idle_dollars_per_hour']:.2f}" if "idle_dollars_per_hour" in ex else "-")
        rows.append(row)
    widths = [max(len(h), *(len(row[i]) for row in rows)) for i, h in enumerate(head)]

    right = [i > 0 and all(row[i][:1].isdigit() or row[i] in ("-", "") for row in rows) for i in range(len(head))]

    def line(cells):
        return "  ".join(c.rjust(w) if right[i] else c.ljust(w)
                         for i, (c, w) in enumerate(zip(cells, widths))).rstrip()

    out = [line(head), line(["-" * w for w in widths])]
    out += [mark_default(line(row), default_what) if default is not None and r.name == default else line(row)
            for r, row in zip(reports, rows)]
    return "\n".join(out)


def reports_to_json(reports: list[Report], *, meta: Mapping[str, Any] | None = None, indent: int | None = 2) -> str:
    """``{"meta": {...}, "variants": [report dicts]}`` as JSON."""
    doc = {"meta": dict(meta or {}), "variants": [r.as_dict() for r in reports]}
    return json.dumps(doc, indent=indent, sort_keys=True, default=str)
