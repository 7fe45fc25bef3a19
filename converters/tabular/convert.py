"""The local engine of ``convert tabular``: the format's two-pass job (``job.TabularJob``), its parallel steps
on local processes (``engines.localpool``), the same steps and bytes as every other engine.

How many processes: ``workers`` (default: the usable cores), but never more than the input has work for —
one per unit of the pre-pass and of pass 1 (a plain text file over 32 MiB is read in 32 MiB byte ranges, any
other file whole) and one per ``BYTES_PER_WORKER`` of input (a smaller share costs a process more than it
saves) — and never more than the cores other processes leave idle (``util.system.cap_workers``). This process
is one of them; alone, it reads each file whole (the same bytes, without the counting runs of many units)."""
from __future__ import annotations

import logging
from dataclasses import replace

from ..engines.inprocess import run_job
from ..engines.localpool import LocalPool
from ..shardset.manifest import Manifest
from ..util.system import cap_workers, cpu_count
from .job import UNIT_BYTES, WHOLE, TabularJob

__all__ = ["run", "worker_count", "work_for", "BYTES_PER_WORKER"]

log = logging.getLogger(__name__)

BYTES_PER_WORKER = UNIT_BYTES  # one process per 32 MiB of input (as stored: compressed files count as stored)


def work_for(units) -> int:
    """The processes a job's ``units`` have work for: one per unit and per ``BYTES_PER_WORKER`` of input (at
    least 1)."""
    total = sum(u.stop - u.start for u in units)
    return max(1, min(len(units), -(-total // BYTES_PER_WORKER)))


def worker_count(workers: int | None, units) -> int:
    """The processes a run of ``units`` uses when ``workers`` are asked for (None: the usable cores)."""
    asked = cpu_count() if workers is None else workers
    if not isinstance(asked, int) or isinstance(asked, bool) or asked < 1:
        raise ValueError(f"workers must be an int >= 1, got {workers!r}")
    need = work_for(units)
    if asked > need:
        log.info("%d worker(s) asked for; the input (%d unit(s)) has work for %d", asked, len(units), need)
    return cap_workers(min(asked, need), "workers")


def run(inputs, out, options, *, workers: int | None = None, overwrite: bool = False, progress: bool = False,
        prep=None, **kwargs) -> Manifest:
    """Convert ``inputs`` into a shard set at ``out`` (see ``TabularOptions``); returns its manifest."""
    job = TabularJob.create(inputs, out, options, overwrite=overwrite, prep=prep, **kwargs)
    try:
        n = worker_count(workers, job.units())
        if n == 1 and "unit_bytes" not in kwargs:
            job = replace(job, unit_bytes=WHOLE)
    except BaseException:  # the run's area goes, as run_job would remove it
        job.area.cleanup()
        job.area.release()
        raise
    with LocalPool(n) as pool:
        return run_job(job, pmap=pool.map)
