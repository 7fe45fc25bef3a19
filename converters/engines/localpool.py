"""The local engine's processes: a two-pass job's parallel steps on this process and ``workers - 1`` forked ones.

``LocalPool(workers).map(fn, items)`` is ``run_job``'s ``pmap``. This process works too (it would only wait
otherwise): ``--workers N`` is N processes converting, this one included, and a step of one item always runs
here. Worker processes start when a step first has two items or more, at its start (forked: they have this
process's modules; each loads the compiled kernels its steps use again, about 0.1 CPU-s for ``convert
tabular``, while this process loads them too). Measured on a 2-core machine, starting them at once instead of
after this process had run the step's first item alone (which spared that load) made ``convert tabular
--workers 2`` take 0.80x of ``--workers 1``'s wall time on 450,000 rows in three files, where waiting for that
first item gave 0.87x (measured when a load took 0.4 CPU-s). Workers die with this process (``util.workerpool``).

Then each worker is given its next item as soon as it is free (a thread of this process waits on the workers
while this process works on its own items): none is queued ahead of a worker, so the last items go to
whichever process is free. This process takes its items from the end of the list; results come back in item
order.
"""
from __future__ import annotations

import logging
from collections import deque
from typing import Callable, Sequence

from ..util.workerpool import worker_pool

__all__ = ["LocalPool", "pool_width"]

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
            log.debug("starting %d worker process(es)", self.workers - 1)
            self._pool = worker_pool(self.workers - 1)
        self._spread(fn, items, todo, results)
        return results

    def _spread(self, fn: Callable, items: list, todo: deque, results: list) -> None:
        """The step's remaining items: the workers take theirs from the front of ``todo``, each its next one as
        soon as it is free (a feeding thread here waits on them), while this process takes its own from the
        end; none is queued ahead of a worker. The first error (here or in a worker) ends the step."""
        import threading
        from concurrent.futures import FIRST_COMPLETED, wait

        lock = threading.Lock()
        inflight: dict = {}
        errors: list[BaseException] = []

        def give() -> None:  # (under ``lock``) the next item from the front to a free worker
            i = todo.popleft()
            inflight[self._pool.submit(fn, items[i])] = i

        def feed() -> None:
            while True:
                with lock:
                    waiting = list(inflight)
                if not waiting:
                    return
                done, _ = wait(waiting, return_when=FIRST_COMPLETED)
                with lock:
                    for f in done:
                        i = inflight.pop(f)
                        if f.cancelled():
                            continue
                        if f.exception() is not None:
                            errors.append(f.exception())
                            todo.clear()
                        else:
                            results[i] = f.result()
                        if todo:
                            give()

        with lock:
            for _ in range(min(self.workers - 1, len(todo))):
                give()
        feeder = threading.Thread(target=feed, name="tfpipe-localpool-feed", daemon=True)
        feeder.start()
        try:
            while True:
                with lock:
                    if errors or not todo:
                        break
                    i = todo.pop()
                results[i] = fn(items[i])
        except BaseException:
            with lock:
                todo.clear()
                for f in inflight:
                    f.cancel()
            raise
        feeder.join()
        if errors:
            raise errors[0]


def pool_width(pmap) -> int:
    """The processes a step's ``pmap`` runs at once: a ``LocalPool``'s ``map`` its ``workers``, any other 1."""
    owner = getattr(pmap, "__self__", None)
    return owner.workers if isinstance(owner, LocalPool) else 1
