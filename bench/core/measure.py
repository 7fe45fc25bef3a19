"""``measure(dataset, step_fn)``: how much of each training step the accelerator waits for input.

Per step, two intervals are timed with ``time.perf_counter``:

* **wait** — the call that fetches the next batch (``next(iterator)``): the accelerator would be idle;
* **compute** — ``step_fn(batch)``, synchronized: when it returns TensorFlow tensors their completion is
  forced (``.numpy()`` on small outputs, ``tf.experimental.sync_devices`` when present), so asynchronous
  GPU work is charged to the step that issued it.

``input_wait_pct`` is total wait over total step time (wait + compute) after ``warmup`` steps, and the
verdict uses the TensorFlow Profiler's input-bound thresholds (< 5 %, 5–20 %, > 20 %).
"""
from __future__ import annotations

import dataclasses
import json
import logging
import math
import sys
import time
from typing import Any, Callable, Iterable

from converters.util.errors import TfpipeError

__all__ = [
    "Percentiles",
    "Report",
    "VERDICTS",
    "verdict_for",
    "measure",
    "batch_size_of",
]

log = logging.getLogger(__name__)

NOT_INPUT_BOUND = "not input-bound"
MODERATELY_INPUT_BOUND = "moderately input-bound"
HIGHLY_INPUT_BOUND = "highly input-bound"
VERDICTS = (NOT_INPUT_BOUND, MODERATELY_INPUT_BOUND, HIGHLY_INPUT_BOUND)

# TensorFlow Profiler's input-pipeline analyzer: < 5 % not, 5–20 % moderately, > 20 % highly input-bound
MODERATE_PCT = 5.0
HIGH_PCT = 20.0

# step outputs at most this many elements are pulled to the host to force completion
_SMALL_OUTPUT = 1024


def verdict_for(input_wait_pct: float) -> str:
    """Classify an input-wait percentage the way the TensorFlow Profiler does."""
    if not (0.0 <= input_wait_pct <= 100.0) or math.isnan(input_wait_pct):
        raise ValueError(f"input_wait_pct must be in [0, 100], got {input_wait_pct!r}")
    if input_wait_pct < MODERATE_PCT:
        return NOT_INPUT_BOUND
    if input_wait_pct <= HIGH_PCT:
        return MODERATELY_INPUT_BOUND
    return HIGHLY_INPUT_BOUND


@dataclasses.dataclass(frozen=True)
class Percentiles:
    """Summary of a list of durations in milliseconds."""

    p50: float
    p90: float
    p99: float
    mean: float
    max: float

    def __post_init__(self):
        for f in dataclasses.fields(self):
            v = getattr(self, f.name)
            if not isinstance(v, (int, float)) or math.isnan(v) or v < 0:
                raise ValueError(f"Percentiles.{f.name} must be a non-negative number, got {v!r}")
        if not (self.p50 <= self.p90 <= self.p99 <= self.max + 1e-9):
            raise ValueError(f"percentiles must be ordered p50 <= p90 <= p99 <= max, got {self}")

    @classmethod
    def of(cls, values_ms: Iterable[float]) -> "Percentiles":
        """Percentiles by linear interpolation (numpy's default), computed without numpy."""
        xs = sorted(float(v) for v in values_ms)
        if not xs:
            raise ValueError("Percentiles.of needs at least one value")

        def q(p: float) -> float:
            pos = (len(xs) - 1) * p / 100.0
            lo = math.floor(pos)
            hi = min(lo + 1, len(xs) - 1)
            return xs[lo] + (xs[hi] - xs[lo]) * (pos - lo)

        return cls(p50=q(50), p90=q(90), p99=q(99), mean=sum(xs) / len(xs), max=xs[-1])

    def as_dict(self) -> dict[str, float]:
        return {f.name: round(getattr(self, f.name), 4) for f in dataclasses.fields(self)}

    def __getitem__(self, key: str) -> float:  # report.step_ms["p50"] as well as report.step_ms.p50
        if key not in {f.name for f in dataclasses.fields(self)}:
            raise KeyError(key)
        return getattr(self, key)


