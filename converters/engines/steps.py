"""The steps of a two-pass conversion: what a format's job must write (``TwoPassJob``), the capabilities an
engine asks a job for when it has them (``Prepass``, ``Sizing``, ``Scatter``, ``Lite``), and the helpers
every engine asks through.

An engine runs, for a job made by the driver (``registry.get(name).create_job(...)``: inputs expanded,
output checked, temporary area chosen):

1. ``units = job.units()`` — pure given the inputs' sizes; one element of work each.
2. the pre-pass, for a ``Prepass`` job only: if ``job.needs_prepass``, ``pre = [job.prepass(u) for u in
   units]`` (parallel), else ``pre = []``; then ``ctx = job.resolve(pre, pmap)`` (one task, whose
   independent parts — a tabular vocabulary per column — may run on the engine's ``pmap``; an engine
   without one passes None). A job without ``Prepass`` gets ``ctx = None`` (``context_of``).
3. pass 1: ``summaries = [job.pass1(u, ctx) for u in units]`` (parallel; results in any order).
4. the size step, for a ``Sizing`` job only: ``tasks = job.size_tasks(summaries)`` (one task, pure),
   ``sizes = [job.sizes(t) for t in tasks]`` (parallel); ``sizes = []`` otherwise (``size_results``).
5. ``plan = job.plan(summaries, sizes, ctx)`` (one task; reads what pass 1 and the size step left in the
   area): the shards, the merged accounting and the manifest's ``extra``.
6. the scatter step, only when ``plan.scatter`` (``--shuffle``): ``[job.scatter(t) for t in plan.scatter]``
   (parallel; every one done before any pass 2 starts). A plan with scatter tasks from a job without
   ``Scatter`` is a ``TfpipeError`` (``scatter_step``).
7. pass 2: ``results = [job.pass2(s) for s in plan.shards]`` (parallel; one shard each). A ``SplitWrite`` job
   on an engine with more processes than one (``write_step``) may write a large shard in parts instead:
   ``parts = job.split_shard(s, processes)`` (one task; ``[]``: the shard is written whole),
   ``[job.write_part(p) for p in parts]`` (parallel, beside the whole shards), then ``job.join_shard(parts)``
   (one task per shard: its ``ShardResult``, as ``pass2`` gives it). Once every record is written the run's
   temporary area is read no more: ``write_step``'s ``after_writes`` (the local engine's removal of that area)
   runs in a thread beside the joins, whose hashing leaves the other cores idle.
8. ``group.finalize_outcome(job.area, job.output, job.schema, job.kind, core.Outcome.of(plan, results))`` (one
   task; a plain set, or a group of per-label sets); on any failure instead: ``job.area.cleanup()`` and
   ``job.area.release()`` (the claim on the output).

``lite_of(job)`` is the job without what only pass 1 needs (``Lite``: a tokenizer file's bytes), else the job
itself: engines that ship the job with every step send the lite one to the others. Every argument and result
is a plain picklable value; steps talk to each other only through these values and the run's temporary area
under the output location (``area.RunArea``), so an engine may run each step in another process or on another
machine. Bad input never raises inside steps 2-4: it travels as an ``ErrorRecord`` and ``plan`` returns a
failed ``SetPlan`` whose error ``finalize`` raises (the first in input order, with the local converter's
message), so no shard is written and no manifest either.

``pmap(fn, items)`` below is an engine's way to run a parallel step: results in item order.
"""
from __future__ import annotations

import logging
import threading
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any, Callable, Protocol, Sequence, runtime_checkable

from ..util.errors import TfpipeError

if TYPE_CHECKING:
    from .core import SetPlan, ShardResult, ShardSpec

__all__ = ["TwoPassJob", "Prepass", "Sizing", "Scatter", "Lite", "SplitWrite", "needs_prepass", "resolve",
           "context_of", "size_tasks", "size_results", "scatter_step", "write_step", "lite_of"]

PMap = Callable[[Callable, Sequence], list]

log = logging.getLogger(__name__)


@runtime_checkable
class TwoPassJob(Protocol):
    """What every format's job writes (see the module docstring for the order)."""

    kind: str

    @property
    def area(self): ...
    @property
    def output(self): ...
    @property
    def schema(self): ...
    def units(self) -> list: ...
    def pass1(self, unit, ctx) -> Any: ...
    def plan(self, summaries: Sequence, sizes: Sequence, ctx=None) -> SetPlan: ...
    def pass2(self, spec: ShardSpec) -> ShardResult: ...


@runtime_checkable
class Prepass(Protocol):
    """A pre-pass over every unit (when ``needs_prepass``) and the context pass 1 gets from it."""

    needs_prepass: bool

    def prepass(self, unit) -> Any: ...
    def resolve(self, prepasses: Sequence, pmap: PMap | None = None) -> Any: ...


