"""``tfpipe service auto`` (pipeline/service/auto.py): each host's role from its instance group (a table), the
idle stop rule (a table of task counts over time), the training group's one line, and two data "hosts" on this
machine (host names mapped to 127.0.0.1) that serve a real pipeline and stop by themselves once it is read."""
from __future__ import annotations

import json
import os
import re
import signal
import struct
import time

import pytest

from converters.cli import main
from converters.util.errors import TfpipeError
from pipeline.service.auto import AutoPlan, IdleWatch, plan_auto, stop_rule
from service_procs import Proc, free_port, read_through
from sharding.groups import parse_instance_groups


def config(current_host, data_hosts=("algo-2", "algo-3"), gpu_hosts=("algo-1",), current_group="derive"):
    groups = [{"instance_group_name": "data_group", "instance_type": "ml.c5.18xlarge", "hosts": list(data_hosts)},
              {"instance_group_name": "dnn_group", "instance_type": "ml.p4d.24xlarge", "hosts": list(gpu_hosts)}]
    if current_group == "derive":
        current_group = "data_group" if current_host in data_hosts else "dnn_group"
    return {"current_host": current_host, "current_group_name": current_group,
            "hosts": sorted([*data_hosts, *gpu_hosts]), "instance_groups": groups}


@pytest.mark.parametrize("host, data_hosts, addresses, role, dispatcher, worker_host", [
    ("algo-2", ("algo-2", "algo-3"), {}, "dispatcher+worker", "algo-2:5050", "algo-2"),
    ("algo-3", ("algo-2", "algo-3"), {}, "worker", "algo-2:5050", "algo-3"),
    ("algo-1", ("algo-2", "algo-3"), {}, "none", "algo-2:5050", None),
    ("algo-3", ("algo-3", "algo-2"), {}, "dispatcher+worker", "algo-3:5050", "algo-3"),   # SageMaker's order
    ("algo-3", ("algo-2", "algo-3"), {"algo-2": "127.0.0.1", "algo-3": "127.0.0.2"}, "worker", "127.0.0.1:5050",
     "127.0.0.2"),
])
def test_plan_auto(host, data_hosts, addresses, role, dispatcher, worker_host):
    groups = parse_instance_groups(config(host, data_hosts), "rc.json")
    plan = plan_auto(groups, "data_group", 5050, addresses=addresses)
    assert plan == AutoPlan(role, host, groups.current_group, "data_group", dispatcher, worker_host)


def test_plan_auto_refuses_an_unknown_data_group():
    groups = parse_instance_groups(config("algo-2"), "rc.json")
    with pytest.raises(TfpipeError, match="no instance group 'cpu_group': the cluster has data_group, dnn_group"):
        plan_auto(groups, "cpu_group", 5050)


@pytest.mark.parametrize("kwargs, match", [
    (dict(role="boss"), "role must be one of"),
    (dict(role="none", worker_host="algo-2"), "disagree"),
    (dict(role="worker", worker_host=None), "disagree"),
])
def test_auto_plan_validation(kwargs, match):
    base = dict(role="worker", host="algo-2", group="data_group", data_group="data_group", dispatcher="algo-2:1",
                worker_host="algo-2")
    with pytest.raises(ValueError, match=match):
        AutoPlan(**{**base, **kwargs})


