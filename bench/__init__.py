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

# ``measure`` and ``compare`` are both submodules and functions: import the (light, TensorFlow-free)
# submodules now and bind the functions over them, so ``bench.measure`` is always the function.
from .compare import compare, format_table, idle_cost, reports_to_json
from .measure import VERDICTS, Percentiles, Report, measure, verdict_for

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
    "simulated_step": ".steps", "plot_reports": ".plot",
    "deepfm": ".models", "tiny_lm": ".models", "keras_step": ".models",
    "GpuSampler": ".nvml", "nvml_status": ".nvml",
}, globals())
