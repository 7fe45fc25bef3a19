"""One core for a fair comparison: pin every thread of this process to one CPU (``pinned``), and the throughput
record the converter benchmarks report (``rate``)."""
from __future__ import annotations

import os
from contextlib import contextmanager

__all__ = ["pinned", "rate"]


@contextmanager
def pinned(cpu: int | None):
    """Pin every thread of this process (TensorFlow's pools included) to one core; restore afterwards."""
    if not hasattr(os, "sched_setaffinity"):
        yield None
        return
    allowed = os.sched_getaffinity(0)
    core = min(allowed) if cpu is None else cpu
    if core not in allowed:
        raise ValueError(f"--cpu {core} is not one of the allowed cores {sorted(allowed)}")
    tids = [int(t) for t in os.listdir("/proc/self/task")] if os.path.isdir("/proc/self/task") else [0]
    old = {}
    for t in tids:
        try:
            old[t] = os.sched_getaffinity(t)
            os.sched_setaffinity(t, {core})
        except OSError:  # a thread that ended meanwhile
            pass
    try:
        yield core
    finally:
        for t, cpus in old.items():
            try:
                os.sched_setaffinity(t, cpus)
            except OSError:
                pass


def rate(nbytes: int, records: int, secs: float, cpu: float | None = None) -> dict:
    r = {"seconds": round(secs, 4), "mb_per_s": round(nbytes / secs / 1e6, 2),
         "records_per_s": round(records / secs, 1)}
    if cpu is not None:  # process CPU time: robust to other load on a shared machine
        r["cpu_seconds"] = round(cpu, 4)
        r["records_per_cpu_s"] = round(records / max(cpu, 1e-9), 1)
    return r