# (seconds, worker's tasks[, dispatcher gone[, tasks the journal shows created since the last look]]) looked at
# in order; the look at which the host stops (None: it keeps serving) and how its reason starts
@pytest.mark.parametrize("looks, stops_at, reason", [
    ([(0, 0), (100, 0), (1000, 0)], None, None),                   # no job yet: wait as long as it takes
    ([(0, 1), (5, 0), (14, 0), (15, 0)], 3, "no tasks for 10 s after serving"),
    ([(0, 2), (5, 0), (12, 1), (20, 0), (29, 0), (30, 0)], 5, "no tasks"),   # a new job restarts the clock
    ([(0, 1), (5, 0), (14.9, 0)], None, None),
    # never a task, the dispatcher gone: stop after the timeout; its return restarts the clock
    ([(0, 0), (5, 0, True), (14, 0, True), (15, 0, True)], 3, "the dispatcher has not answered for 10 s"),
    ([(0, 0, True), (8, 0, False), (12, 0, True), (21, 0, True), (22, 0, True)], 4, "the dispatcher has not"),
    ([(0, 0, True), (9.9, 0, True), (10, 1, False), (100, 1, False)], None, None),   # a task after all
    ([(0, 1, True), (5, 1, True), (10, 1, True)], 2, "no tasks for 10 s after serving"),   # tasks left behind
    # a task no look saw, in the journal: the clock starts; a later one restarts it
    ([(0, 0), (1, 0, False, 1), (10.9, 0), (11, 0)], 3, "no tasks for 10 s after serving (at most 1 task(s)"),
    ([(0, 0), (1, 0, False, 2), (9, 0, False, 1), (18.9, 0), (19, 0)], 4, "no tasks for 10 s after serving"),
])
def test_idle_watch(looks, stops_at, reason):
    watch = IdleWatch(10)
    said = [watch.observe(tasks, t, dispatcher_gone=bool(more and more[0]), created=more[1] if len(more) > 1 else 0)
            for t, tasks, *more in looks]
    stopped = [i for i, r in enumerate(said) if r]
    assert (stopped[0] if stopped else None) == stops_at
    if stops_at is not None:
        assert said[stops_at].startswith(reason)


class _Busy:
    """Stands in for a worker that still holds a finished task it was never told to drop."""

    def _num_tasks(self):
        return 1


@pytest.mark.parametrize("dispatcher, stops", [(None, False), ("closed", True)])
def test_stop_rule_counts_a_gone_dispatcher_as_idle(dispatcher, stops):
    now = [0.0]
    address = f"127.0.0.1:{free_port()}" if dispatcher else None
    stop_when = stop_rule(_Busy(), 10, address, check_every=1, clock=lambda: now[0])
    reasons = []
    for t in range(0, 30, 2):
        now[0] = float(t)
        reasons.append(stop_when())
        if reasons[-1]:
            break
    assert any(reasons) == stops
    if stops:
        assert len(reasons) == 6 and reasons[-1].startswith("no tasks for 10 s")  # gone from 0 s, stopped at 10 s


class _Idle:
    """Stands in for a worker that never got a task."""

    def _num_tasks(self):
        return 0


def _looks(stop_when, now, start, until):
    """Look every 2 s of ``now`` from ``start`` to before ``until``: (the time it stopped, the reason), or Nones."""
    for t in range(start, until, 2):
        now[0] = float(t)
        if reason := stop_when():
            return t, reason
    return None, None


def test_stop_rule_of_a_worker_without_tasks_waits_for_a_dispatcher_that_never_answered():
    now = [0.0]   # check_every: a probe's deadline too (a refused one is retried until then)
    stop_when = stop_rule(_Idle(), 10, f"127.0.0.1:{free_port()}", check_every=0.2, clock=lambda: now[0])
    assert _looks(stop_when, now, 0, 60) == (None, None)


def test_stop_rule_of_a_worker_without_tasks_stops_once_its_dispatcher_is_gone():
    """A worker that came up too late for the trainers' last job: its dispatcher answers (the host waits),
    then stops; the host stops the idle timeout after the first look that finds it gone."""
    from pipeline.service.servers import start_dispatcher

    d = start_dispatcher(0)
    now = [0.0]
    stop_when = stop_rule(_Idle(), 10, f"127.0.0.1:{d.port}", check_every=0.5, clock=lambda: now[0])
    try:
        assert _looks(stop_when, now, 0, 30) == (None, None)
    finally:
        d.watch.stop()
        d.server._stop()
    assert _looks(stop_when, now, 40, 60) == (
        50, "the dispatcher has not answered for 10 s and this worker never had a task: the trainers are done")