@dataclasses.dataclass(frozen=True)
class Report:
    """What one measured run found. Times are milliseconds, rates per second of measured wall time."""

    steps: int
    warmup: int
    input_wait_pct: float
    batches_per_s: float
    records_per_s: float
    records: int
    wall_s: float
    step_ms: Percentiles
    wait_ms: Percentiles
    compute_ms: Percentiles
    name: str = ""
    gpu_util: tuple[float, ...] = ()
    gpu_note: str = ""
    extra: tuple[tuple[str, Any], ...] = ()

    def __post_init__(self):
        if not isinstance(self.steps, int) or self.steps < 1:
            raise ValueError(f"Report.steps must be a positive int, got {self.steps!r}")
        if not isinstance(self.warmup, int) or self.warmup < 0:
            raise ValueError(f"Report.warmup must be a non-negative int, got {self.warmup!r}")
        if math.isnan(self.input_wait_pct) or not 0.0 <= self.input_wait_pct <= 100.0:
            raise ValueError(f"Report.input_wait_pct must be in [0, 100], got {self.input_wait_pct!r}")
        for name in ("batches_per_s", "records_per_s", "wall_s"):
            v = getattr(self, name)
            if math.isnan(v) or v < 0:
                raise ValueError(f"Report.{name} must be >= 0, got {v!r}")
        if self.records < 0:
            raise ValueError(f"Report.records must be >= 0, got {self.records!r}")
        for u in self.gpu_util:
            if not 0.0 <= u <= 100.0:
                raise ValueError(f"Report.gpu_util samples must be in [0, 100], got {u!r}")

    @property
    def verdict(self) -> str:
        return verdict_for(self.input_wait_pct)

    @property
    def idle_fraction(self) -> float:
        return self.input_wait_pct / 100.0

    @property
    def gpu_util_mean(self) -> float | None:
        return sum(self.gpu_util) / len(self.gpu_util) if self.gpu_util else None

    def with_name(self, name: str) -> "Report":
        return dataclasses.replace(self, name=name)

    def as_dict(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "steps": self.steps,
            "warmup": self.warmup,
            "input_wait_pct": round(self.input_wait_pct, 3),
            "verdict": self.verdict,
            "batches_per_s": round(self.batches_per_s, 3),
            "records_per_s": round(self.records_per_s, 1),
            "records": self.records,
            "wall_s": round(self.wall_s, 4),
            "step_ms": self.step_ms.as_dict(),
            "wait_ms": self.wait_ms.as_dict(),
            "compute_ms": self.compute_ms.as_dict(),
            "gpu_util": list(self.gpu_util),
            "gpu_util_mean": None if self.gpu_util_mean is None else round(self.gpu_util_mean, 2),
            "gpu_note": self.gpu_note,
            "extra": {k: v for k, v in self.extra},
        }

    def to_json(self, indent: int | None = 2) -> str:
        return json.dumps(self.as_dict(), indent=indent, sort_keys=True)

    def metric_line(self) -> str:
        """One line for SageMaker ``metric_definitions``; capture e.g. ``input_wait_pct=([0-9.]+);``."""
        parts = [f"variant={self.name};"] if self.name else []
        parts += [
            f"input_wait_pct={self.input_wait_pct:.2f};",
            f"batches_per_s={self.batches_per_s:.3f};",
            f"records_per_s={self.records_per_s:.1f};",
            f"step_ms_p50={self.step_ms.p50:.3f};",
            f"step_ms_p90={self.step_ms.p90:.3f};",
            f"step_ms_p99={self.step_ms.p99:.3f};",
            f"wait_ms_p50={self.wait_ms.p50:.3f};",
            f"wait_ms_p99={self.wait_ms.p99:.3f};",
        ]
        if self.gpu_util_mean is not None:
            parts.append(f"gpu_util_pct={self.gpu_util_mean:.1f};")
        return "tfpipe: " + " ".join(parts)

    def summary(self) -> str:
        """Human-readable one-paragraph summary."""
        lines = [
            f"{self.name or 'run'}: {self.steps} steps after {self.warmup} warmup, {self.wall_s:.2f} s",
            f"  input wait {self.input_wait_pct:.1f}% of step time -> {self.verdict}",
            f"  {self.batches_per_s:.1f} batches/s, {self.records_per_s:,.0f} records/s",
            f"  step ms p50/p90/p99 {self.step_ms.p50:.2f}/{self.step_ms.p90:.2f}/{self.step_ms.p99:.2f}; "
            f"wait ms p50/p90/p99 {self.wait_ms.p50:.2f}/{self.wait_ms.p90:.2f}/{self.wait_ms.p99:.2f}",
        ]
        if self.gpu_util:
            lines.append(f"  GPU utilization mean {self.gpu_util_mean:.1f}% over {len(self.gpu_util)} samples")
        elif self.gpu_note:
            lines.append(f"  GPU utilization: {self.gpu_note}")
        return "\n".join(lines)


def _flatten(x) -> list:
    if isinstance(x, dict):
        return [leaf for k in sorted(x, key=str) for leaf in _flatten(x[k])]
    if isinstance(x, (tuple, list)):
        return [leaf for item in x for leaf in _flatten(item)]
    return [x]


def batch_size_of(batch) -> int:
    """Leading dimension of the first array-like leaf of a batch (1 when nothing has a shape)."""
    for leaf in _flatten(batch):
        shape = getattr(leaf, "shape", None)
        if shape is not None and len(shape) >= 1:
            dim = shape[0]
            try:
                return int(dim)
            except TypeError:  # unknown static dimension
                continue
    return 1


