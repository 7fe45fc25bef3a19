"""Harness for the hostile-use tests: run tfpipe (the CLI, or a Python snippet using the API) as a real process
in a session of its own, with a deadline, inside a sandbox directory, and check what a trusted data tool must
guarantee whatever the input:

* it ends within the deadline, in one error line (``tfpipe: error: ...``; logged warnings may precede it) or
  in success with its declared skips, and never with a traceback;
* no process of its session is left behind;
* nothing outside its output directories was created, changed or removed (the sandbox holds FIFOs where a
  stray read would hang, so reading outside the set shows up as a timeout), and inside them only what a
  valid tfpipe manifest listed before the run may have gone;
* every output manifest passes ``verify``; no temporary file or claim is left.
"""
from __future__ import annotations

import hashlib
import json
import os
import re
import signal
import stat
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import psutil
from notices import COMPILE_PREFIX

from converters.shardset.verify import verify
from converters.storage import TMP_PREFIX

ROOT = str(Path(__file__).resolve().parents[1])
DEADLINE = 60.0
_CLI = "import sys; from converters.cli.main import main; sys.exit(main(sys.argv[1:]))"


@dataclass
class Result:
    rc: int
    out: str
    err: str
    secs: float

    @property
    def error_lines(self) -> list[str]:
        return [ln for ln in self.err.splitlines() if ln.startswith("tfpipe: error:")]


def _env(extra: dict | None) -> dict:
    env = dict(os.environ)
    env["PYTHONPATH"] = ROOT + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    env.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    env.update(extra or {})
    return env


def session_processes(sid: int) -> list[psutil.Process]:
    out = []
    for p in psutil.process_iter():
        try:
            if os.getsid(p.pid) == sid and p.status() != psutil.STATUS_ZOMBIE:
                out.append(p)
        except (ProcessLookupError, PermissionError, psutil.Error):
            continue
    return out


def wait_session_gone(sid: int, grace: float = 5.0) -> list[psutil.Process]:
    """The processes of session ``sid`` still alive after ``grace`` seconds (killed, and returned)."""
    end = time.monotonic() + grace
    while True:
        left = session_processes(sid)
        if not left or time.monotonic() > end:
            break
        time.sleep(0.1)
    for p in left:
        try:
            p.kill()
        except psutil.Error:
            pass
    return left


def _limited(limits: dict | None):
    """A ``preexec_fn`` that sets resource limits (``{resource.RLIMIT_AS: bytes, ...}``, soft = hard)."""
    if not limits:
        return None

    def apply():
        import resource

        for which, value in limits.items():
            resource.setrlimit(which, (value, value))
    return apply


def start(args: list[str], *, env: dict | None = None, cwd: str | None = None, wrap: list[str] = (),
          stdin=subprocess.DEVNULL, limits: dict | None = None) -> subprocess.Popen:
    """Start ``python ARGS`` (e.g. ``-c CODE ...``) in a new session (``wrap``: a command in front of it;
    ``limits``: resource limits of the process, e.g. ``{resource.RLIMIT_AS: 8 << 30}``)."""
    return subprocess.Popen([*wrap, sys.executable, *args], stdin=stdin, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, start_new_session=True, env=_env(env), cwd=cwd,
                            preexec_fn=_limited(limits))


def finish(p: subprocess.Popen, what: str, timeout: float = DEADLINE, t0: float | None = None) -> Result:
    t0 = time.monotonic() if t0 is None else t0
    try:
        out, err = p.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(p.pid, signal.SIGKILL)
        out, err = p.communicate()
        raise AssertionError(f"{what} hung: still running after {timeout:.0f} s\n{err[-2000:]}") from None
    except BaseException:   # Ctrl-C: the child's session gets none
        os.killpg(p.pid, signal.SIGKILL)
        raise
    secs = time.monotonic() - t0
    left = wait_session_gone(p.pid)
    assert not left, f"{what} left processes behind: {[q.pid for q in left]}"
    return Result(p.returncode, out, err, secs)


def run_cli(argv: list[str], *, env: dict | None = None, timeout: float = DEADLINE, wrap: list[str] = (),
            cwd: str | None = None, limits: dict | None = None) -> Result:
    t0 = time.monotonic()
    return finish(start(["-c", _CLI, *argv], env=env, wrap=wrap, cwd=cwd, limits=limits),
                  f"tfpipe {' '.join(argv)}", timeout, t0)


