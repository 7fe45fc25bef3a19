"""Kill points inside the one commit path, for the crash-safety tests: run a tfpipe command in a child process
in which every mutating call of the storage layer (``publish``, ``write_bytes_atomic``, ``delete``, on a local
disk and in S3) made by ``commit._commit`` is counted, and the process ends with ``os._exit`` (no clean-up, no
``finally``, no roll-back: a kill) just before call ``k``. On S3 a ``publish`` is a server-side copy and then a
``delete`` of its source, so a kill before that ``delete`` is a kill inside the publish. ``k = 0`` runs to the
end and reports how many calls the commit made.

Each call is also named by its step (``step``: the method and the kind of each name it touches, e.g.
``publish shard>aside``); ``by_step`` picks one kill point per distinct step. The commit's loops (set aside,
publish, clean up) treat each name alone, driven by what is found at that name, so the state a kill leaves
inside a loop is, name by name, a state that a kill before the loop's first call or after its last one leaves:
killing before each step's first call (and before the last call) reaches every state of every name.

``run_killed`` forks (the test process has imported everything: a kill point costs milliseconds, not an
interpreter start); ``run_cli_killed`` starts the real CLI (``python -c``) with the same hooks."""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Callable

ROOT = str(Path(__file__).resolve().parents[1])
KILLED = 77


def _kind(name: str) -> str:
    from converters.shardset.journal import ASIDE_PREFIX, JOURNAL_PREFIX
    from converters.storage import TMP_PREFIX

    base = name.rsplit("/", 1)[-1]
    for prefix, kind in ((JOURNAL_PREFIX, "journal"), (ASIDE_PREFIX, "aside"), (TMP_PREFIX, "tmp")):
        if base.startswith(prefix):
            return kind
    if base == "index.json":
        return "manifest" if name == base else "part manifest"
    return "shard"


def step(meth: str, names: list[str]) -> str:
    """A storage call named by what it does: ``publish shard>aside``, ``delete journal``, ..."""
    return f"{meth} {'>'.join(_kind(n) for n in names)}"


def install(kill_at: int, count_file: str) -> None:
    """In this (child) process: count the commit's storage calls, exit before call ``kill_at``."""
    from converters.shardset import commit
    from converters.storage.local import LocalStorage
    from converters.storage.s3 import S3Storage

    state = {"n": 0, "on": False, "steps": [], "committed": False}

    def hook(cls, meth):
        real = getattr(cls, meth)

        def call(self, *a, **kw):
            if state["on"]:
                state["n"] += 1
                names = [x for x in a if isinstance(x, str)]
                state["steps"].append(step(meth, names) + (" after the manifest" if state["committed"] else ""))
                if state["n"] == kill_at:
                    os._exit(KILLED)
                done = real(self, *a, **kw)
                state["committed"] |= meth == "write_bytes_atomic" and _kind(names[0]) == "manifest"
                return done
            return real(self, *a, **kw)
        setattr(cls, meth, call)

    for cls in (LocalStorage, S3Storage):
        for meth in ("publish", "write_bytes_atomic", "delete"):
            hook(cls, meth)
    real_commit = commit._commit

    def counted(*a, **kw):
        state["on"] = True
        try:
            return real_commit(*a, **kw)
        finally:
            state["on"] = False
            with open(count_file, "w") as f:
                f.write(str(state["n"]))
            with open(f"{count_file}.steps", "w") as f:
                f.write("".join(f"{x}\n" for x in state["steps"]))
    commit._commit = counted


def run_killed(k: int, fn: Callable[[], object], count_file: Path, timeout: float = 120) -> int:
    """Fork; in the child install the kill at ``k`` (0: none) and run ``fn``. Returns the child's exit code
    (``KILLED`` for a kill, 0 when ``fn`` returned, 1 when it raised)."""
    pid = os.fork()
    if pid == 0:  # the child: never returns into pytest
        code = 1
        try:
            install(k, str(count_file))
            fn()
            code = 0
        except BaseException as exc:  # noqa: BLE001
            sys.stderr.write(f"child: {type(exc).__name__}: {exc}\n")
        finally:
            os._exit(code)
    end = time.monotonic() + timeout
    while True:
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            return os.waitstatus_to_exitcode(status)
        if time.monotonic() > end:
            os.kill(pid, signal.SIGKILL)
            os.waitpid(pid, 0)
            raise TimeoutError(f"kill point {k}: the child ran past {timeout} s")
        time.sleep(0.005)


_CLI = ("import json, os, sys\nsys.path.insert(0, os.path.join(os.environ['TFPIPE_TEST_ROOT'], 'tests'))\n"
        "import killpoints\nkillpoints.install(int(os.environ['TFPIPE_TEST_KILL_AT']), "
        "os.environ['TFPIPE_TEST_KILL_COUNT'])\nfrom converters.cli.main import main\n"
        "sys.exit(main(json.loads(os.environ['TFPIPE_TEST_ARGV'])))\n")


def run_cli_killed(k: int, argv: list[str], count_file: Path, timeout: float = 180) -> subprocess.CompletedProcess:
    """``tfpipe ARGV`` as a real process with the kill at ``k`` (0: none)."""
    env = dict(os.environ)
    env["PYTHONPATH"] = ROOT + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    env.update(TFPIPE_TEST_ROOT=ROOT, TFPIPE_TEST_KILL_AT=str(k), TFPIPE_TEST_KILL_COUNT=str(count_file),
               TFPIPE_TEST_ARGV=json.dumps(argv), TF_CPP_MIN_LOG_LEVEL="2")
    return subprocess.run([sys.executable, "-c", _CLI], env=env, capture_output=True, text=True, timeout=timeout,
                          cwd=ROOT)


def commit_calls(count_file: Path) -> int:
    return int(count_file.read_text())


def commit_steps(count_file: Path) -> list[str]:
    """The step of each call the last counted commit made, in order."""
    return Path(f"{count_file}.steps").read_text().splitlines()


def by_step(steps: list[str]) -> list[int]:
    """The kill points (1-based) before the first call of each distinct step, and before the last call."""
    first = {}
    for k, s in enumerate(steps, 1):
        first.setdefault(s, k)
    return sorted(set(first.values()) | {len(steps)})
