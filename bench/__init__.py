"""tfpipe bench: how much of each training step the accelerator waits for input, and what fixes it.

Public API (imported lazily, so ``import bench`` does not import TensorFlow)::

    from bench import measure, simulated_step
    report = measure(dataset, simulated_step(20), steps=200, warmup=20)
    print(report.input_wait_pct, report.verdict, report.metric_line())

``compare(variants, step_fn)`` runs several pipelines against one step; ``plot_reports`` draws where the
time goes; ``deepfm``/``tiny_lm``/``keras_step`` give real model steps; ``GpuSampler`` samples NVML.
"""
from __future__ import annotations

from converters.util.lazy import lazy_exports

# the light, TensorFlow-free core now; the rest on first use
from .core.compare import compare, idle_cost
from .core.measure import VERDICTS, Percentiles, Report, measure, verdict_for
from .report.tables import format_table, reports_to_json

__all__ = [
    "measure",
    "Report",
    "Percentiles",
    "verdict_for",
    "VERDICTS",
    "simulated_step",
    "compare",
    "idle_cost",
    "format_table",
    "reports_to_json",
    "plot_reports",
    "deepfm",
    "tiny_lm",
    "keras_step",
    "GpuSampler",
    "nvml_status",
]

__getattr__, __dir__ = lazy_exports(__name__, {
    "simulated_step": ".core.steps", "plot_reports": ".report.plot",
    "deepfm": ".core.models", "tiny_lm": ".core.models", "keras_step": ".core.models",
    "GpuSampler": ".infra.nvml", "nvml_status": ".infra.nvml",
}, globals())
