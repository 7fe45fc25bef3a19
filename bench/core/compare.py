"""``compare(variants, step_fn)``: several input pipelines against the same training step, in one process.

Each variant is a factory returning a fresh dataset; each is measured with ``measure`` against the same
``step_fn``. With ``price_per_hour`` (the accelerator instance's on-demand price) the input wait becomes
money: idle accelerator-hours and dollars per epoch (when ``records_per_epoch`` is known) and per hour
of training.
"""
from __future__ import annotations

import dataclasses
import gc
import logging
from typing import Any, Callable, Mapping

from .measure import Report, measure

__all__ = ["compare", "idle_cost"]

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
