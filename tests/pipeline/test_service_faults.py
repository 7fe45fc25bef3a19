"""pipeline.service under faults, against real servers: a ``tfpipe service worker`` process killed mid-epoch
that never comes back (the dispatcher gives its tasks up after its worker timeout, the trainers go on, equal
steps), every worker gone (the trainer stops with the reason), a worker process killed mid-epoch and started
again at its address, a dispatcher restarted with its ``work_dir``, and a worker frozen (``SIGSTOP``) in the
first epoch of one epoch and of three (a ``tfpipe service dispatcher`` process: every later epoch's job starts
and ends without it). What is lost or repeated is counted."""
from __future__ import annotations

import re
import signal
import socket
import subprocess
import sys
import threading
import time
from collections import Counter

import pytest
from pipeline_data import write_indexed_set
from service_procs import Proc

from converters.shardset.reader import read_manifest
from pipeline import PipelineSpec, build_dataset
from pipeline.plan.servicejob import service_steps
from pipeline.service.servers import start_dispatcher
from pipeline.service.workerwatch import lost_worker_tasks

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


WORKER_TIMEOUT = 2.0   # the dispatcher's --worker-timeout here (seconds)
TF_TASK_REFRESH = 1.0  # how often TensorFlow's client asks the dispatcher for its tasks (its default, seconds)


def rank_files(data, n: int, i: int) -> list[list[int]]:
    """Per file, the records of rank ``i`` of ``n`` (``shard(n, i)`` of each file) in file order."""
    out, start = [], 0
    for shard in read_manifest(data).shards:
        out.append(list(range(start + i, start + shard.records, n)))
        start += shard.records
    return out


def first_epoch(batches: list[list[int]]) -> int:
    """How many batches the killed epoch gave: up to its short last batch (its records end there), else the
    longest run of whole batches without a repeated record."""
    for k, b in enumerate(batches[:-1]):
        if len(b) < BATCH:
            return k + 1
    seen: set[int] = set()
    for k, b in enumerate(batches):
        if seen & set(b):
            return k
        seen |= set(b)
    return len(batches)


class Rank(threading.Thread):
    """One trainer rank reading ``spec`` in a thread (a hang fails the test instead of hanging it); it stops
    after batch ``pause_at`` until ``go`` is set."""

    def __init__(self, spec, pause_at: int | None = None, go: threading.Event | None = None):
        super().__init__(daemon=True)
        self.spec, self.pause_at, self.go = spec, pause_at, go
        self.batches: list[list[int]] = []
        self.times: list[float] = []   # when each batch came
        self.error: BaseException | None = None
        self.reached = threading.Event()
        self.ended: float | None = None

    def run(self):
        it = iter(build_dataset(self.spec))
        try:
            for k, (_, label) in enumerate(it):
                self.batches.append([int(x) for x in label.numpy()])
                self.times.append(time.monotonic())
                if k == self.pause_at:
                    self.reached.set()
                    self.go.wait()
        except Exception as exc:   # the trainer's error is what the test looks at
            self.error = exc
        finally:
            self.ended = time.monotonic()
            del it                 # the iterator goes now, not with the error's traceback at exit
            self.reached.set()


def one_epoch_seconds(data, addr: str, job: str) -> float:
    """The clock of this run: both ranks read one epoch through the service, no fault (every record once)."""
    started = time.monotonic()
    got = []
    for i in range(2):
        spec = PipelineSpec.from_manifest(data, BATCH, num_shards=2, shard_index=i, epochs=1,
                                          service=f"grpc://{addr}", service_job=job, prefetch=0)
        got += [int(x) for _, label in build_dataset(spec) for x in label.numpy()]
    assert sorted(got) == list(range(N))
    return time.monotonic() - started


def frozen_run(data, addr: str, job: str, epochs: int, worker: Proc, pause_at: int, epoch: float):
    """Two ranks of ``epochs`` reading through the service at ``addr`` in threads, both timeouts
    ``WORKER_TIMEOUT``; once each has taken batch ``pause_at``, ``worker`` is SIGSTOPped (frozen, not dead: its
    sockets stay open) and they go on. The specs, the ranks, and when the stop came."""
    specs = [PipelineSpec.from_manifest(data, BATCH, num_shards=2, shard_index=i, epochs=epochs,
                                        service=f"grpc://{addr}", service_job=job, prefetch=0,
                                        service_worker_timeout=WORKER_TIMEOUT) for i in range(2)]
    go = threading.Event()
    ranks = [Rank(spec, pause_at=pause_at, go=go) for spec in specs]
    for r in ranks:
        r.start()
    for r in ranks:
        assert r.reached.wait(60 + 20 * epoch) and r.error is None, r.error
    worker.p.send_signal(signal.SIGSTOP)
    stopped = time.monotonic()
    go.set()
    return specs, ranks, stopped