@runtime_checkable
class Sizing(Protocol):
    """A size step between pass 1 and the plan."""

    def size_tasks(self, summaries: Sequence) -> list: ...
    def sizes(self, task) -> Any: ...


@runtime_checkable
class Scatter(Protocol):
    """The scatter step of a plan with scatter tasks (``--shuffle``: ``engines.scatter``)."""

    def scatter(self, task) -> Any: ...


@runtime_checkable
class SplitWrite(Protocol):
    """Pass 2 of a large shard in parts by several processes (``engines.splitwrite``)."""

    def split_shard(self, spec: "ShardSpec", processes: int) -> list: ...
    def write_part(self, part) -> Any: ...
    def join_shard(self, parts: Sequence) -> "ShardResult": ...


@runtime_checkable
class Lite(Protocol):
    """A lighter copy of the job for every step but pass 1."""

    def lite(self) -> TwoPassJob: ...


def needs_prepass(job) -> bool:
    """Whether the engine runs ``job.prepass`` over the units."""
    return isinstance(job, Prepass) and bool(job.needs_prepass)


def resolve(job, prepasses: Sequence = (), pmap: PMap | None = None) -> Any:
    """Pass 1's context from the pre-pass results (``[]`` without a pre-pass), its parts on ``pmap`` (None:
    here, one after the other); None for a job without one."""
    return job.resolve(list(prepasses), pmap) if isinstance(job, Prepass) else None


def context_of(job, pmap: PMap, units: Sequence) -> Any:
    """Step 2: the pre-pass over ``units`` on ``pmap`` where the job needs one, then ``resolve`` (its parts
    on ``pmap`` too)."""
    return resolve(job, pmap(job.prepass, units) if needs_prepass(job) else [], pmap)


def size_tasks(job, summaries: Sequence) -> list:
    """The size step's tasks (``[]`` for a job without ``Sizing``)."""
    return list(job.size_tasks(summaries)) if isinstance(job, Sizing) else []


def size_results(job, pmap: PMap, summaries: Sequence) -> list:
    """Step 4: ``sizes`` for the plan (``[]`` for a job without ``Sizing``)."""
    tasks = size_tasks(job, summaries)
    return pmap(job.sizes, tasks) if tasks else []


def scatter_step(job) -> Callable:
    """``job.scatter``, for a plan with scatter tasks; a job without ``Scatter`` cannot run one."""
    if not isinstance(job, Scatter):
        raise TfpipeError(f"the {job.kind} job planned scatter tasks (--shuffle) but has no scatter step")
    return job.scatter


def write_step(job, pmap: PMap, shards: Sequence, *, after_writes: Callable[[], None] | None = None) -> list:
    """Pass 2 over ``shards`` on ``pmap``: each shard by one process, or, for a ``SplitWrite`` job on a pool of
    several processes (``localpool.pool_width``), a large shard in parts written at once, then joined. The
    results (one ``ShardResult`` per shard, in shard order) and the bytes are the same either way.
    ``after_writes``: called in a thread of its own while the parts are joined (and waited for before this
    returns), once every record is written; not called where nothing is joined."""
    from .localpool import pool_width

    width = pool_width(pmap)
    if width < 2 or not isinstance(job, SplitWrite):
        return pmap(job.pass2, shards)
    splits = [job.split_shard(s, width) for s in shards]
    for s, parts in zip(shards, splits):
        if parts:
            log.debug("shard %d: written in %d parts at once", s.index, len(parts))
    whole = [(job.pass2, s) for s, ps in zip(shards, splits) if not ps]
    rest = [(job.write_part, p) for ps in splits for p in ps[1:]]
    firsts = [(job.write_part, ps[0]) for ps in reversed(splits) if ps]
    # A LocalPool's own process takes its items from the end: the first parts, whose running hashes the joins
    # it runs continue (a part's result is only its count)
    written = iter(pmap(_run_task, whole + rest + firsts)[:len(whole)])
    with _beside(after_writes if firsts else None):
        joined = iter(pmap(job.join_shard, [ps for ps in splits if ps]))
    return [next(joined) if ps else next(written) for ps in splits]


@contextmanager
def _beside(fn: Callable[[], None] | None):
    """``fn()`` in a daemon thread while the block runs; the block's end waits for it."""
    if fn is None:
        yield
        return
    thread = threading.Thread(target=fn, name="tfpipe-after-writes", daemon=True)
    thread.start()
    try:
        yield
    finally:
        thread.join()


def _run_task(task):
    fn, arg = task
    return fn(arg)


def lite_of(job):
    """The job every step but pass 1 gets: ``job.lite()`` for a ``Lite`` job, else the job itself."""
    return job.lite() if isinstance(job, Lite) else job
