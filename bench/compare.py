"""``compare(variants, step_fn)``: several input pipelines against the same training step, in one process.

Each variant is a factory returning a fresh dataset; each is measured with ``measure`` against the same
``step_fn``. With ``price_per_hour`` (the accelerator instance's on-demand price) the input wait becomes
money: idle accelerator-hours and dollars per epoch (when ``records_per_epoch`` is known) and per hour
of training.
"""
from __future__ import annotations

import dataclasses
import gc
import json
import logging
from typing import Any, Callable, Mapping

from .measure import Report, measure

__all__ = ["compare", "idle_cost", "format_table", "reports_to_json"]

log = logging.getLogger(__name__)


def idle_cost(report: Report, *, price_per_hour: float | None = None,
              records_per_epoch: int | None = None) -> dict[str, float]:
    """Idle accelerator time (and dollars, with a price) implied by a report.

    ``epoch_hours`` = records_per_epoch / records_per_s / 3600; idle hours = that × idle fraction.
    """
    if price_per_hour is not None and not price_per_hour >= 0:
        raise ValueError(f"price_per_hour must be >= 0, got {price_per_hour!r}")
    if records_per_epoch is not None and records_per_epoch < 0:
        raise ValueError(f"records_per_epoch must be >= 0, got {records_per_epoch!r}")
    out: dict[str, float] = {"idle_fraction": report.idle_fraction}
    if price_per_hour is not None:
        out["idle_dollars_per_hour"] = report.idle_fraction * price_per_hour
    if records_per_epoch is not None and report.records_per_s > 0:
        epoch_h = records_per_epoch / report.records_per_s / 3600.0
        out["epoch_hours"] = epoch_h
        out["idle_gpu_hours_per_epoch"] = epoch_h * report.idle_fraction
        if price_per_hour is not None:
            out["idle_dollars_per_epoch"] = epoch_h * report.idle_fraction * price_per_hour
            out["dollars_per_epoch"] = epoch_h * price_per_hour
    return out


def compare(variants: Mapping[str, Callable[[], Any]], step_fn: Callable[[Any], Any], *, steps: int = 100,
            warmup: int = 10, price_per_hour: float | None = None, records_per_epoch: int | None = None,
            gpu_sampler: Any = "auto", on_report: Callable[[Report], None] | None = None) -> list[Report]:
    """Measure every variant (in the given order) against ``step_fn``; returns one named Report each.

    ``variants`` maps a name to a zero-argument factory returning a dataset (or any iterable of batches).
    The cost figures from ``idle_cost`` are stored in each report's ``extra``.
    """
    if not variants:
        raise ValueError("compare needs at least one variant")
    if price_per_hour is not None and not price_per_hour >= 0:
        raise ValueError(f"price_per_hour must be >= 0, got {price_per_hour!r}")
    reports = []
    for name, factory in variants.items():
        if not callable(factory):
            raise ValueError(f"variant {name!r}: expected a factory returning a dataset, got {factory!r}")
        log.info("measuring variant %s", name)
        dataset = factory()
        r = measure(dataset, step_fn, steps=steps, warmup=warmup, name=name, gpu_sampler=gpu_sampler)
        del dataset
        gc.collect()
        cost = idle_cost(r, price_per_hour=price_per_hour, records_per_epoch=records_per_epoch)
        r = dataclasses.replace(r, extra=r.extra + tuple(sorted(cost.items())))
        if on_report is not None:
            on_report(r)
        reports.append(r)
    return reports


def _fmt_rate(x: float) -> str:
    return f"{x:,.0f}"


def format_table(reports: list[Report], *, extra_columns: Mapping[str, Mapping[str, str]] | None = None) -> str:
    """A plain-text table, one row per report. ``extra_columns``: {column title: {variant name: text}},
    placed after the variant name (e.g. pipeline throughput without a step)."""
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
    out += [line(r) for r in rows]
    return "\n".join(out)


def reports_to_json(reports: list[Report], *, meta: Mapping[str, Any] | None = None, indent: int | None = 2) -> str:
    """``{"meta": {...}, "variants": [report dicts]}`` as JSON."""
    doc = {"meta": dict(meta or {}), "variants": [r.as_dict() for r in reports]}
    return json.dumps(doc, indent=indent, sort_keys=True, default=str)
