"""pipeline.service under faults, against real servers: a worker process killed mid-epoch (and started again
at its address) and a dispatcher restarted with its ``work_dir``. What is lost or repeated is counted."""
from __future__ import annotations

import socket
import subprocess
import sys
import time
from collections import Counter

import pytest
from pipeline_data import write_indexed_set

from converters.shardset.reader import read_manifest
from pipeline import PipelineSpec, build_dataset

tf = pytest.importorskip("tensorflow")

N = 1200
BATCH = 16
WORKER = ("import sys, tensorflow as tf; s = tf.data.experimental.service; w = s.WorkerServer(s.WorkerConfig("
          "dispatcher_address=sys.argv[1], port=int(sys.argv[2]), heartbeat_interval_ms=500)); "
          "print('up', flush=True); w.join()")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start_worker(dispatcher: str, port: int) -> subprocess.Popen:
    p = subprocess.Popen([sys.executable, "-c", WORKER, dispatcher, str(port)], stdout=subprocess.PIPE,
                         stderr=subprocess.DEVNULL)
    assert p.stdout.readline().strip() == b"up"
    return p


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    out = tmp_path_factory.mktemp("svcfault") / "set"
    write_indexed_set(out, N, shard_bytes=2 << 10)
    return out


def test_worker_killed_mid_epoch_then_back_equal_steps_lost_and_repeated_counted(data, monkeypatch):
    monkeypatch.setattr("pipeline.service.trainer.ELEMENT_RECORDS", BATCH)   # one batch per element: a kill
    svc = tf.data.experimental.service
    dispatcher = svc.DispatchServer(svc.DispatcherConfig(port=0, worker_timeout_ms=3000,
                                                         job_gc_check_interval_ms=1000))
    addr = f"127.0.0.1:{dispatcher.target.rsplit(':', 1)[1]}"
    ports = [free_port(), free_port()]
    workers = [start_worker(addr, p) for p in ports]
    try:
        spec = PipelineSpec.from_manifest(data, BATCH, num_shards=2, shard_index=0, epochs=1,
                                          service=f"grpc://{addr}", service_job="fault", prefetch=0)
        from pipeline.service.choice import service_steps

        steps = service_steps(spec)[0]
        got: list[int] = []
        batches = 0
        started = time.monotonic()
        for k, (_, label) in enumerate(build_dataset(spec)):
            got += [int(x) for x in label.numpy()]
            batches += 1
            if k == 5:
                workers[0].kill()
                workers[0].wait()
                workers[0] = start_worker(addr, ports[0])   # a supervisor starting it again at its address
            assert time.monotonic() - started < 400, "the trainer hangs"
        assert batches == steps                                # equal steps kept: the spare epoch made them up
        # lost: the records the killed worker held that the client had not fetched (none when it had fetched
        # them all before the kill); repeated: as many again from the spare epoch, each at most once more
        rank, start = set(), 0                                 # shard(2, 0) of each file
        for shard in read_manifest(data).shards:
            rank |= set(range(start, start + shard.records, 2))
            start += shard.records
        assert set(got) <= rank and max(Counter(got).values()) <= 2
        assert len(got) >= (steps - 2) * BATCH                 # full batches but a short epoch's last and the run's
    finally:
        for w in workers:
            w.kill()
        dispatcher._stop()


def test_dispatcher_restarted_with_its_work_dir_keeps_the_job(data, tmp_path):
    svc = tf.data.experimental.service
    port = free_port()
    work_dir = str(tmp_path / "dispatcher")

    def dispatcher():
        return svc.DispatchServer(svc.DispatcherConfig(port=port, work_dir=work_dir, fault_tolerant_mode=True))

    d = dispatcher()
    workers = [svc.WorkerServer(svc.WorkerConfig(dispatcher_address=f"127.0.0.1:{port}", heartbeat_interval_ms=500))
               for _ in range(2)]
    try:
        spec = PipelineSpec.from_manifest(data, BATCH, service=f"grpc://127.0.0.1:{port}", service_job="restart",
                                          prefetch=0)
        got: list[int] = []
        for k, (_, label) in enumerate(build_dataset(spec)):
            got += [int(x) for x in label.numpy()]
            if k == 5:
                d._stop()
                d = dispatcher()
        assert sorted(got) == list(range(N))                   # every record once: the job survived the restart
    finally:
        for w in workers:
            w._stop()
        d._stop()
