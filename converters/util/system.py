"""Facts about the host that defaults depend on."""
from __future__ import annotations

import os

__all__ = ["cpu_count", "cache_root"]


def cpu_count() -> int:
    """vCPUs available to this process: ``SM_NUM_CPUS`` on SageMaker, else the affinity mask."""
    env = os.environ.get("SM_NUM_CPUS")
    if env and env.strip().isdigit() and int(env) > 0:
        return int(env)
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return os.cpu_count() or 1


def cache_root() -> str:
    """tfpipe's cache directory: ``$TFPIPE_CACHE``, else ``~/.cache/tfpipe`` (fetched shards, tuning results)."""
    return os.environ.get("TFPIPE_CACHE") or os.path.join(os.path.expanduser("~"), ".cache", "tfpipe")
