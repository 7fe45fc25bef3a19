"""The local engine of ``convert tabular``: the format's two-pass job (``job.TabularJob``), its parallel steps
on local processes (``engines.localpool``), the same steps and bytes as every other engine.

How many processes: ``workers`` (default: the usable cores), but never more than the input has work for —
one per 32 MiB unit (a plain text file over 32 MiB in 32 MiB byte ranges, any other file whole) and one per
``BYTES_PER_WORKER`` of input (a smaller share costs a process more than it saves) — and never more than the
cores other processes leave idle (``util.system.cap_workers``). This process is one of them; alone, it reads
each file whole (the same bytes, without the counting runs of many units). With ``n`` processes a large plain
file is read in units of about ``1 / (UNITS_PER_WORKER * n)`` of the input, all of one size and at least
32 MiB (``unit_bytes_for``): enough units to keep every process busy to the end, few enough that the
vocabulary step merges few counting runs (the bytes are the same at any unit size)."""
from __future__ import annotations

import logging
from dataclasses import replace

from ..engines.inprocess import run_job
from ..engines.localpool import LocalPool
from ..shardset.manifest import Manifest
from ..util.system import cap_workers, cpu_count
from .job import UNIT_BYTES, WHOLE, TabularJob

__all__ = ["run", "worker_count", "work_for", "unit_bytes_for", "BYTES_PER_WORKER", "UNITS_PER_WORKER"]

log = logging.getLogger(__name__)

BYTES_PER_WORKER = UNIT_BYTES  # one process per 32 MiB of input (as stored: compressed files count as stored)
UNITS_PER_WORKER = 2  # a run of n processes reads its input in about 2n units


def work_for(units) -> int:
    """The processes a job's ``units`` have work for: one per unit and per ``BYTES_PER_WORKER`` of input (at
    least 1)."""
    total = sum(u.stop - u.start for u in units)
    return max(1, min(len(units), -(-total // BYTES_PER_WORKER)))


def unit_bytes_for(units, processes: int) -> int:
    """The unit size of a run of ``processes`` over ``units`` (planned at ``UNIT_BYTES``): ``WHOLE`` for one
    process, else about ``1 / (UNITS_PER_WORKER * processes)`` of the input, at least ``UNIT_BYTES``."""
    if processes <= 1:
        return WHOLE
    total = sum(u.stop - u.start for u in units)
    return max(UNIT_BYTES, -(-total // (UNITS_PER_WORKER * processes)))


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
        units = job.units()
        n = worker_count(workers, units)
        if "unit_bytes" not in kwargs:
            job = replace(job, unit_bytes=unit_bytes_for(units, n))
    except BaseException:  # the run's area goes, as run_job would remove it
        job.area.cleanup()
        job.area.release()
        raise
    with LocalPool(n) as pool:
        return run_job(job, pmap=pool.map)
