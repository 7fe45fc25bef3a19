"""bench.measure: accuracy on pipelines whose idle fraction is known by construction, verdicts,
percentiles, report validation and its JSON / metric-line formats."""
from __future__ import annotations

import json
import re
import time

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import bench
from bench.measure import Percentiles, Report, batch_size_of, measure, verdict_for
from bench.steps import simulated_step
from converters.util.errors import TfpipeError

tf = pytest.importorskip("tensorflow")


def expected_idle_pct(d_ms: float, s_ms: float) -> float:
    """Steady state of a producer taking d ms per batch, one element of prefetch, a step of s ms."""
    return 100.0 * max(0.0, d_ms - s_ms) / max(d_ms, s_ms)


class Durations(dict):
    """Batch id -> milliseconds actually spent (the producer's sleep, or the step), by its own clock."""

    def timed(self, key, fn, *args):
        t0 = time.perf_counter()
        out = fn(*args)
        self[int(key)] = (time.perf_counter() - t0) * 1e3
        return out


def generator_producer(d_ms: float, log: Durations, batch: int = 4):
    """A Python generator sleeping d ms per batch (GIL released while sleeping), then prefetch(1)."""
    def gen():
        i = 0
        while True:
            log.timed(i, time.sleep, d_ms / 1e3)
            yield np.arange(i * batch, (i + 1) * batch, dtype=np.int64)  # batch id = first // batch
            i += 1
    sig = tf.TensorSpec((batch,), tf.int64)
    return tf.data.Dataset.from_generator(gen, output_signature=sig).prefetch(1)