def test_the_dispatchers_journal_counts_a_job_no_look_saw(tmp_path):
    """The dispatcher's host: a job whose task came and went before the worker was looked at. Its worker's task
    count alone never shows it, so a rule without the journal would serve until killed; with the journal the
    host stops the idle timeout after the look that finds the task."""
    from pipeline.service.servers import start_dispatcher, start_worker

    d = start_dispatcher(0, str(tmp_path / "work"), job_gc_timeout=2)
    w = start_worker(f"127.0.0.1:{d.port}", port=0)
    try:
        now = [0.0]
        with_journal = stop_rule(w.server, 10, journal=d.work_dir, clock=lambda: now[0])
        tasks_only = stop_rule(w.server, 10, clock=lambda: now[0])
        assert with_journal() is None and tasks_only() is None
        assert read_through(f"grpc://127.0.0.1:{d.port}", 50, mode="parallel_epochs") == list(range(50))
        deadline = time.monotonic() + 60
        while w.server._num_tasks() and time.monotonic() < deadline:   # the finished task is dropped
            time.sleep(0.05)
        assert w.server._num_tasks() == 0
        assert _looks(tasks_only, now, 2, 60) == (None, None)
        now[0] = 0.0
        assert _looks(with_journal, now, 2, 60) == (12, "no tasks for 10 s after serving (at most 1 task(s) at once): "
                                                        "the trainers are done")
    finally:
        w.server._stop()
        d.watch.stop()
        d.server._stop()


def _frame(update: bytes) -> bytes:
    """A journal record as TensorFlow frames it (the CRCs are not read)."""
    return struct.pack("<Q", len(update)) + b"\0" * 4 + update + b"\0" * 4


def test_journal_tasks_counts_whole_new_create_task_frames(tmp_path):
    from converters.util.protowire import field
    from pipeline.service.journal import JOURNAL_DIR, JournalTasks

    task, worker, split = (field(3, field(1, 8000) + field(4, b"w:1")), field(5, field(1, b"w:1")),
                           field(8, field(1, 7)))
    journal = tmp_path / JOURNAL_DIR
    journal.mkdir()
    first = journal / "journal_0"
    first.write_bytes(_frame(worker) + _frame(task))
    tasks = JournalTasks(str(tmp_path))
    assert tasks.new() == 0   # the baseline: a restarted dispatcher's earlier tasks
    whole = _frame(split) + _frame(task) + _frame(task)
    with open(first, "ab") as f:
        f.write(whole[:-3])   # the last frame half written
    assert tasks.new() == 1
    with open(first, "ab") as f:
        f.write(whole[-3:])
    assert tasks.new() == 1
    (journal / "journal_1").write_bytes(_frame(task) + b"\x05")   # the next start's file; a few bytes of a header
    assert tasks.new() == 1 and tasks.new() == 0 and tasks.created == 4
    (journal / "journal_2").write_bytes(_frame(task) + struct.pack("<Q", 1 << 40) + b"\0" * 64)   # not a journal
    assert tasks.new() == 1
    with open(journal / "journal_2", "ab") as f:
        f.write(_frame(task))   # after the frame it gave up on: never read
    assert tasks.new() == 0


def test_journal_tasks_of_a_dispatcher_with_nothing_journaled(tmp_path):
    from pipeline.service.journal import JournalTasks

    assert JournalTasks(str(tmp_path / "none")).new() == 0


def test_a_job_its_client_left_is_collected_within_its_gc_timeout():
    """``start_dispatcher(job_gc_timeout=T)`` (what ``service auto`` starts, with T its idle timeout): a job
    whose client left before its end (a trainer stopped or crashed mid-epoch) is collected within 1.25 T, so
    the worker drops its task and the data host's idle clock starts. TensorFlow alone looks for such jobs every
    10 minutes, whatever T."""
    import gc

    import tensorflow as tf

    from pipeline.service.servers import HEARTBEAT_MS, start_dispatcher, start_worker

    t0 = time.monotonic()
    d = start_dispatcher(0, job_gc_timeout=2)
    w = start_worker(f"127.0.0.1:{d.port}", port=0)
    started = time.monotonic() - t0   # this run's clock: starting two servers is work of the kind collecting is
    try:
        ds = tf.data.Dataset.range(10 ** 9).apply(
            tf.data.experimental.service.distribute("parallel_epochs", f"grpc://127.0.0.1:{d.port}"))
        it = iter(ds)
        assert [int(next(it)) for _ in range(3)] == [0, 1, 2]
        assert w.server._num_tasks() == 1
        del it, ds
        gc.collect()
        left = time.monotonic()
        bound = 1.25 * 2 + 2 * HEARTBEAT_MS / 1000 + 2 * started
        while w.server._num_tasks() and time.monotonic() - left < bound + 30:
            time.sleep(0.05)
        took = time.monotonic() - left
        assert w.server._num_tasks() == 0 and took < bound, f"{took:.1f} s (bound {bound:.1f} s)"
    finally:
        w.server._stop()
        if d.watch is not None:
            d.watch.stop()
        d.server._stop()


