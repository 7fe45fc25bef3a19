"""The output claim (``converters.storage.claim``) on a local directory: one holder at a time across
threads of one process and across processes; a claim whose holder died (kill -9) is taken over with a
warning; a holder on another host, or alive here, is named and left alone. (S3 claims: test_hostile_s3.)"""
from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time

import pytest

from converters.storage import CLAIM_NAME, LocalStorage, claim_output
from converters.storage.claim import Holder
from converters.util.errors import OutputInUseError


def test_claim_holds_names_and_releases(tmp_path):
    st = LocalStorage(tmp_path / "out")
    c = claim_output(st, "run1")
    data = json.loads((tmp_path / "out" / CLAIM_NAME).read_text())
    assert data["pid"] == os.getpid() and data["host"] == socket.gethostname() and data["run"] == "run1"
    with pytest.raises(OutputInUseError, match=rf"in use by another run \(pid {os.getpid()} on host .*, since "
                                                r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ\)"):
        claim_output(LocalStorage(tmp_path / "out"), "run2")
    c.release()
    c.release()  # idempotent
    assert not (tmp_path / "out" / CLAIM_NAME).exists()
    claim_output(st, "run3").release()


def test_a_dropped_claim_is_released(tmp_path):
    claim_output(LocalStorage(tmp_path), "gone")  # not kept: garbage-collected at once
    assert not (tmp_path / CLAIM_NAME).exists()


@pytest.mark.parametrize("existing,added,kept", [
    ("", None, ""),                   # out/sub made by the claim: both removed on release
    ("out", None, "out"),             # out existed: kept; out/sub removed
    ("out/sub", None, "out/sub"),     # existed before: kept, empty as it was
    ("", "out/sub/shard", "out/sub"), # something written there (a committed set, a user's file): all kept
    ("", "out/note", "out"),          # out holds a file: out kept, the empty out/sub removed
])
def test_release_removes_only_the_empty_directories_the_claim_made(tmp_path, existing, added, kept):
    if existing:
        (tmp_path / existing).mkdir(parents=True)
    c = claim_output(LocalStorage(tmp_path / "out" / "sub"), "run")
    if added:
        (tmp_path / added).write_text("data")
    c.release()
    left = sorted(str(p.relative_to(tmp_path)) for p in tmp_path.rglob("*") if p.is_dir())
    want = [] if not kept else ["out", "out/sub"][:kept.count("/") + 1]
    assert left == want


_HOLD = ("import sys; from converters.storage import LocalStorage, claim_output; "
         "c = claim_output(LocalStorage(sys.argv[1]), 'child'); print('held', flush=True); sys.stdin.read()")


def test_across_processes_and_after_kill_9(tmp_path, caplog):
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    p = subprocess.Popen([sys.executable, "-c", _HOLD, str(tmp_path)], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                         text=True, env=env)
    try:
        assert p.stdout.readline().strip() == "held"
        with pytest.raises(OutputInUseError, match=rf"pid {p.pid} "):
            claim_output(LocalStorage(tmp_path), "me")
        os.kill(p.pid, signal.SIGKILL)
        p.wait()
    finally:
        p.kill()
    assert (tmp_path / CLAIM_NAME).exists()  # left behind by the killed holder: stale
    c = claim_output(LocalStorage(tmp_path), "me")
    assert f"taking over the stale claim of pid {p.pid}" in caplog.text
    assert json.loads((tmp_path / CLAIM_NAME).read_text())["run"] == "me"
    c.release()


def test_an_unlocked_claim_of_another_host_is_not_taken(tmp_path):
    other = Holder("x", 4242, "another-host", "2020-01-01T00:00:00Z")
    (tmp_path / CLAIM_NAME).write_bytes(other.to_bytes())
    with pytest.raises(OutputInUseError, match=r"pid 4242 on host another-host.*if that run is gone, remove "
                                               r".*\.tfpipe-tmp-claim"):
        claim_output(LocalStorage(tmp_path), "me")


def test_an_unlocked_claim_of_this_host_is_stale_even_if_its_pid_was_reused(tmp_path, caplog):
    reused = Holder("x", os.getppid(), socket.gethostname(), "2020-01-01T00:00:00Z")  # a live, unrelated pid
    (tmp_path / CLAIM_NAME).write_bytes(reused.to_bytes())
    claim_output(LocalStorage(tmp_path), "me").release()
    assert f"taking over the stale claim of pid {os.getppid()}" in caplog.text


def test_unreadable_unlocked_claim_is_taken_over(tmp_path, caplog):
    (tmp_path / CLAIM_NAME).write_bytes(b"")
    claim_output(LocalStorage(tmp_path), "me").release()
    assert "an unreadable holder" in caplog.text


def test_a_forked_child_never_releases_its_parents_claim(tmp_path):
    c = claim_output(LocalStorage(tmp_path), "parent")
    pid = os.fork()
    if pid == 0:  # the child: releasing must not touch the parent's claim
        c.release()
        os._exit(0)
    os.waitpid(pid, 0)
    time.sleep(0.05)
    assert (tmp_path / CLAIM_NAME).exists()
    with pytest.raises(OutputInUseError):
        claim_output(LocalStorage(tmp_path), "other")
    c.release()