def py_function_producer(d_ms: float, log: Durations, batch: int = 4):
    """A pre-batched range mapped by a ``py_function`` sleeping d ms per batch, then prefetch(1)."""
    def slow(x):
        log.timed(int(x[0]) // batch, time.sleep, d_ms / 1e3)
        return x
    ds = tf.data.Dataset.range(1 << 30).batch(batch)
    return ds.map(lambda x: tf.py_function(slow, [x], tf.int64)).prefetch(1)


def timed_step(s_ms: float, log: Durations, batch: int = 4):
    step = simulated_step(s_ms, device="host")
    return lambda b: log.timed(int(b[0]) // batch, step, b)


def realized_idle_pct(produce: Durations, compute: Durations, first: int, last: int) -> float:
    """The construction with the durations that actually happened: batch k becomes ready d_k after
    batch k-1 was taken (one slot of prefetch), the step asks for it s_(k-1) after taking batch k-1, so
    step k waits max(0, d_k - s_(k-1)). This keeps OS scheduling jitter on a loaded machine (sleeps that
    overshoot) out of the reference without using any of ``measure``'s timestamps."""
    waits = [max(0.0, produce[k] - compute[k - 1]) for k in range(first, last + 1)]
    busy = [compute[k] for k in range(first, last + 1)]
    return 100.0 * sum(waits) / (sum(waits) + sum(busy))


# Times are ~100 ms so the fixed per-step cost of an iterator ``next()`` (~0.2–1 ms on a loaded 2-core VM,
# which the measure rightly counts as input wait) stays well inside the 3-point tolerance.
BASE_MS = 100.0
RATIOS = [0.25, 0.5, 0.8, 1.0, 1.25, 2.0, 4.0]  # d / s
STEPS, WARMUP = 25, 3


def _case(ratio):
    return (BASE_MS, BASE_MS / ratio) if ratio >= 1 else (BASE_MS * ratio, BASE_MS)


def _check_accuracy(make, ratio, attempts: int = 3):
    """Within 3 points of the construction. On this shared 2-core VM another process can hold both
    cores for tens of ms, delaying the consumer thread inside ``next()`` (rightly counted as wait, but not
    part of the construction); retries absorb such a burst, a systematic error fails every try."""
    d, s = _case(ratio)
    msgs = []
    for _ in range(attempts):
        produce, compute = Durations(), Durations()
        r = measure(make(d, produce), timed_step(s, compute), steps=STEPS, warmup=WARMUP)
        assert r.steps == STEPS and r.records == STEPS * 4
        nominal = expected_idle_pct(d, s)
        realized = realized_idle_pct(produce, compute, WARMUP, WARMUP + STEPS - 1)
        msgs.append(f"d={d} s={s}: measured {r.input_wait_pct:.2f}%, nominal {nominal:.2f}%, "
                    f"realized {realized:.2f}%")
        # realized durations are the nominal ones up to scheduling noise; measured is within 3 points
        if abs(r.input_wait_pct - realized) <= 3.0 and abs(realized - nominal) <= 10.0:
            return r
    pytest.fail("; ".join(msgs))


@pytest.mark.parametrize("ratio", RATIOS)
def test_idle_pct_matches_construction_generator(ratio):
    r = _check_accuracy(generator_producer, ratio)
    assert r.compute_ms.p50 >= _case(ratio)[1]  # the step never takes less than it was told


@pytest.mark.parametrize("ratio", [0.25, 2.0, 4.0])
def test_idle_pct_matches_construction_py_function_map(ratio):
    _check_accuracy(py_function_producer, ratio)


def test_fast_pipeline_is_not_input_bound_and_slow_one_is_highly():
    fast = measure(tf.data.Dataset.range(1 << 30).batch(8).prefetch(2), simulated_step(100, device="host"),
                   steps=10, warmup=2)
    slow = measure(generator_producer(60, Durations()), simulated_step(15, device="host"), steps=10, warmup=2)
    assert fast.verdict == "not input-bound"
    assert slow.verdict == "highly input-bound"
    assert fast.records_per_s > slow.records_per_s


@pytest.mark.parametrize("pct, verdict", [
    (0.0, "not input-bound"),
    (4.99, "not input-bound"),
    (5.0, "moderately input-bound"),
    (12.3, "moderately input-bound"),
    (20.0, "moderately input-bound"),
    (20.01, "highly input-bound"),
    (100.0, "highly input-bound"),
])
def test_verdict_thresholds(pct, verdict):
    assert verdict_for(pct) == verdict


@pytest.mark.parametrize("bad", [-0.1, 100.1, float("nan")])
def test_verdict_rejects_out_of_range(bad):
    with pytest.raises(ValueError, match="input_wait_pct"):
        verdict_for(bad)


@given(st.floats(0, 100), st.floats(0, 100))
def test_verdict_is_monotonic(a, b):
    order = {v: i for i, v in enumerate(bench.VERDICTS)}
    lo, hi = sorted((a, b))
    assert order[verdict_for(lo)] <= order[verdict_for(hi)]


@settings(max_examples=50)
@given(st.lists(st.floats(0, 1e4, allow_nan=False), min_size=1, max_size=200))
def test_percentiles_match_numpy(xs):
    p = Percentiles.of(xs)
    for q, got in ((50, p.p50), (90, p.p90), (99, p.p99)):
        assert got == pytest.approx(float(np.percentile(xs, q)), rel=1e-9, abs=1e-9)
    assert p.max == max(xs) and p.mean == pytest.approx(float(np.mean(xs)))
    assert p["p50"] == p.p50


def test_percentiles_rejects_empty_and_disorder():
    with pytest.raises(ValueError, match="at least one"):
        Percentiles.of([])
    with pytest.raises(ValueError, match="ordered"):
        Percentiles(p50=5, p90=1, p99=6, mean=3, max=6)
    with pytest.raises(ValueError, match="p50"):
        Percentiles(p50=-1, p90=1, p99=6, mean=3, max=6)


def _report(**kw):
    p = Percentiles.of([1.0, 2.0, 3.0])
    base = dict(steps=3, warmup=1, input_wait_pct=12.3, batches_per_s=45.6, records_per_s=23347.2, records=1536,
                wall_s=0.066, step_ms=p, wait_ms=p, compute_ms=p, name="vectorized")
    base.update(kw)
    return Report(**base)


@pytest.mark.parametrize("field, value", [
    ("steps", 0), ("warmup", -1), ("input_wait_pct", 101.0), ("input_wait_pct", -1.0),
    ("batches_per_s", -1.0), ("records", -5), ("gpu_util", (50.0, 120.0)),
])
def test_report_validates(field, value):
    with pytest.raises(ValueError, match=field):
        _report(**{field: value})


def test_report_json_round_trip():
    r = _report(gpu_util=(40.0, 60.0), gpu_note="NVML")
    doc = json.loads(r.to_json())
    assert doc["input_wait_pct"] == 12.3
    assert doc["verdict"] == "moderately input-bound"
    assert doc["steps"] == 3 and doc["name"] == "vectorized"
    assert set(doc["step_ms"]) == {"p50", "p90", "p99", "mean", "max"}
    assert doc["gpu_util_mean"] == 50.0
    assert doc["batches_per_s"] == 45.6


# what a SageMaker estimator would declare in metric_definitions
METRIC_DEFINITIONS = [
    {"Name": "input_wait_pct", "Regex": r"tfpipe: .*input_wait_pct=([0-9.]+);"},
    {"Name": "batches_per_s", "Regex": r"batches_per_s=([0-9.]+);"},
    {"Name": "records_per_s", "Regex": r"records_per_s=([0-9.]+);"},
    {"Name": "step_ms_p99", "Regex": r"step_ms_p99=([0-9.]+);"},
    {"Name": "gpu_util_pct", "Regex": r"gpu_util_pct=([0-9.]+);"},
]


def test_metric_line_is_captured_by_sagemaker_regexes():
    r = _report(gpu_util=(40.0, 60.0))
    line = r.metric_line()
    assert line.startswith("tfpipe: ") and "\n" not in line
    got = {d["Name"]: float(re.search(d["Regex"], line).group(1)) for d in METRIC_DEFINITIONS}
    assert got == {"input_wait_pct": 12.3, "batches_per_s": 45.6, "records_per_s": 23347.2,
                   "step_ms_p99": pytest.approx(r.step_ms.p99, abs=1e-3), "gpu_util_pct": 50.0}
    assert "gpu_util_pct" not in _report().metric_line()  # no GPU samples, no GPU metric


def test_measure_plain_iterable_and_batch_sizes():
    batches = [{"x": np.zeros((7, 3))}, (np.zeros((5,)), np.zeros((5,)))] * 5
    r = measure(batches, lambda b: None, steps=8, warmup=2)
    assert r.steps == 8
    assert r.records == 4 * 7 + 4 * 5
    assert r.input_wait_pct < 100.0


@pytest.mark.parametrize("batch, n", [
    ({"label": np.zeros(3), "ids": np.zeros((3, 39))}, 3),
    (({"ids": np.zeros((9, 2))}, np.zeros(9)), 9),
    (np.zeros((11, 4)), 11),
    (3, 1),
])
def test_batch_size_of(batch, n):
    assert batch_size_of(batch) == n


def test_measure_stops_when_dataset_ends(caplog):
    r = measure(range(5), lambda b: None, steps=10, warmup=2)
    assert r.steps == 3
    assert "ended after 3 of 10" in caplog.text
    with pytest.raises(TfpipeError, match="during warmup"):
        measure(range(1), lambda b: None, steps=10, warmup=2)
    with pytest.raises(TfpipeError, match="before any measured step"):
        measure(range(2), lambda b: None, steps=10, warmup=2)


@pytest.mark.parametrize("kw, match", [({"steps": 0}, "steps"), ({"warmup": -1}, "warmup")])
def test_measure_rejects_bad_arguments(kw, match):
    with pytest.raises(ValueError, match=match):
        measure(range(10), lambda b: None, **kw)


def test_step_outputs_are_synchronized():
    """A step returning a TF tensor is forced to complete inside the compute interval."""
    calls = []

    class Lazy:
        shape = ()

        def numpy(self):
            time.sleep(0.02)
            calls.append(1)
            return 0.0

    r = measure(range(10), lambda b: {"loss": Lazy()}, steps=5, warmup=1)
    assert len(calls) == 6
    assert r.compute_ms.p50 >= 19.0
    r = measure(tf.data.Dataset.range(10), lambda b: tf.reduce_sum(tf.ones((4, 4))) + tf.cast(b, tf.float32),
                steps=5, warmup=1)
    assert r.steps == 5


def test_public_api_is_lazy_and_functions():
    import importlib

    assert callable(bench.measure) and callable(bench.compare) and callable(bench.simulated_step)
    importlib.import_module("bench.compare")  # importing the submodules must not shadow the functions
    importlib.import_module("bench.measure")
    assert bench.measure.__name__ == "measure" and bench.compare.__name__ == "compare"
