"""bench.infra.nvml: the unavailable path everywhere; real sampling only where an NVIDIA GPU and pynvml exist."""
from __future__ import annotations

import importlib.util
import time

import pytest

from bench.core.measure import measure
from bench.infra.nvml import GpuSampler, nvml_status

AVAILABLE, STATUS = nvml_status()


@pytest.mark.skipif(AVAILABLE, reason="checks the not-available path")
def test_sampler_without_nvml_reports_why():
    assert STATUS.startswith("not available")
    if importlib.util.find_spec("pynvml") is None:
        assert "nvidia-ml-py" in STATUS
    s = GpuSampler(interval_s=0.01)
    s.start()
    time.sleep(0.03)
    samples, note = s.stop()
    assert samples == () and note == STATUS
    r = measure(range(5), lambda b: None, steps=3, warmup=0, gpu_sampler=GpuSampler())
    assert r.gpu_util == () and r.gpu_note.startswith("not available")
    r = measure(range(5), lambda b: None, steps=3, warmup=0)  # default: "auto"
    assert r.gpu_util == () and r.gpu_note == STATUS
    assert measure(range(5), lambda b: None, steps=3, warmup=0, gpu_sampler=None).gpu_note == ""
    with pytest.raises(ValueError, match="gpu_sampler"):
        measure(range(5), lambda b: None, steps=3, gpu_sampler="yes")
    assert "gpu_util_pct" not in r.metric_line()


def test_sampler_validates_interval_and_double_start():
    with pytest.raises(ValueError, match="interval_s"):
        GpuSampler(interval_s=0)
    s = GpuSampler(interval_s=0.01)
    s.start()
    if s.available:
        with pytest.raises(RuntimeError, match="already started"):
            s.start()
    s.stop()


@pytest.mark.skipif(not AVAILABLE, reason="needs an NVIDIA GPU and nvidia-ml-py")
def test_sampler_collects_utilization_every_interval():
    s = GpuSampler(interval_s=0.1)
    s.start()
    time.sleep(0.55)
    samples, note = s.stop()
    assert 4 <= len(samples) <= 8
    assert all(0 <= u <= 100 for u in samples)
    assert "NVML" in note
    r = measure(range(10), lambda b: time.sleep(0.06), steps=9, warmup=0, gpu_sampler="auto")
    assert r.gpu_util and "gpu_util_pct=" in r.metric_line()
