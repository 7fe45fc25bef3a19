"""Facts about the host that defaults depend on, and the limits derived from them."""
from __future__ import annotations

import logging
import os

__all__ = ["cpu_count", "cap_workers", "available_memory", "total_memory", "cache_root", "WORKERS_PER_CPU"]

log = logging.getLogger(__name__)

WORKERS_PER_CPU = 4  # more workers than this per vCPU only add memory and switching, never speed


def cpu_count() -> int:
    """vCPUs available to this process: ``SM_NUM_CPUS`` on SageMaker, else the affinity mask."""
    env = os.environ.get("SM_NUM_CPUS")
    if env and env.strip().isdigit() and int(env) > 0:
        return int(env)
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return os.cpu_count() or 1


def cap_workers(workers: int, what: str = "workers") -> int:
    """``workers`` capped at ``WORKERS_PER_CPU`` times the vCPUs, with a warning when capped."""
    limit = WORKERS_PER_CPU * cpu_count()
    if workers > limit:
        log.warning("%d %s asked for, but this machine has %d vCPU(s): using %d (%d per vCPU)", workers, what,
                    cpu_count(), limit, WORKERS_PER_CPU)
        return limit
    return workers


def available_memory() -> int | None:
    """Bytes of memory available for new allocations (``MemAvailable``, or the cgroup limit if lower);
    None when unknown."""
    avail = None
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    avail = int(line.split()[1]) * 1024
                    break
    except (OSError, ValueError):
        pass
    for path in ("/sys/fs/cgroup/memory.max", "/sys/fs/cgroup/memory/memory.limit_in_bytes"):
        try:
            with open(path) as f:
                raw = f.read().strip()
        except OSError:
            continue
        if raw.isdigit() and int(raw) < (1 << 60):
            avail = min(avail, int(raw)) if avail else int(raw)
        break
    return avail


def total_memory() -> int:
    """Physical RAM in bytes (psutil, else ``/proc/meminfo``; 0 when unknown)."""
    try:
        import psutil

        return int(psutil.virtual_memory().total)
    except ImportError:  # pragma: no cover - psutil is a dependency
        try:
            with open("/proc/meminfo") as f:
                for line in f:
                    if line.startswith("MemTotal:"):
                        return int(line.split()[1]) * 1024
        except (OSError, ValueError):
            pass
    return 0


def cache_root() -> str:
    """tfpipe's cache directory: ``$TFPIPE_CACHE``, else ``~/.cache/tfpipe`` (fetched shards, tuning results)."""
    return os.environ.get("TFPIPE_CACHE") or os.path.join(os.path.expanduser("~"), ".cache", "tfpipe")
