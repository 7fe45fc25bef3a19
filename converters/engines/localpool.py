"""The local engine's processes: a two-pass job's parallel steps on this process and ``workers - 1`` forked ones.

``LocalPool(workers).map(fn, items)`` is ``run_job``'s ``pmap``. This process works too (it would only wait
otherwise): ``--workers N`` is N processes converting, this one included, and a step of one item always runs
here. Worker processes start only when a step first has two items or more, and only after this process has
run that step's first item itself: its modules are imported and its compiled kernels loaded by then, so
workers started by ``fork`` (``util.workerpool.start_method``) have them at no cost. Measured on a 2-core
machine, a ``convert tabular`` worker's first counting step cost 0.04 CPU-s forked after that warm-up, 0.4 CPU-s forked before
it (numba's cached kernels loaded again) and about 1 CPU-s started by ``spawn`` (an interpreter, the imports,
the kernels). Workers die with this process (``util.workerpool``).

Then each worker is given its next item when this process next looks (after each item of its own, or at once
while it waits): none is queued ahead of a worker, so the last items go to whichever process is free. This
process takes its items from the end of the list; results come back in item order.
"""
from __future__ import annotations

import logging
from collections import deque
from typing import Callable, Sequence

from ..util.workerpool import worker_pool

__all__ = ["LocalPool"]

log = logging.getLogger(__name__)


class LocalPool:
    """``workers`` processes, this one included; ``close()`` ends the others (use it as a context manager)."""

    def __init__(self, workers: int):
        if not isinstance(workers, int) or isinstance(workers, bool) or workers < 1:
            raise ValueError(f"workers must be an int >= 1, got {workers!r}")
        self.workers = workers
        self._pool = None

    def __enter__(self) -> "LocalPool":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def close(self) -> None:
        if self._pool is not None:
            self._pool.shutdown(wait=True, cancel_futures=True)
            self._pool = None

    def map(self, fn: Callable, items: Sequence) -> list:
        """``fn`` over ``items``, results in item order."""
        items = list(items)
        results: list = [None] * len(items)
        todo = deque(range(len(items)))
        if len(items) <= 1 or self.workers == 1:  # here: a worker would only add a round trip
            return [fn(x) for x in items]
        if self._pool is None:
            i = todo.popleft()
            results[i] = fn(items[i])  # here first: the step's kernels load in this process before any fork
            log.debug("starting %d worker process(es)", self.workers - 1)
            self._pool = worker_pool(self.workers - 1)
        self._spread(fn, items, todo, results)
        return results

    def _spread(self, fn: Callable, items: list, todo: deque, results: list) -> None:
        from concurrent.futures import FIRST_COMPLETED, wait

        inflight: dict = {}
        try:
            while todo or inflight:
                while todo and len(inflight) < self.workers - 1:  # none queued: the last items go to whoever is free
                    i = todo.popleft()
                    inflight[self._pool.submit(fn, items[i])] = i
                if todo:
                    i = todo.pop()
                    results[i] = fn(items[i])
                else:
                    wait(list(inflight), return_when=FIRST_COMPLETED)
                for f in [f for f in inflight if f.done()]:
                    results[inflight.pop(f)] = f.result()
        except BaseException:
            for f in inflight:
                f.cancel()
            raise