def run_py(code: str, *, env: dict | None = None, timeout: float = DEADLINE, limits: dict | None = None) -> Result:
    """Run a Python snippet; an exception it lets out is printed as ``ERROR <Type>: <message>`` (exit 3)."""
    wrapped = ("import sys\ntry:\n" + "".join(f"    {ln}\n" for ln in code.strip().splitlines())
               + "except Exception as exc:\n    print(f'ERROR {type(exc).__name__}: {exc}')\n    sys.exit(3)\n")
    t0 = time.monotonic()
    return finish(start(["-c", wrapped], env=env, limits=limits), "python snippet", timeout, t0)


# -- the sandbox ------------------------------------------------------------------------------------------

def snapshot(root: Path) -> dict[str, tuple]:
    """Every entry under ``root`` (symlinks not followed): kind and, for regular files, sha256."""
    snap = {}
    for dirpath, dirs, files in os.walk(root):
        for name in dirs + files:
            p = os.path.join(dirpath, name)
            st = os.lstat(p)
            rel = os.path.relpath(p, root)
            if stat.S_ISREG(st.st_mode):
                with open(p, "rb") as f:
                    snap[rel] = ("file", hashlib.sha256(f.read()).hexdigest())
            elif stat.S_ISLNK(st.st_mode):
                snap[rel] = ("link", os.readlink(p))
            else:
                snap[rel] = (stat.S_IFMT(st.st_mode),)
    return snap


def owned_by_tfpipe(out: Path) -> set[str]:
    """Names in ``out`` that a valid tfpipe manifest there lists (with the manifest itself)."""
    try:
        data = json.loads((out / "index.json").read_text())
        return {"index.json"} | {s["name"] for s in data["shards"] if isinstance(s.get("name"), str)
                                 and "/" not in s["name"]}
    except (OSError, ValueError, KeyError, TypeError, AttributeError):
        return set()


def check_contained(before: dict, after: dict, root: Path, outs: list[Path], owned: dict[Path, set[str]]) -> None:
    """Nothing outside ``outs`` changed; inside them only tfpipe's own files (``owned``) may have gone."""
    out_rel = [os.path.relpath(o, root) for o in outs]

    def in_out(rel: str) -> Path | None:
        for o, r in zip(outs, out_rel):
            if rel == r or rel.startswith(r + os.sep):
                return o
        return None

    for rel, what in before.items():
        o = in_out(rel)
        if after.get(rel) == what:
            continue
        if o is not None and os.path.relpath(root / rel, o) in owned.get(o, set()):
            continue  # a file of the previous shard set, replaced on --overwrite
        if o is not None and rel == os.path.relpath(o, root):
            continue
        raise AssertionError(f"{rel} was {'changed' if rel in after else 'removed'} ({what} -> {after.get(rel)})")
    for rel in set(after) - set(before):
        assert in_out(rel) is not None, f"{rel} was created outside the output"


def check_outputs(outs: list[Path], before: dict | None = None, after: dict | None = None,
                  root: Path | None = None) -> None:
    """No temporary file or claim left; a manifest written by the run (all of them when no snapshots are
    given) passes verify."""
    for o in outs:
        if not o.is_dir():
            continue
        left = [n for n in os.listdir(o) if n.startswith(TMP_PREFIX)]
        assert not left, f"temporary files left in {o}: {left}"
        rel = os.path.relpath(o / "index.json", root) if root is not None else None
        written = before is None or (rel in after and after[rel] != before.get(rel))
        if (o / "index.json").exists() and written:
            assert verify(str(o)).ok


def check_one_line_error(r: Result, pattern: str) -> None:
    """One error line matching ``pattern``, no traceback, a non-zero exit; besides the error only warnings and
    the compile notice (which command compiles a kernel first depends on what ran before on the machine)."""
    assert "Traceback" not in r.err, r.err
    assert r.rc not in (0, None), f"exit 0, expected an error matching {pattern!r}\n{r.out}\n{r.err}"
    assert len(r.error_lines) == 1, f"expected one error line:\n{r.err}"
    others = [ln for ln in r.err.splitlines()
              if ln.strip() and not ln.startswith(("tfpipe: error:", "WARNING", COMPILE_PREFIX))]
    assert not others, f"unexpected stderr lines: {others}"
    assert re.search(pattern, r.error_lines[0]), f"{r.error_lines[0]!r} does not match {pattern!r}"

