"""What ``tfpipe bench all`` reports: a :class:`Metric` (a figure, its unit and target), a README :class:`Row`, a
:class:`Benchmark` (its command, sizes, metrics and ``measure``), and how figures are written (:func:`show`,
:func:`show_range`) and judged (:func:`meets`). The benchmarks themselves are in ``bench.suite.specs``."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable

__all__ = ["Metric", "Row", "Benchmark", "meets", "number", "show", "show_range"]

_OPS = (">=", "<=", "<", ">")


@dataclass(frozen=True)
class Metric:
    """One reported figure: ``key`` in the run's result, how to show it (``unit``: x, %, rec/s, s, ratio) and
    its target (``op`` and ``target``; ``None``: informational). Units: x (a ratio shown 8.31×), %, rec/s,
    s, ms, n (a count), ratio (shown 0.996)."""

    key: str
    label: str
    unit: str = "x"
    op: str | None = None
    target: float | None = None

    def __post_init__(self):
        if self.unit not in _SUFFIX:
            raise ValueError(f"metric {self.key}: unknown unit {self.unit!r}")
        if (self.op is None) != (self.target is None) or (self.op is not None and self.op not in _OPS):
            raise ValueError(f"metric {self.key}: op {self.op!r} and target {self.target!r} must be given together, "
                             f"op one of {_OPS}")

    def target_text(self) -> str:
        if self.op is None:
            return "—"
        sym = {">=": "≥", "<=": "≤"}.get(self.op, self.op)
        return f"{sym} {self.target:g}{_SUFFIX[self.unit]}"


def meets(metric: Metric, value: float) -> bool | None:
    """Whether ``value`` meets ``metric``'s target (None: the metric has no target)."""
    if metric.op is None:
        return None
    return {">=": value >= metric.target, "<=": value <= metric.target,
            "<": value < metric.target, ">": value > metric.target}[metric.op]


def number(value: float, unit: str) -> str:
    """A figure's number without its unit: 8.31, 1.7, 290,027, 1.22, 0.996."""
    if unit == "rec/s":
        return f"{value:,.0f}"
    if unit in ("%", "ms"):
        return f"{value:.1f}"
    if unit == "n":
        return f"{value:,.0f}"
    return f"{value:.3f}" if unit == "ratio" else f"{value:.2f}"


_SUFFIX = {"x": "×", "%": " %", "rec/s": " rec/s", "s": " s", "ms": " ms", "n": "", "ratio": ""}


def show(value: float, unit: str) -> str:
    """A figure as the README writes it: 8.31×, 1.7 %, 290,027 rec/s, 1.22 s, 0.996."""
    return number(value, unit) + _SUFFIX[unit]


def show_range(lo: float, hi: float, unit: str) -> str:
    """``lo``–``hi`` with the unit once: 7.90–8.52×, 152,000–165,000 rec/s (one figure when they are equal)."""
    a, b = number(lo, unit), number(hi, unit)
    return (a if a == b else f"{a}–{b}") + _SUFFIX[unit]


@dataclass(frozen=True)
class Row:
    """A README table row made from one benchmark's run: its first-column title, the metrics it shows and, where
    it differs from the benchmark's, what the row measures (``size(smoke)``)."""

    title: str
    keys: tuple[str, ...]
    size: Callable[[bool], str] | None = None


@dataclass(frozen=True)
class Benchmark:
    name: str
    command: str                    # the single command a user would run for the same figure
    size: Callable[[bool], str]     # smoke -> what this run measures, for the row title
    measure: Callable[[bool], dict]
    metrics: tuple[Metric, ...]
    rows: tuple[Row, ...] = field(default=())
    optional: bool = False          # slow: run only when asked for (--with / --only)

    def metric(self, key: str) -> Metric:
        for m in self.metrics:
            if m.key == key:
                return m
        raise KeyError(f"benchmark {self.name} has no metric {key!r}")
