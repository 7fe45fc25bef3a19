"""The local engine of ``convert tabular``: the format's two-pass job (``job.TabularJob``), its parallel steps
on a pool of local processes (``workers``), the same steps and bytes as every other engine."""
from __future__ import annotations

import logging
import multiprocessing
from concurrent.futures import ProcessPoolExecutor

from ..engines.inprocess import run_job
from ..shardset.manifest import Manifest
from ..util.system import cpu_count
from .job import TabularJob

__all__ = ["run"]

log = logging.getLogger(__name__)


def run(inputs, out, options, *, workers: int | None = None, overwrite: bool = False, progress: bool = False,
        prep=None, **kwargs) -> Manifest:
    """Convert ``inputs`` into a shard set at ``out`` (see ``TabularOptions``); returns its manifest."""
    job = TabularJob.create(inputs, out, options, overwrite=overwrite, prep=prep, **kwargs)
    workers = min(workers or cpu_count(), len(job.paths))
    if workers <= 1:
        return run_job(job)
    with ProcessPoolExecutor(workers, mp_context=multiprocessing.get_context("spawn")) as pool:
        return run_job(job, pmap=lambda fn, items: list(pool.map(fn, items)))
