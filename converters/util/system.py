"""Facts about the host that defaults depend on, and the limits derived from them."""
from __future__ import annotations

import logging
import math
import os

__all__ = ["cpu_count", "cpu_quota", "idle_cpus", "cap_workers", "available_memory", "total_memory", "cache_root",
           "scratch_root", "WORKERS_PER_CPU", "IGNORE_LOAD_ENV", "SAGEMAKER_SCRATCH"]

log = logging.getLogger(__name__)

IGNORE_LOAD_ENV = "TFPIPE_IGNORE_LOAD"  # set (tests, benchmarks of scaling): workers are not capped by the load
WORKERS_PER_CPU = 4  # more workers than this per vCPU only add memory and switching, never speed


def cpu_count() -> int:
    """vCPUs available to this process: ``SM_NUM_CPUS`` on SageMaker, else the affinity mask, capped by the
    cgroup's CPU quota (``cpu.max``; a container limited to 1.5 CPUs on a 64-core host counts 2)."""
    env = os.environ.get("SM_NUM_CPUS")
    if env and env.strip().isdigit() and int(env) > 0:
        n = int(env)
    else:
        try:
            n = len(os.sched_getaffinity(0))
        except (AttributeError, OSError):
            n = os.cpu_count() or 1
    quota = cpu_quota()
    return max(1, min(n, math.ceil(quota))) if quota is not None else n


_QUOTA_FILES = (("/sys/fs/cgroup/cpu.max", None),                      # cgroup v2: "<quota|max> <period>"
                ("/sys/fs/cgroup/cpu/cpu.cfs_quota_us", "/sys/fs/cgroup/cpu/cpu.cfs_period_us"))  # cgroup v1


def cpu_quota(files=_QUOTA_FILES) -> float | None:
    """CPUs this process's cgroup may use (quota / period, e.g. 1.5), or None when unlimited or unknown."""
    for quota_path, period_path in files:
        try:
            with open(quota_path) as f:
                fields = f.read().split()
            if period_path is not None:
                with open(period_path) as f:
                    fields += f.read().split()
        except OSError:
            continue
        if len(fields) >= 2 and fields[0].lstrip("-").isdigit() and fields[1].isdigit():
            quota, period = int(fields[0]), int(fields[1])
            return quota / period if quota > 0 and period > 0 else None
        return None
    return None


def idle_cpus(own: float = 1.0) -> int:
    """vCPUs not already busy with other processes: :func:`cpu_count` less the 1-minute load average (less
    ``own``, the runnable threads of this process counted in it), at least 1. A loadavg on a host sees all
    its processes, so this is an upper bound inside a container."""
    cpus = cpu_count()
    try:
        load = os.getloadavg()[0]
    except (AttributeError, OSError):
        return cpus
    return max(1, min(cpus, math.floor(cpus - max(0.0, load - own) + 0.5)))


def cap_workers(workers: int, what: str = "workers") -> int:
    """``workers`` capped at ``WORKERS_PER_CPU`` times the vCPUs, and, when other processes keep some vCPUs
    busy, at the vCPUs they leave idle (:func:`idle_cpus`): a worker with no core of its own only adds
    handovers (on a busy 2-core host two workers ran at 0.8× one). Each cap is logged."""
    limit = WORKERS_PER_CPU * cpu_count()
    if workers > limit:
        log.warning("%d %s asked for, but this machine has %d vCPU(s): using %d (%d per vCPU)", workers, what,
                    cpu_count(), limit, WORKERS_PER_CPU)
        workers = limit
    idle = idle_cpus()
    if idle < cpu_count() and workers > idle and not os.environ.get(IGNORE_LOAD_ENV):
        log.warning("%d %s asked for, but other processes keep all but %d of the %d vCPU(s) busy (1-minute load "
                    "%.1f): using %d", workers, what, idle, cpu_count(), _load(), idle)
        workers = idle
    return workers


def _load() -> float:
    try:
        return os.getloadavg()[0]
    except (AttributeError, OSError):
        return 0.0


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


SAGEMAKER_SCRATCH = "/tmp"  # SageMaker training's scratch space, on the instance's storage volume (EBS or NVMe)


def _sagemaker_training() -> bool:
    return bool(os.environ.get("SM_CURRENT_HOST") or os.environ.get("TRAINING_JOB_NAME")
                or os.path.exists("/opt/ml/input/config/resourceconfig.json"))


def scratch_root() -> tuple[str, str]:
    """Where bulky host-local copies of data go (the stream cache, downloaded shards), and why there:
    ``$TFPIPE_CACHE``; else ``$TMPDIR/tfpipe`` (batch schedulers point it at the node's scratch disk); else, in
    a SageMaker training job, ``/tmp/tfpipe`` (its documented scratch space, on the instance's storage volume,
    where the home directory is on the small system disk); else ``~/.cache/tfpipe``."""
    if os.environ.get("TFPIPE_CACHE"):
        return os.environ["TFPIPE_CACHE"], "$TFPIPE_CACHE"
    if os.environ.get("TMPDIR"):
        return os.path.join(os.environ["TMPDIR"], "tfpipe"), "$TMPDIR/tfpipe"
    if _sagemaker_training():
        return os.path.join(SAGEMAKER_SCRATCH, "tfpipe"), "SageMaker training's scratch space /tmp"
    return cache_root(), "~/.cache/tfpipe (no $TFPIPE_CACHE, no $TMPDIR)"