def _block(result) -> None:
    """Force completion of whatever ``step_fn`` returned (asynchronous device work)."""
    tf = sys.modules.get("tensorflow")
    need_sync = False
    for leaf in _flatten(result):
        numpy = getattr(leaf, "numpy", None)
        if numpy is None or not callable(numpy):
            continue
        size = getattr(leaf, "shape", None)
        try:
            n = 1
            for d in size or ():
                n *= int(d)
        except TypeError:
            n = _SMALL_OUTPUT + 1
        if n <= _SMALL_OUTPUT:
            numpy()
        else:
            need_sync = True
    if need_sync and tf is not None:
        sync = getattr(getattr(tf, "experimental", None), "sync_devices", None)
        if sync is not None:
            sync()


def measure(dataset, step_fn: Callable[[Any], Any], *, steps: int = 100, warmup: int = 10,
            name: str = "", gpu_sampler: Any = "auto", sync: bool = True) -> Report:
    """Run ``warmup + steps`` training steps over ``dataset`` and time input wait vs compute.

    ``dataset`` is a ``tf.data.Dataset`` or any iterable of batches; ``step_fn(batch)`` runs one step.
    ``gpu_sampler``: ``"auto"`` (default) samples GPU utilization with NVML every 500 ms when an NVIDIA GPU
    and ``nvidia-ml-py`` are present (else ``gpu_note`` says why not); None turns it off; or any object
    with ``start()``/``stop() -> (samples, note)`` (see ``bench.infra.nvml.GpuSampler``). Stops early (with a
    warning) if the dataset
    runs out; raises ``TfpipeError`` when not even one step could be measured after warmup.
    """
    if not isinstance(steps, int) or steps < 1:
        raise ValueError(f"steps must be a positive int, got {steps!r}")
    if not isinstance(warmup, int) or warmup < 0:
        raise ValueError(f"warmup must be a non-negative int, got {warmup!r}")
    if not callable(step_fn):
        raise ValueError(f"step_fn must be callable, got {step_fn!r}")
    if isinstance(gpu_sampler, str):
        if gpu_sampler != "auto":
            raise ValueError(f"gpu_sampler must be 'auto', None or a sampler object, got {gpu_sampler!r}")
        from ..infra.nvml import GpuSampler
        gpu_sampler = GpuSampler()

    it = iter(dataset)
    perf = time.perf_counter
    block = _block if sync else (lambda r: None)

    # warmup: not timed (tf.function tracing, autotune ramp-up, buffers filling)
    for i in range(warmup):
        try:
            batch = next(it)
        except StopIteration:
            raise TfpipeError(f"dataset ended during warmup after {i} batches (warmup={warmup})") from None
        block(step_fn(batch))

    n = steps
    t_fetch = [0.0] * n   # before next()
    t_got = [0.0] * n     # after next()
    t_done = [0.0] * n    # after step_fn + sync
    sizes = [0] * n
    if gpu_sampler is not None:
        gpu_sampler.start()
    done = 0
    try:
        for i in range(n):
            t0 = perf()
            try:
                batch = next(it)
            except StopIteration:
                break
            t1 = perf()
            block(step_fn(batch))
            t2 = perf()
            t_fetch[i] = t0
            t_got[i] = t1
            t_done[i] = t2
            sizes[i] = batch_size_of(batch)
            done += 1
    finally:
        samples, note = gpu_sampler.stop() if gpu_sampler is not None else ((), "")
    if done == 0:
        raise TfpipeError(f"dataset ended before any measured step (warmup={warmup})")
    if done < n:
        log.warning("dataset ended after %d of %d measured steps", done, n)

    waits = [(t_got[i] - t_fetch[i]) * 1e3 for i in range(done)]
    computes = [(t_done[i] - t_got[i]) * 1e3 for i in range(done)]
    # step i spans from its fetch to the next step's fetch (the last one: to its own end)
    step_times = [((t_fetch[i + 1] if i + 1 < done else t_done[i]) - t_fetch[i]) * 1e3 for i in range(done)]
    wall = t_done[done - 1] - t_fetch[0]
    records = sum(sizes[:done])
    total_wait = sum(waits)
    pct = 100.0 * total_wait / (wall * 1e3) if wall > 0 else 0.0
    return Report(
        steps=done,
        warmup=warmup,
        input_wait_pct=min(100.0, max(0.0, pct)),
        batches_per_s=done / wall if wall > 0 else 0.0,
        records_per_s=records / wall if wall > 0 else 0.0,
        records=records,
        wall_s=wall,
        step_ms=Percentiles.of(step_times),
        wait_ms=Percentiles.of(waits),
        compute_ms=Percentiles.of(computes),
        name=name,
        gpu_util=tuple(float(s) for s in samples),
        gpu_note=note,
    )
