"""The contract between a format job and an engine (``TwoPassJob``), and the reference engine that runs a job's
steps one after the other in this process.

An engine runs, for a job made by the driver (``LibsvmJob.create`` / ``TextJob.create``: inputs expanded,
output checked, temporary area chosen):

1. ``units = job.units()`` — pure given the inputs' sizes; one element of work each.
2. only if ``job.needs_prepass``: ``pre = [job.prepass(u) for u in units]`` (parallel), then
   ``ctx = job.resolve(pre)`` (one task); otherwise ``ctx = job.resolve([])``.
3. ``summaries = [job.pass1(u, ctx) for u in units]`` (parallel; results in any order).
4. ``tasks = job.size_tasks(summaries)`` (one task, pure), ``sizes = [job.sizes(t) for t in tasks]`` (parallel).
5. ``plan = job.plan(summaries, sizes, ctx)`` (one task; reads what pass 1 / sizes left in the area).
6. only with ``--shuffle``: ``[job.scatter(t) for t in plan.scatter]`` (parallel; every one done before any
   pass 2 starts).
7. ``results = [job.pass2(s) for s in plan.shards]`` (parallel; one shard each).
8. ``group.finalize_outcome(job.area, job.output, job.schema, job.kind, core.Outcome.of(plan, results))`` (one
   task; a plain set, or a group of per-label sets); on any failure instead: ``job.area.cleanup()`` and
   ``job.area.release()`` (the claim on the output).

``job.lite()`` is the job without what only pass 1 needs (a tokenizer file's bytes): engines that ship the
job with every step send the lite one to the others. Every argument and result is a plain picklable value; steps talk to each other only through these values and
the run's temporary area under the output location (``area.RunArea``), so an engine may run each step in
another process or on another machine. Bad input never raises inside steps 2-4: it travels as an
``ErrorRecord`` and ``plan`` returns a failed ``SetPlan`` whose error ``finalize`` raises (the first in input
order, with the local converter's message), so no shard is written and no manifest either.
"""
from __future__ import annotations

from functools import partial
from typing import Any, Callable, Protocol, Sequence

from ..shardset.manifest import Manifest
from .core import Outcome, SetPlan, ShardResult, ShardSpec
from .group import finalize_outcome

__all__ = ["TwoPassJob", "run_job"]


class TwoPassJob(Protocol):
    """What an engine calls (see the module docstring for the order)."""

    kind: str
    needs_prepass: bool

    @property
    def area(self): ...
    @property
    def output(self): ...
    @property
    def schema(self): ...
    def units(self) -> list: ...
    def prepass(self, unit) -> Any: ...
    def resolve(self, prepasses: Sequence) -> Any: ...
    def pass1(self, unit, ctx) -> Any: ...
    def size_tasks(self, summaries: Sequence) -> list: ...
    def sizes(self, task) -> Any: ...
    def plan(self, summaries: Sequence, sizes: Sequence, ctx=None) -> SetPlan: ...
    def scatter(self, task) -> Any: ...
    def pass2(self, spec: ShardSpec) -> ShardResult: ...
    def lite(self) -> "TwoPassJob": ...


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
        ctx = job.resolve(pmap(job.prepass, units) if job.needs_prepass else [])
        summaries = pmap(partial(job.pass1, ctx=ctx), units)
        sizes = pmap(job.sizes, job.size_tasks(summaries))
        plan = job.plan(summaries, sizes, ctx)
        pmap(job.scatter, plan.scatter)
        results = pmap(job.pass2, plan.shards)
        return finalize_outcome(job.area, job.output, job.schema, job.kind, Outcome.of(plan, results))
    finally:
        job.area.cleanup()
        job.area.release()
