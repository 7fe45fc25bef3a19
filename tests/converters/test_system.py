"""converters.util.system: the CPUs a process may use (affinity, cgroup quota) and the worker cap by load."""
import logging
import os

import pytest

from converters.util import system


@pytest.mark.parametrize("quota, period, expected", [
    ("150000 100000", None, 1.5),          # cgroup v2 cpu.max
    ("max 100000", None, None),            # v2, unlimited
    ("200000", "100000", 2.0),             # cgroup v1 cfs_quota_us / cfs_period_us
    ("-1", "100000", None),                # v1, unlimited
    ("garbage", None, None),
])
def test_cpu_quota_reads_cgroup_files(tmp_path, quota, period, expected):
    q = tmp_path / "quota"
    q.write_text(quota + "\n")
    p = None
    if period is not None:
        p = tmp_path / "period"
        p.write_text(period + "\n")
    files = ((str(tmp_path / "absent"), None), (str(q), str(p) if p else None))
    assert system.cpu_quota(files) == expected


def test_cpu_count_is_capped_by_the_quota(monkeypatch):
    monkeypatch.delenv("SM_NUM_CPUS", raising=False)
    monkeypatch.setattr(system, "cpu_quota", lambda: 0.5)
    assert system.cpu_count() == 1
    monkeypatch.setattr(system, "cpu_quota", lambda: None)
    assert system.cpu_count() == len(os.sched_getaffinity(0))


@pytest.mark.parametrize("cpus, load, expected", [
    (2, 0.9, 2),      # only this process running
    (2, 3.0, 1),      # two other busy processes on 2 cores: no core of a second worker's own
    (8, 4.0, 5),
    (2, 40.0, 1),     # never below one
])
def test_idle_cpus_from_the_load(monkeypatch, cpus, load, expected):
    monkeypatch.setattr(system, "cpu_count", lambda: cpus)
    monkeypatch.setattr(os, "getloadavg", lambda: (load, load, load))
    assert system.idle_cpus() == expected


@pytest.mark.parametrize("asked, load, ignore, expected", [
    (2, 3.0, False, 1),     # busy host: capped to one worker, never slower than one
    (2, 3.0, True, 2),      # TFPIPE_IGNORE_LOAD: as asked
    (2, 0.5, False, 2),     # quiet host: as asked
    (100, 0.5, False, 8),   # WORKERS_PER_CPU x 2 vCPUs
])
def test_cap_workers(monkeypatch, caplog, asked, load, ignore, expected):
    monkeypatch.setattr(system, "cpu_count", lambda: 2)
    monkeypatch.setattr(os, "getloadavg", lambda: (load, load, load))
    if ignore:
        monkeypatch.setenv(system.IGNORE_LOAD_ENV, "1")
    else:
        monkeypatch.delenv(system.IGNORE_LOAD_ENV, raising=False)
    with caplog.at_level(logging.WARNING, logger="converters.util.system"):
        assert system.cap_workers(asked) == expected
    assert bool(caplog.records) == (expected != asked)