def write_config(tmp_path, host, **kw):
    d = tmp_path / host
    d.mkdir()
    (d / "resourceconfig.json").write_text(json.dumps(config(host, **kw)))
    return str(d)


def test_training_group_runs_nothing(tmp_path, capsys):
    rc = main(["service", "auto", "--data-group", "data_group", "--config-dir", write_config(tmp_path, "algo-1"),
               "--port", "6000"])
    assert rc == 0
    assert capsys.readouterr().out == ("auto: algo-1 (dnn_group): not the data group, nothing to run here; trainers "
                                       "dial grpc://algo-2:6000\n")


@pytest.mark.parametrize("setup, code, message", [
    ("no config", 1, "resourceconfig.json: no resource config (not on SageMaker? pass --config-dir)"),
    ("homogeneous", 1, "has no instance_groups: not a heterogeneous cluster"),
    ("unknown group", 1, "no instance group 'cpu': the cluster has data_group, dnn_group"),
    ("fifo", 1, "resourceconfig.json is a FIFO (named pipe), not a regular file"),
    ("nested", 1, "resourceconfig.json nests deeper than 32 levels"),
    ("huge", 1, "bytes, more than the 1048576"),
])
def test_auto_refusals(setup, code, message, tmp_path, capsys):
    d = tmp_path / "cfg"
    d.mkdir()
    if setup == "fifo":   # a read would block: refused before any open
        os.mkfifo(d / "resourceconfig.json")
    elif setup == "nested":
        (d / "resourceconfig.json").write_text("[" * 200_000 + "]" * 200_000)
    elif setup == "huge":
        (d / "resourceconfig.json").write_text(json.dumps({**config("algo-2"), "pad": "x" * (2 << 20)}))
    elif setup == "homogeneous":
        (d / "resourceconfig.json").write_text(json.dumps({"current_host": "algo-1", "hosts": ["algo-1"]}))
    elif setup == "unknown group":
        (d / "resourceconfig.json").write_text(json.dumps(config("algo-2")))
    group = "cpu" if setup == "unknown group" else "data_group"
    assert main(["service", "auto", "--data-group", group, "--config-dir", str(d)]) == code
    err = capsys.readouterr().err
    assert message in err and len(err.strip().splitlines()) == 1 and "Traceback" not in err


@pytest.mark.parametrize("advertised, given, interface, expected", [
    ("127.0.0.1", True, "lo", "127.0.0.1"),          # --host-address: the address it gives the others
    ("localhost", False, "lo", "127.0.0.1"),         # the resource config's interface
    ("127.0.0.1", False, "no-such-if0", "127.0.0.1"),   # no such interface: the host name's address
    ("127.0.0.1", False, None, "127.0.0.1"),
    ("0.0.0.0", True, None, "names every interface"),
    ("no-such-host.invalid", False, None, "cannot resolve it"),
])
def test_auto_bind_is_the_private_address_never_every_interface(advertised, given, interface, expected):
    from converters.util.errors import ServiceError
    from pipeline.service.cli import auto_bind

    if expected[0].isdigit():
        assert auto_bind(advertised, given, interface) == expected
    else:
        with pytest.raises(ServiceError, match=expected):
            auto_bind(advertised, given, interface)