def test_worker_killed_mid_epoch_never_back_ranks_go_on_equal_steps_lost_and_repeated_counted(data, monkeypatch):
    monkeypatch.setattr("pipeline.graph.service.ELEMENT_RECORDS", BATCH)   # one batch per element
    d = start_dispatcher(0, worker_timeout=WORKER_TIMEOUT)
    addr = f"127.0.0.1:{d.port}"
    workers = [Proc("service", "worker", "--dispatcher", addr, "--address", "127.0.0.1") for _ in range(2)]
    try:
        dead = workers[0].wait_line("worker serving").split()[2]
        workers[1].wait_line("worker serving")
        epoch = one_epoch_seconds(data, addr, "clean")
        go = threading.Event()
        specs = [PipelineSpec.from_manifest(data, BATCH, num_shards=2, shard_index=i, epochs=1,
                                            service=f"grpc://{addr}", service_job="lost", prefetch=0) for i in range(2)]
        ranks = [Rank(spec, pause_at=5, go=go) for spec in specs]
        for r in ranks:
            r.start()
        for r in ranks:
            assert r.reached.wait(60 + 20 * epoch) and r.error is None, r.error
        workers[0].kill()                                        # SIGKILL mid-epoch; it never comes back
        killed = time.monotonic()
        go.set()
        # the watch gives the dead worker's task up (worker timeout + a look), the client hears it (a task
        # refresh), the spare epoch runs, and its task on the dead worker is given up at the next look
        bound = WORKER_TIMEOUT + 3 * d.watch.poll + TF_TASK_REFRESH + 4 * epoch
        for r in ranks:
            r.join(3 * bound + 30)
            assert not r.is_alive(), f"the trainer hangs ({3 * bound + 30:.0f} s after the kill)"
            assert r.error is None, r.error
            assert r.ended - killed < bound                      # no longer than the timeout and a few looks
        # a rank whose job held nothing more on the lost worker ends sooner (seen: 1.97 s after the kill, timeout 2 s);
        # the one that waited for it, did so for the timeout, counted from the watch's last look that heard the
        # worker (up to one look before the kill: both ranks were seen ending 1.98 s after it)
        assert max(r.ended for r in ranks) - killed >= WORKER_TIMEOUT - d.watch.poll
        assert d.watch.given_up.get(dead, 0) >= 2                # the lost worker's task in each rank's job

        steps = [service_steps(spec)[0] for spec in specs]
        assert [len(r.batches) for r in ranks] == steps and steps[0] == steps[1]   # equal steps kept
        for i, r in enumerate(ranks):
            files = rank_files(data, 2, i)
            mine = set().union(*map(set, files))
            k = first_epoch(r.batches)
            e0 = [x for b in r.batches[:k] for x in b]
            spare = [x for b in r.batches[k:] for x in b]
            assert len(e0) == len(set(e0)) and set(e0) <= mine and set(spare) <= mine
            lost = mine - set(e0)
            assert lost, "the killed worker held records it had not sent"
            for f in files:   # lost: the unsent rest of each file it held (DYNAMIC hands a file out once)
                sent = [x for x in e0 if x in set(f)]
                assert sent == f[:len(sent)], "a file's records reached the trainer out of order or with a gap"
            # made up: the missing batches come from the spare epoch (its own order); those the first
            # epoch had delivered are read a second time
            assert len(r.batches) - k == steps[i] - -(-len(e0) // BATCH)
            repeated = [x for x in spare if x in set(e0)]
            assert max(Counter(e0 + spare).values()) <= 2
            print(f"rank {i}: {len(mine)} records, lost {len(lost)} in {sum(bool(set(f) & lost) for f in files)} "
                  f"files, spare batches {len(r.batches) - k}, repeated {len(repeated)}, recovered "
                  f"{len(set(spare) - set(e0))}, after the kill {r.ended - killed:.2f} s (bound {bound:.2f})")
    finally:
        for w in workers:
            w.kill()
        d.watch.stop()
        d.server._stop()


def test_every_worker_lost_the_trainer_stops_with_the_reason(data, monkeypatch):
    monkeypatch.setattr("pipeline.graph.service.ELEMENT_RECORDS", BATCH)
    d = start_dispatcher(0, worker_timeout=WORKER_TIMEOUT)
    addr = f"127.0.0.1:{d.port}"
    worker = Proc("service", "worker", "--dispatcher", addr, "--address", "127.0.0.1")
    try:
        worker.wait_line("worker serving")
        epoch = one_epoch_seconds(data, addr, "clean")
        spec = PipelineSpec.from_manifest(data, BATCH, num_shards=2, shard_index=0, epochs=2,
                                          service=f"grpc://{addr}", service_job="gone", prefetch=0)
        go = threading.Event()
        r = Rank(spec, pause_at=2, go=go)
        r.start()
        assert r.reached.wait(60 + 20 * epoch) and r.error is None, r.error
        worker.kill()                                            # the only worker: nothing can make up
        killed = time.monotonic()
        go.set()
        bound = WORKER_TIMEOUT + 5 * d.watch.poll + 3 * TF_TASK_REFRESH + 4 * epoch   # three jobs: e0, e1, spare
        r.join(3 * bound + 30)
        assert not r.is_alive(), "the trainer hangs"
        assert isinstance(r.error, tf.errors.InvalidArgumentError), r.error
        assert "delivered fewer than the" in str(r.error) and "workers were lost" in str(r.error)
        assert 3 <= len(r.batches) < 2 * service_steps(spec)[0]
        assert WORKER_TIMEOUT - d.watch.poll <= r.ended - killed < bound   # silent since the last look that heard it

        forever = Rank(PipelineSpec.from_manifest(data, BATCH, num_shards=2, shard_index=0, epochs=None,
                                                  service=f"grpc://{addr}", service_job="gone-forever", prefetch=0))
        started = time.monotonic()
        forever.start()
        forever.join(3 * bound + 30)
        assert not forever.is_alive(), "the trainer hangs"
        assert forever.batches == [] and "came out empty: no worker is left" in str(forever.error)
        assert forever.ended - started < bound
    finally:
        worker.kill()
        d.watch.stop()
        d.server._stop()


def test_worker_killed_mid_epoch_then_back_equal_steps_lost_and_repeated_counted(data, monkeypatch):
    monkeypatch.setattr("pipeline.graph.service.ELEMENT_RECORDS", BATCH)   # one batch per element: a kill
    svc = tf.data.experimental.service
    dispatcher = svc.DispatchServer(svc.DispatcherConfig(port=0, worker_timeout_ms=3000,
                                                         job_gc_check_interval_ms=1000))
    addr = f"127.0.0.1:{dispatcher.target.rsplit(':', 1)[1]}"
    ports = [free_port(), free_port()]
    workers = [start_worker(addr, p) for p in ports]
    try:
        spec = PipelineSpec.from_manifest(data, BATCH, num_shards=2, shard_index=0, epochs=1,
                                          service=f"grpc://{addr}", service_job="fault", prefetch=0)
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


def test_worker_frozen_mid_epoch_is_given_up_like_a_lost_one(data, monkeypatch):
    """A SIGSTOPped worker (frozen, its connections open): the dispatcher gives its tasks up after its worker
    timeout, and the trainer's watch cuts its connections to it after ``service_worker_timeout``, so the ranks
    go on as for a killed worker: equal steps, within the timeouts and a few looks."""
    monkeypatch.setattr("pipeline.graph.service.ELEMENT_RECORDS", BATCH)
    d = start_dispatcher(0, worker_timeout=WORKER_TIMEOUT)
    addr = f"127.0.0.1:{d.port}"
    workers = [Proc("service", "worker", "--dispatcher", addr, "--address", "127.0.0.1") for _ in range(2)]
    try:
        frozen = workers[0].wait_line("worker serving").split()[2]
        workers[1].wait_line("worker serving")
        epoch = one_epoch_seconds(data, addr, "clean-frozen")
        specs, ranks, stopped = frozen_run(data, addr, "frozen", 1, workers[0], 5, epoch)
        poll = min(5.0, max(0.25, WORKER_TIMEOUT / 4))          # both watches' look interval
        bound = WORKER_TIMEOUT + 3 * poll + TF_TASK_REFRESH + 4 * epoch + 2 * 2.0   # + the RPC deadlines
        for r in ranks:
            r.join(3 * bound + 30)
            assert not r.is_alive(), f"the trainer hangs ({3 * bound + 30:.0f} s after the stop)"
            assert r.error is None, r.error
            assert r.ended - stopped < bound
        assert max(r.ended for r in ranks) - stopped >= WORKER_TIMEOUT - poll   # from the last look that heard it
        assert d.watch.given_up.get(frozen, 0) >= 2             # its task in each rank's job given up
        steps = [service_steps(spec)[0] for spec in specs]
        assert [len(r.batches) for r in ranks] == steps         # equal steps kept (the spare epoch)
        for r in ranks:
            got = [x for b in r.batches for x in b]
            assert max(Counter(got).values()) <= 2              # a record at most repeated once (spare epoch)
        print(f"after the stop: {[round(r.ended - stopped, 2) for r in ranks]} s (bound {bound:.2f}, epoch "
              f"{epoch:.2f} s)")
    finally:
        for w in workers:
            w.kill()                                            # SIGKILL ends a stopped process too
        d.watch.stop()
        d.server._stop()


def test_worker_frozen_in_the_first_of_three_epochs_every_epoch_goes_on(data, monkeypatch):
    """A worker SIGSTOPped after each rank's 30th batch of the first of three epochs, the dispatcher a ``tfpipe
    service dispatcher`` process (its own connections to the frozen worker are its watch's to cut: TensorFlow's
    dispatcher assigns each new epoch's job a task on every registered worker with a call that has no deadline):
    both ranks run all their equal steps, and no wait between two batches is longer than the timeout and a few
    looks; each later epoch's task on the frozen worker is given up too."""
    monkeypatch.setattr("pipeline.graph.service.ELEMENT_RECORDS", BATCH)
    d = Proc("service", "dispatcher", "--port", "0", "--worker-timeout", str(WORKER_TIMEOUT))
    workers = []
    try:
        addr = re.search(r"grpc://(\S+) ", d.wait_line("dispatcher serving")).group(1)
        workers = [Proc("service", "worker", "--dispatcher", addr, "--address", "127.0.0.1") for _ in range(2)]
        frozen = workers[0].wait_line("worker serving").split()[2]
        workers[1].wait_line("worker serving")
        epoch = one_epoch_seconds(data, addr, "clean-three")
        specs, ranks, stopped = frozen_run(data, addr, "frozen-three", 3, workers[0], 29, epoch)
        steps = [service_steps(spec)[0] for spec in specs]
        assert 30 < steps[0] == steps[1]                        # the stop came in the first epoch
        poll = min(5.0, max(0.25, WORKER_TIMEOUT / 4))          # both watches' look interval
        look = poll + 2 * 2.0                                   # a look, its calls to the frozen worker included
        stall = WORKER_TIMEOUT + 3 * look + TF_TASK_REFRESH + 4 * epoch   # the longest wait for one batch
        for r in ranks:
            r.join(3 * (stall + 2 * look) + 60)
            assert not r.is_alive(), f"the trainer hangs ({3 * (stall + 2 * look) + 60:.0f} s after the stop)"
            assert r.error is None, r.error
        for r, n in zip(ranks, steps):
            assert len(r.batches) == 3 * n                      # every epoch's equal steps (the spare epoch)
            gaps = [b - a for a, b in zip([stopped] + r.times[30:], r.times[30:])]
            assert max(gaps) < stall, gaps
            got = [x for b in r.batches for x in b]
            assert max(Counter(got).values()) <= 4              # three epochs and the spare one
        given = {t for m in re.finditer(r"task\(s\) \[([\d, ]+)\] finished without it", d.stderr)
                 for t in m.group(1).split(", ")}
        assert len(given) >= 2, d.stderr[-3000:]               # its task in each rank's first epoch
        deadline = time.monotonic() + 3 * look                  # a job the ranks left is given up at a next look
        while lost_worker_tasks(addr, frozen, 2.0) and time.monotonic() < deadline:
            time.sleep(0.2)
        assert lost_worker_tasks(addr, frozen, 2.0) == []      # no epoch's task left to it: each one given up
        print(f"after the stop: {[round(r.ended - stopped, 2) for r in ranks]} s, longest waits "
              f"{[round(max(b - a for a, b in zip(r.times[30:], r.times[31:])), 2) for r in ranks]} s (bound "
              f"{stall:.2f}, epoch {epoch:.2f} s)")
    finally:
        for w in workers:
            w.kill()                                            # SIGKILL ends a stopped process too
        d.kill()
