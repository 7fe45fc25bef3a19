"""``configure_threads``: TensorFlow's intra/inter-op thread pools and OpenMP settings, set once, early.

Defaults (starting points, to be confirmed by ``tfpipe bench threads``):

- ``intra`` = this process's vCPUs (:func:`process_cpus`: ``SM_NUM_CPUS`` on SageMaker, else the CPU affinity,
  capped by the cgroup quota, divided among the host's local ranks): one op (a matmul, a batched parse) may
  use every core that is this rank's share.
- ``inter`` = half the vCPUs (at least 1) — about the physical cores on hyperthreaded hosts: independent ops
  run side by side without oversubscribing the intra-op pool. tf.data has its own thread pool and is not
  limited by either.
- ``omp`` (``OMP_NUM_THREADS``, used by MKL/oneDNN) = half the vCPUs (at least 1): OpenMP threads do not gain
  from hyperthreads and oversubscription hurts. ``KMP_AFFINITY=granularity=fine,compact,1,0`` (Intel's
  recommendation for TensorFlow with MKL) unless already set.

Must run before TensorFlow executes its first op (TensorFlow fixes its pools then); otherwise a
``TfpipeError`` says so. Environment variables take effect for libraries initialized afterwards.
"""
from __future__ import annotations

import logging
import os
from dataclasses import dataclass

from converters.util.checks import set_int
from converters.util.errors import TfpipeError
from .plan.cpushare import local_ranks, process_cpus

__all__ = ["ThreadConfig", "default_threads", "configure_threads", "process_cpus", "local_ranks",
           "KMP_AFFINITY_DEFAULT"]

log = logging.getLogger(__name__)

KMP_AFFINITY_DEFAULT = "granularity=fine,compact,1,0"


@dataclass(frozen=True)
class ThreadConfig:
    intra: int
    inter: int
    omp: int
    kmp_affinity: str

    def __post_init__(self):
        for name in ("intra", "inter", "omp"):
            set_int(self, name, name=f"{name} threads", minimum=1)


def default_threads(intra: int | None = None, inter: int | None = None, omp: int | None = None,
                    cpus: int | None = None) -> ThreadConfig:
    """The settings ``configure_threads`` would apply (pure, apart from reading the CPU count)."""
    cpus = cpus or process_cpus()
    half = max(1, cpus // 2)
    return ThreadConfig(intra=cpus if intra is None else intra, inter=half if inter is None else inter,
                        omp=half if omp is None else omp,
                        kmp_affinity=os.environ.get("KMP_AFFINITY", KMP_AFFINITY_DEFAULT))


def configure_threads(intra: int | None = None, inter: int | None = None, omp: int | None = None) -> ThreadConfig:
    """Set TensorFlow's intra/inter-op parallelism, ``OMP_NUM_THREADS`` and ``KMP_AFFINITY``; return them."""
    cfg = default_threads(intra, inter, omp)
    os.environ["OMP_NUM_THREADS"] = str(cfg.omp)
    os.environ["KMP_AFFINITY"] = cfg.kmp_affinity
    import tensorflow as tf

    th = tf.config.threading
    if (th.get_intra_op_parallelism_threads(), th.get_inter_op_parallelism_threads()) == (cfg.intra, cfg.inter):
        return cfg
    try:
        th.set_intra_op_parallelism_threads(cfg.intra)
        th.set_inter_op_parallelism_threads(cfg.inter)
    except RuntimeError as exc:
        raise TfpipeError(f"configure_threads must be called before TensorFlow runs its first op (call it at the "
                          f"top of the training script, before building datasets or models): {exc}") from None
    log.info("threads: intra=%d inter=%d OMP_NUM_THREADS=%d KMP_AFFINITY=%s", cfg.intra, cfg.inter, cfg.omp,
             cfg.kmp_affinity)
    return cfg