@pytest.mark.slow
def test_two_data_hosts_serve_and_stop_when_the_trainer_is_done(tmp_path):
    port, idle = free_port(), 4
    common = ["-v", "--data-group", "data_group", "--port", str(port), "--idle-timeout", str(idle), "--timeout", "300",
              "--host-address", "algo-2=127.0.0.1", "--host-address", "algo-3=127.0.0.1"]
    launched = time.monotonic()
    scratch = tmp_path / "scratch"   # where the dispatcher's host keeps its journal (no --work-dir)
    scratch.mkdir()
    first = Proc("service", "auto", "--config-dir", write_config(tmp_path, "algo-2"), *common,
                 env={"TMPDIR": str(scratch)})
    other = Proc("service", "auto", "--config-dir", write_config(tmp_path, "algo-3"), *common)
    try:
        line = first.wait_line("auto: algo-2")
        assert re.fullmatch(rf"auto: algo-2 \(data_group\): dispatcher grpc://127\.0\.0\.1:{port} \(not fault "
                            rf"tolerant: .*\) \+ worker 127\.0\.0\.1:\d+ for dispatcher grpc://127\.0\.0\.1:{port} "
                            rf"\(listening on 127\.0\.0\.1 only\); stops {idle} s after its last task", line)
        line = other.wait_line("auto: algo-3")
        assert re.fullmatch(rf"auto: algo-3 \(data_group\): worker 127\.0\.0\.1:\d+ for dispatcher "
                            rf"grpc://127\.0\.0\.1:{port} \(listening on 127\.0\.0\.1 only\); stops {idle} s after its "
                            rf"last task", line)
        # this run's clock: a host's stop (its servers, then the interpreter's exit with TensorFlow loaded) is
        # CPU work of the kind its start was, and slows with the host's load as its start did
        started = time.monotonic() - launched
        time.sleep(idle + 2)  # no job yet: both keep waiting for the trainer
        assert first.p.poll() is None and other.p.poll() is None
        reading = time.monotonic()
        records = read_through(f"grpc://127.0.0.1:{port}", 200, mode="parallel_epochs")
        assert records == sorted(list(range(200)) * 2)   # both workers served: every record once per worker
        assert len(os.listdir(scratch)) == 1   # the journal's private directory
        done = time.monotonic()
        # algo-2 reads its dispatcher's journal, so it sees the job however short its task was; algo-3 sees only
        # its worker, and a task that came and went between two looks leaves it the other way to stop: its
        # dispatcher gone (algo-2 stopped) for the idle timeout
        for p, host, why in ((other, "algo-3", f"no tasks for {idle} s after serving .*|the dispatcher has not "
                                               f"answered for {idle} s and this worker never had a task: .*"),
                             (first, "algo-2", f"no tasks for {idle} s after serving .*")):
            rc = p.finish(idle + 120 + 2 * started)
            assert rc == 0, (host, rc, f"{time.monotonic() - done:.1f} s after the read, start {started:.1f} s",
                             p.lines[1:], p.stderr[-1500:])
            assert re.fullmatch(rf"auto: {host} \(data_group\): stopped \(({why})\)", p.lines[-1])
        assert os.listdir(scratch) == []   # removed when the host stopped
        # the grace period was kept: a host stops idle s after its worker's last task, which ends when the worker
        # has produced its last record (the trainer may still be reading buffered ones): after the read started
        assert time.monotonic() - reading >= idle
    finally:
        for p in (first, other):
            p.kill()


@pytest.mark.slow
def test_a_data_host_stops_on_sigterm_before_any_job(tmp_path):
    port = free_port()
    p = Proc("service", "auto", "--config-dir", write_config(tmp_path, "algo-2", data_hosts=("algo-2",)),
             "--data-group", "data_group", "--port", str(port), "--host-address", "algo-2=127.0.0.1")
    try:
        p.wait_line("auto: algo-2")
        p.signal(signal.SIGTERM)
        assert p.finish() == 0 and p.lines[-1] == "auto: algo-2 (data_group): stopped (SIGTERM)"
    finally:
        p.kill()
