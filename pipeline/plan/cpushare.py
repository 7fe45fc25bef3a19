"""This process's share of the host's vCPUs: the affinity/cgroup quota divided among the host's local ranks
(``tf.data``'s thread pool, an interleave's threads and ``configure_threads`` are sized to it)."""
from __future__ import annotations

import logging

from converters.util.errors import TfpipeError
from converters.util.system import cpu_count

__all__ = ["local_ranks", "process_cpus"]

log = logging.getLogger(__name__)


def local_ranks(env=None) -> int:
    """Data-parallel ranks on this host (SageMaker, Horovod, Open MPI, as ``sharding.topology`` reads them);
    1 when unknown or the environment is inconsistent (the thread sizes must never stop a job)."""
    from sharding.topology import Topology

    try:
        return max(1, Topology.from_env(env).workers_per_host)
    except (TfpipeError, ValueError, OSError) as exc:
        log.debug("local ranks unknown (%s): sizing threads for one", exc)
        return 1


def process_cpus(env=None) -> int:
    """vCPUs this process may use: the affinity/cgroup quota (``cpu_count``) shared among the host's local
    ranks, at least 1. Thread pools sized to every core in every rank fight over the same cores."""
    return max(1, cpu_count() // local_ranks(env))
