"""bench.core.steps: the simulated step takes the time asked, leaves the GIL to other threads, and (on a GPU)
keeps the device busy for that long."""
from __future__ import annotations

import statistics
import threading
import time

import pytest

from bench.core.steps import host_burn, host_wait, simulated_step


def _gpu() -> bool:
    try:
        import tensorflow as tf
    except ImportError:
        return False
    return bool(tf.config.list_physical_devices("GPU"))


HAS_GPU = _gpu()


@pytest.mark.parametrize("ms", [0, 1, 5, 20])
def test_host_step_duration(ms):
    """Never shorter than asked; and no longer than a plain ``time.sleep`` of the same length timed right
    beside it (the machine's own floor in this run: on a loaded machine both overshoot alike)."""
    step = simulated_step(ms, device="host")
    steps, sleeps = [], []
    for _ in range(9):
        t0 = time.perf_counter()
        assert step(object()) is None
        t1 = time.perf_counter()
        time.sleep(ms / 1e3)
        t2 = time.perf_counter()
        steps.append((t1 - t0) * 1e3)
        sleeps.append((t2 - t1) * 1e3)
    assert min(steps) >= ms  # never shorter than asked
    extra = statistics.median(s - r for s, r in zip(steps, sleeps))
    assert extra < 2.0, (steps, sleeps)
    assert step.device == "host" and step.ms == ms


def test_host_wait_leaves_the_gil_to_other_threads():
    """A producer thread doing 1 ms sleeps keeps ticking while the step waits 100 ms."""
    ticks = []
    stop = threading.Event()

    def producer():
        while not stop.is_set():
            time.sleep(0.001)
            ticks.append(time.perf_counter())

    th = threading.Thread(target=producer)
    th.start()
    time.sleep(0.01)
    t0 = time.perf_counter()
    host_wait(0.1)
    t1 = time.perf_counter()
    stop.set()
    th.join()
    during = [t for t in ticks if t0 <= t <= t1]
    # a step holding the GIL would allow at most a tick or two; sleeping lets it run ~every ms
    assert len(during) >= 20, len(during)


@pytest.mark.parametrize("bad", [-1, "10", None, True, float("nan")])
def test_simulated_step_rejects_bad_ms(bad):
    with pytest.raises(ValueError, match="milliseconds"):
        simulated_step(bad, device="host")


def test_simulated_step_rejects_bad_device():
    with pytest.raises(ValueError, match="device"):
        simulated_step(5, device="tpu")


@pytest.mark.skipif(HAS_GPU, reason="checks the no-GPU path")
def test_auto_without_gpu_uses_host_and_gpu_is_refused():
    assert simulated_step(1).device == "host"
    with pytest.raises(ValueError, match="no GPU"):
        simulated_step(1, device="gpu")


@pytest.mark.skipif(not HAS_GPU, reason="needs a GPU")
@pytest.mark.parametrize("ms", [5, 20])
def test_gpu_step_is_calibrated(ms):
    step = simulated_step(ms, device="gpu")
    assert step.device == "gpu"
    times = []
    for _ in range(9):
        t0 = time.perf_counter()
        step(None).numpy()  # measure synchronizes the same way
        times.append((time.perf_counter() - t0) * 1e3)
    assert abs(statistics.median(times) - ms) < max(1.0, 0.15 * ms), times


@pytest.mark.parametrize("seconds", [0.005, 0.03])
def test_host_burn_uses_the_cpu_time_asked(seconds):
    """The CPU step uses at least the CPU time asked, by the process's own CPU clock (independent of the thread
    clock the loop watches), and not much more than its wall time allows."""
    c0, t0 = time.process_time(), time.perf_counter()
    host_burn(seconds)
    cpu, wall = time.process_time() - c0, time.perf_counter() - t0
    assert cpu >= seconds * 0.95
    assert wall >= cpu * 0.9


@pytest.mark.parametrize("text, ok", [("0", True), ("60000", True), ("5.5", True), ("60000.1", False),
                                      ("1e18", False), ("-0.1", False), ("nan", False), ("inf", False), ("x", False)])
def test_step_ms_argument_is_bounded(text, ok):
    import argparse

    from converters.cli.types import step_milliseconds as step_ms

    if ok:
        assert step_ms(text) == float(text)
    else:
        with pytest.raises(argparse.ArgumentTypeError, match="from 0 to 60000"):
            step_ms(text)
