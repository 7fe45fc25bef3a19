"""Ctrl-C (twice, as an impatient user does) ends a ``pytest -n 2`` run within
seconds, and nothing of it is left running: its workers and the children its tests started in sessions of their own are gone
(``tests/ctrl_c.py``). The run is ``tests/interrupt_cases.py``, whose tests hold on to the interrupt."""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
from ctrl_c import EXIT_GRACE, WORKER_GRACE, _stat

ROOT = Path(__file__).resolve().parents[1]
WORKERS = 2   # each holds an interrupt in a test of its own


def _alive(pid: int) -> bool:
    return _stat(pid) is not None


class _Probe:
    """The interrupted run's start made again while the run cleans up (an xdist run of the same file that only
    collects): a clock of the host's pace at that very time, which the clean-up's bound scales with."""

    def __init__(self, env: dict[str, str]):
        self._took: list[float] = []
        argv = [sys.executable, "-m", "pytest", "-n", str(WORKERS), "--dist", "each", "-p", "no:cacheprovider",
                "-q", "--collect-only", "tests/interrupt_cases.py"]
        env = {k: v for k, v in env.items() if k != "TFPIPE_TEST_INTERRUPT_DIR"}

        def run():
            t0 = time.monotonic()
            subprocess.run(argv, cwd=ROOT, env=env, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                           stderr=subprocess.DEVNULL, timeout=600)
            self._took.append(time.monotonic() - t0)

        self._thread = threading.Thread(target=run, name="ctrl-c-pace-probe", daemon=True)
        self._thread.start()

    def took(self) -> float:
        self._thread.join()
        return self._took[0]


@pytest.mark.skipif(not os.path.isdir("/proc"), reason="finds the run's processes in /proc")
def test_two_ctrl_c_end_an_xdist_run_with_nothing_left(tmp_path):
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTEST_", "COV_"))}
    env.update(TFPIPE_TEST_INTERRUPT_DIR=str(tmp_path), PYTHONPATH=str(ROOT))
    t0 = time.monotonic()
    with open(tmp_path / "out.txt", "w") as out:   # a file, not a pipe: a process left behind cannot hold it
        run = subprocess.Popen([sys.executable, "-m", "pytest", "-n", str(WORKERS), "--dist", "each", "-p", "no:cacheprovider",
                                "-q", "tests/interrupt_cases.py"], cwd=ROOT, env=env, stdin=subprocess.DEVNULL,
                               stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
    try:
        while len(list(tmp_path.glob("*.started"))) < WORKERS:   # each worker holds an interrupt in a test
            assert run.poll() is None, (tmp_path / "out.txt").read_text()[-3000:]
            assert time.monotonic() - t0 < 600, f"the run's {WORKERS} holding tests did not start"
            time.sleep(0.05)
        start = time.monotonic() - t0     # this run's own clock: its start (interpreters, workers, collection)
        held = [int(p) for f in tmp_path.glob("*.started") for p in f.read_text().split()]
        assert all(_alive(p) for p in held)
        t1 = time.monotonic()
        os.killpg(run.pid, signal.SIGINT)
        probe = _Probe(env)   # the same start again, beside the run's clean-up: the host's pace right now
        time.sleep(0.3)
        os.killpg(run.pid, signal.SIGINT)
        try:
            run.wait(timeout=WORKER_GRACE + 2 * start + 60)
        except subprocess.TimeoutExpired:
            pass
        took = time.monotonic() - t1
        pace = probe.took()
    finally:
        if run.poll() is None:
            os.killpg(run.pid, signal.SIGKILL)
            run.wait()
    text = (tmp_path / "out.txt").read_text()
    held_up = "did not exit within" in text   # the controller's exit watchdog ended it (its threads are printed)
    print(f"start {start:.1f} s, the same start beside the clean-up {pace:.1f} s, Ctrl-C to the end {took:.1f} s"
          + ("; ended by the exit watchdog" if held_up else ""))
    if held_up:
        print(text[-6000:])
    # the workers' grace, then killing and the summary: bounded by twice what starting the run took, at the pace
    # the host keeps during the clean-up itself (seen: 4.0 s after a 2.7 s start on a quiet host; xdist alone
    # waited 10 s for its workers, then 5 s more); then the controller's exit, which the watchdog bounds by its
    # grace (seen beside a full run: 6.5 s after the summary)
    bound = WORKER_GRACE + 2 * max(start, pace) + EXIT_GRACE
    assert took < bound, (f"Ctrl-C took {took:.1f} s; the run took {start:.1f} s to start, and "
                          f"{pace:.1f} s beside its clean-up\n{text}")
    assert run.returncode == 2 and "KeyboardInterrupt" in text, text[-3000:]
    assert "PluggyTeardownRaisedWarning" not in text, text[-3000:]
    deadline = time.monotonic() + start
    while any(_alive(p) for p in held) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not [p for p in held if _alive(p)], f"left running: {[p for p in held if _alive(p)]} of {held}"


def test_a_lost_interrupt_does_not_disarm_the_next_ctrl_c(monkeypatch):
    """A ``KeyboardInterrupt`` raised in a garbage-collector callback is lost: the next Ctrl-C raises again. Once
    pytest has caught one, a Ctrl-C during the clean-up is only noted; one long after it raises again."""
    import ctrl_c

    monkeypatch.setattr(ctrl_c, "_interrupted", [])
    monkeypatch.setattr(ctrl_c, "_caught", [])
    for _ in range(2):   # the first is lost where it was raised; the second must still raise
        with pytest.raises(KeyboardInterrupt):
            ctrl_c._note_sigint(signal.SIGINT, None)
    ctrl_c.pytest_keyboard_interrupt(excinfo=None)
    ctrl_c._note_sigint(signal.SIGINT, None)
    assert len(ctrl_c._interrupted) == 3
    ctrl_c._caught[0] -= 5 * WORKER_GRACE + 1
    with pytest.raises(KeyboardInterrupt):
        ctrl_c._note_sigint(signal.SIGINT, None)


def test_an_interrupted_controller_held_up_at_exit_is_ended_by_its_watchdog():
    """A non-daemon thread that never ends would keep the interpreter from exiting: the watchdog ends the
    process with the interrupted run's exit code, after printing where the threads were."""
    code = ("import threading, time, ctrl_c\n"
            "threading.Thread(target=time.sleep, args=(300,), name='stuck').start()\n"
            "ctrl_c._exit_within(1.0)\n")
    t0 = time.monotonic()
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120,
                       env={**os.environ, "PYTHONPATH": str(ROOT / "tests")})
    took = time.monotonic() - t0
    assert r.returncode == 2, r.stderr
    assert "did not exit within" in r.stderr and "Thread 0x" in r.stderr, r.stderr
    assert took < 60, took   # not the stuck thread's 300 s
