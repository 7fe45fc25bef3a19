import threading
import time
from concurrent.futures import ThreadPoolExecutor

import pytest

from converters.util.ordered import ordered_map


@pytest.mark.parametrize("inflight", [1, 2, 5, 100])
def test_results_in_input_order_whatever_the_finishing_order(inflight):
    def work(i):
        time.sleep(0.002 * ((7 * i) % 5))  # later items often finish first
        return i * i

    with ThreadPoolExecutor(4) as pool:
        got = list(ordered_map(lambda i: pool.submit(work, i), range(30), inflight))
    assert got == [(i, i * i) for i in range(30)]


def test_at_most_inflight_pending():
    lock, running, peak = threading.Lock(), [0], [0]

    def work(i):
        with lock:
            running[0] += 1
            peak[0] = max(peak[0], running[0])
        time.sleep(0.005)
        with lock:
            running[0] -= 1
        return i

    submitted = []
    with ThreadPoolExecutor(8) as pool:
        def submit(i):
            submitted.append(i)
            return pool.submit(work, i)

        for item, _ in ordered_map(submit, range(20), 3):
            assert len(submitted) - item <= 3  # never more than `inflight` started ahead of the consumer
    assert peak[0] <= 3


def test_error_propagates_and_pending_work_is_cancelled():
    gate = threading.Event()
    started = []

    def work(i):
        started.append(i)
        if i == 0:
            raise RuntimeError("bad block")
        gate.wait(1)
        return i

    with ThreadPoolExecutor(1) as pool:
        with pytest.raises(RuntimeError, match="bad block"):
            list(ordered_map(lambda i: pool.submit(work, i), range(10), 4))
        gate.set()
    # one worker: item 1 may have started; items 2 and 3 were cancelled before they could
    assert started in ([0], [0, 1])


def test_inflight_must_be_positive():
    with pytest.raises(ValueError, match="0"):
        list(ordered_map(lambda i: None, [1], 0))
