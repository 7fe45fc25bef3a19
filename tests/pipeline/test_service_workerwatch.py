"""pipeline.service.workerwatch: the protobuf it writes reads back, its options are checked, and against a real
dispatcher (in this process) a stopped worker's task is given up only after the worker timeout, on the watch's
own clock, after which the reader of that job finishes instead of waiting for the worker forever."""
from __future__ import annotations

import threading

import pytest

from converters.util.protowire import field as _field
from pipeline.service.probe import fields
from pipeline.service.workerwatch import WorkerWatch

tf = pytest.importorskip("tensorflow")


@pytest.mark.parametrize("number, payload", [(1, 0), (2, 1), (4, 300), (4, 2 ** 40), (1, b""), (1, b"127.0.0.1:5050"),
                                             (2, bytes(200))])
def test_fields_written_read_back(number, payload):
    wire = 0 if isinstance(payload, int) else 2
    assert list(fields(_field(number, payload))) == [(number, wire, payload)]


def test_nested_message_reads_back():   # a WorkerUpdateRequest: address, then two TaskProgress
    msg = _field(1, b"w:1") + _field(2, _field(1, 7) + _field(2, 1)) + _field(2, _field(1, 9) + _field(2, 1))
    top = list(fields(msg))
    assert top[0] == (1, 2, b"w:1")
    assert [list(fields(v)) for n, w, v in top[1:]] == [[(1, 0, 7), (2, 0, 1)], [(1, 0, 9), (2, 0, 1)]]


@pytest.mark.parametrize("kwargs, needle", [
    ({"dispatcher": "nohost", "worker_timeout": 5}, "HOST:PORT"),
    ({"dispatcher": "127.0.0.1:5050", "worker_timeout": 0}, "worker_timeout"),
    ({"dispatcher": "127.0.0.1:5050", "worker_timeout": 5, "poll": -1}, "poll"),
])
def test_bad_options_named(kwargs, needle):
    with pytest.raises(ValueError, match=needle):
        WorkerWatch(**kwargs)


@pytest.mark.parametrize("timeout, poll", [(0.5, 0.25), (2, 0.5), (30, 5.0), (600, 5.0)])
def test_default_look_every_quarter_of_the_timeout_within_bounds(timeout, poll):
    assert WorkerWatch("127.0.0.1:5050", timeout).poll == poll


def test_stopped_worker_given_up_after_the_timeout_and_the_reader_finishes():
    svc = tf.data.experimental.service
    dispatcher = svc.DispatchServer(svc.DispatcherConfig(port=0))
    addr = f"127.0.0.1:{dispatcher.target.rsplit(':', 1)[1]}"
    workers = [svc.WorkerServer(svc.WorkerConfig(dispatcher_address=addr, heartbeat_interval_ms=500))
               for _ in range(2)]
    now = [0.0]
    watch = WorkerWatch(addr, 5.0, clock=lambda: now[0])
    try:
        ds = tf.data.Dataset.range(1000).batch(10).apply(
            svc.distribute(svc.ShardingPolicy.DYNAMIC, f"grpc://{addr}", job_name="watched"))
        it = iter(ds)
        got = [int(x) for x in next(it)]                    # the job has a task on each worker
        assert watch.check() == {}                          # both answer
        dead = workers[0]._address
        workers[0]._stop()
        assert watch.check() == {}                          # not answering, but not for 5 s yet
        now[0] = 4.9
        assert watch.check() == {}
        now[0] = 5.0
        given = watch.check()
        assert list(given) == [dead] and len(given[dead]) == 1 and watch.given_up == {dead: 1}
        assert watch.check() == {}                          # finished tasks are not given up twice

        def rest():
            got.extend(int(x) for b in it for x in b)
        reader = threading.Thread(target=rest, daemon=True)
        reader.start()
        reader.join(120)
        assert not reader.is_alive(), "the reader waits for the stopped worker"
        assert len(got) == len(set(got)) and set(got) <= set(range(1000))   # lost, never repeated
    finally:
        for w in workers[1:]:
            w._stop()
        dispatcher._stop()
