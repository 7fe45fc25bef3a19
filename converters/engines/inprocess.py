"""The reference engine: a two-pass job's steps (``engines.steps`` describes them) one after the other in
this process, its parallel steps on a ``pmap`` (one after the other by default; the local engine's
``localpool.LocalPool``).
"""
from __future__ import annotations

from functools import partial
from typing import Callable, Sequence

from ..shardset.manifest import Manifest
from .core import Outcome
from .group import finalize_outcome
from .steps import TwoPassJob, context_of, scatter_step, size_results, write_step

__all__ = ["run_job"]


def _serial(fn: Callable, items: Sequence) -> list:
    return [fn(x) for x in items]


def run_job(job: TwoPassJob, *, pmap: Callable[[Callable, Sequence], list] | None = None) -> Manifest:
    """Run every step of ``job`` in this process, in order; returns the manifest (the temporary area is
    removed on success and on failure). ``pmap(fn, items)`` (default: one after the other) runs the parallel
    steps (pre-pass, pass 1, sizes, scatter, pass 2) and returns their results in order, e.g. on a pool of
    local processes: the steps are the same, so are the bytes."""
    pmap = pmap or _serial
    try:
        units = job.units()
        ctx = context_of(job, pmap, units)
        summaries = pmap(partial(job.pass1, ctx=ctx), units)
        plan = job.plan(summaries, size_results(job, pmap, summaries), ctx)
        if plan.scatter:
            pmap(scatter_step(job), plan.scatter)
        results = write_step(job, pmap, plan.shards, after_writes=job.area.remove_temp)
        return finalize_outcome(job.area, job.output, job.schema, job.kind, Outcome.of(plan, results))
    finally:
        job.area.cleanup()
        job.area.release()
