"""The local engine's processes (``engines.localpool``): this process plus ``workers - 1`` workers, started only
when a step has two items or more; results in item order; a free worker gets its next item at once; an error
in any process ends the step with that error."""
from __future__ import annotations

import os

import numpy as np
import pytest

from converters.engines.localpool import LocalPool
from converters.util.errors import TfpipeError


def _pid(x):
    return x, os.getpid()


def _fail_on_3(x):
    if x == 3:
        raise ValueError(f"item {x} is bad (pid {os.getpid()})")
    return x


@pytest.mark.parametrize("workers, steps, processes", [
    (1, [5, 3], 1),         # one process: everything here
    (2, [1, 1, 1], 1),      # steps of one item never start a worker
    (2, [0, 6, 1], 2),      # the first step with two items starts one worker
    (3, [2, 9], 3),
    (4, [9], 4),
], ids=["one", "single-items", "two", "three", "four"])
def test_items_in_order_on_at_most_workers_processes(workers, steps, processes):
    me, seen = os.getpid(), set()
    with LocalPool(workers) as pool:
        for n in steps:
            got = pool.map(_pid, range(n))
            assert [x for x, _ in got] == list(range(n))
            if n == 1:
                assert got[0][1] == me  # a step of one item runs here
            seen |= {p for _, p in got}
        started = pool._pool is not None
    assert me in seen and len(seen) <= processes
    assert started == (processes > 1)


def _nap(x):
    import time

    time.sleep(x)
    return os.getpid()


def test_a_free_worker_gets_its_next_item_while_this_process_works():
    """This process takes the last item (a long one); the worker takes the others one after the other as it
    gets free, without waiting for this process to look."""
    items = [0.02] * 6 + [3.0]
    with LocalPool(2) as pool:
        pool.map(_nap, [0, 0])  # the worker started
        pids = pool.map(_nap, items)
    me = os.getpid()
    assert pids[-1] == me and all(p != me for p in pids[:-1])


@pytest.mark.parametrize("workers", [1, 2, 3])
def test_an_error_in_any_process_ends_the_step(workers):
    with LocalPool(workers) as pool:
        assert pool.map(_fail_on_3, [0, 1]) == [0, 1]
        with pytest.raises(ValueError, match="item 3 is bad"):
            pool.map(_fail_on_3, range(8))
        assert pool.map(_fail_on_3, [4, 5, 6]) == [4, 5, 6]  # the pool still works


def test_pool_width_is_the_processes_a_pmap_runs_at_once():
    from converters.engines.localpool import pool_width

    assert pool_width(LocalPool(3).map) == 3
    assert pool_width(map) == pool_width(None) == pool_width(lambda fn, items: []) == 1


@pytest.mark.parametrize("workers", [0, -1, 1.5, True, "2"])
def test_bad_worker_counts_are_refused(workers):
    with pytest.raises(ValueError, match=f"workers must be an int >= 1, got {workers!r}"):
        LocalPool(workers)


@pytest.mark.parametrize("write", [
    lambda area: area.put_array("u0000001.len", np.arange(3)),
    lambda area: area.temp().write_bytes_atomic("x.bin", b"x"),
    lambda area: area.temp().staging_dir(),
    lambda area: area.output().staging_dir(),  # where pass 2 opens its temporary shard files
], ids=["put-array", "write-bytes", "area-staging-dir", "output-staging-dir"])
def test_a_worker_writes_nothing_once_its_runs_area_is_gone(tmp_path, monkeypatch, write):
    """A worker left behind by a killed run (or still finishing when a later run took the output over) neither
    re-creates the run's temporary area nor opens files beside the set."""
    from converters.engines.area import prepare_run
    from converters.util import workerpool

    out = tmp_path / "out"
    area = prepare_run(str(out), overwrite=False)
    try:
        monkeypatch.setattr(workerpool, "_IN_WORKER", True)
        area.put_array("u0000000.len", np.arange(3))  # while the run lasts, a worker writes
        before = sorted(os.listdir(out))
        area.remove_temp()
        with pytest.raises(TfpipeError, match=r"temporary area .*\.tfpipe-tmp-.* is gone: its run has ended"):
            write(area)
        assert sorted(os.listdir(out)) == [n for n in before if n != f".tfpipe-tmp-{area.run_id}"]
    finally:
        area.release()
