"""converters.util.jit: the compile watch (outermost compiles only, cache hits not counted, one notice per
process), numba's on-disk cache when several processes need an uncached kernel at once (one compiles, the
others wait for it and load it), and a cached kernel's load without numba's refresh of its registries."""
import json
import os
import re
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from converters.util import jit

ROOT = Path(__file__).resolve().parents[2]


def test_nested_compile_counts_once_and_is_timed():
    calls = []
    jit.on_next_compile(lambda: calls.append(1))  # runs at the next compile

    @jit.njit
    def inner(x):
        return x * 3 + 1

    @jit.njit
    def outer(x):
        return inner(x) + inner(x + 1)

    before, seconds = jit.compiles(), jit.compile_seconds()
    assert outer(2) == 7 + 10
    assert jit.compiles() == before + 1  # inner was compiled inside outer's compile: one outermost compile
    assert jit.compile_seconds() > seconds
    assert calls == [1]  # once, when outer started compiling
    after = jit.compiles(), jit.compile_seconds()
    assert outer(5) == 16 + 19  # already compiled: no event
    assert (jit.compiles(), jit.compile_seconds()) == after


# A child process: waits until every child of its round has imported numba (a barrier of files), then calls
# the kernels, and reports its compiles, compile seconds, notices and result as one JSON line.
_CHILD = textwrap.dedent("""
    import json, os, sys, time
    sys.path[:0] = [os.environ["T_ROOT"], os.environ["T_MOD"]]
    from converters.util import jit
    notices, compiled = [], []
    jit.on_next_compile(lambda: notices.append(1))
    from numba.core import event

    class Compiled(event.Listener):  # every cached kernel and signature this process compiles
        def on_start(self, ev):
            f = ev.data["dispatcher"].py_func
            if not f.__module__.startswith("numba."):  # numba's own implementations are compiled, never cached
                compiled.append(f"{{f.__module__}}.{{f.__qualname__}}{{ev.data['args']}}")

        def on_end(self, ev):
            pass

    event.register("numba:compile", Compiled())
    {imports}
    barrier, me, n = os.environ["T_BARRIER"], os.environ["T_ME"], int(os.environ["T_N"])
    open(os.path.join(barrier, me), "w").close()
    deadline = time.monotonic() + 120
    while len(os.listdir(barrier)) < n and time.monotonic() < deadline:
        time.sleep(0.01)
    {call}
    print(json.dumps({{"compiles": jit.compiles(), "seconds": jit.compile_seconds(), "notices": len(notices),
                       "waits": jit.compile_waits(), "compiled": compiled, "result": result}}))
""")

_SMALL = textwrap.dedent("""
    from converters.util.jit import njit


    @njit(cache=True, nogil=True)
    def step(x):
        return (x * 2654435761) % 4294967296


    @njit(cache=True, nogil=True)
    def total(n):
        s = 0
        for i in range(n):
            s = (s + step(i)) % 1000003
        return s


    @njit(cache=True)
    def mean(a):
        return a.sum() / a.size
""")

KERNELS = {
    "small": ("import numpy as np\nimport kernels_under_test as k",
              "result = [int(k.total(1000)), float(k.mean(np.arange(4.0)))]"),
    "parser": ("from converters.libsvm.block import convert_block",
               "framed, lengths, parsed = convert_block(b'1 1:0.5 2:1\\n0 1:2 2:3\\n', field_size=2)\n"
               "result = [int(parsed.n), int(lengths.sum())]"),
}


def _round(tmp: Path, name: str, kind: str, n: int, timeout: float) -> list[dict]:
    """Start ``n`` children at once on the cache directory ``tmp/cache``; their reports."""
    imports, call = KERNELS[kind]
    script = _CHILD.format(imports=imports, call=call)
    barrier = tmp / f"barrier-{name}"
    barrier.mkdir()
    procs = []
    for i in range(n):
        env = {**os.environ, "NUMBA_CACHE_DIR": str(tmp / "cache"), "T_ROOT": str(ROOT), "T_MOD": str(tmp),
               "T_BARRIER": str(barrier), "T_ME": str(i), "T_N": str(n)}
        procs.append(subprocess.Popen([sys.executable, "-c", script], env=env, stdout=subprocess.PIPE,
                                      stderr=subprocess.PIPE, text=True))
    deadline = time.monotonic() + timeout
    reports = []
    for p in procs:
        try:
            out, err = p.communicate(timeout=max(1.0, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            for q in procs:
                q.kill()
            pytest.fail(f"{kind} kernels: a process compiling into the cache did not finish in {timeout:.0f}s")
        assert p.returncode == 0, err[-2000:]
        reports.append(json.loads(out.strip().splitlines()[-1]))
    return reports


@pytest.mark.parametrize("kind,timeout", [
    ("small", 120),
    pytest.param("parser", 600, marks=pytest.mark.slow),
])
def test_processes_compiling_at_once_share_the_cache(tmp_path, kind, timeout):
    (tmp_path / "kernels_under_test.py").write_text(_SMALL)
    first = _round(tmp_path, "cold", kind, 3, timeout)
    # three ran on a cold cache at the same moment: each kernel was compiled by one of them (with its notice);
    # a process that needed a kernel another one was compiling waited for it (with its notice: the wait is the
    # compile's) and loaded it, one that came after a compile loaded it with no notice; same results
    every = [name for r in first for name in r["compiled"]]
    assert every and len(every) == len(set(every)), first   # no kernel compiled twice
    assert all((r["compiles"] > 0) == (r["seconds"] > 0) for r in first), first
    assert all(r["notices"] == (1 if r["compiles"] or r["waits"] else 0) for r in first), first
    assert len({json.dumps(r["result"]) for r in first}) == 1, first
    assert any((tmp_path / "cache").rglob("*.nbi")), "nothing was cached"
    (third,) = _round(tmp_path, "warm", kind, 1, timeout)
    assert third == {"compiles": 0, "seconds": 0.0, "notices": 0, "waits": 0, "compiled": [],
                     "result": first[0]["result"]}


class _Terminal:
    """A stand-in stderr that says it is a terminal (or not) and keeps what is written."""

    def __init__(self, tty: bool):
        self.tty, self.text = tty, ""

    def isatty(self):
        return self.tty

    def write(self, s):
        self.text += s

    def flush(self):
        pass


@pytest.mark.parametrize("tty", [True, False])
def test_cli_notice_once_terminal_or_not(monkeypatch, tty):
    from converters.cli.notices import announce_compiles, compile_notice

    err = _Terminal(tty)
    monkeypatch.setattr(sys, "stderr", err)
    announce_compiles()
    announce_compiles()  # a second main() in the same process: still one notice

    @jit.njit
    def first(x):
        return x + 11

    @jit.njit
    def second(x):
        return x + 12

    assert first(1) == 12 and second(1) == 13  # two compiles
    # once, naming the kernel compiled; also when stderr is captured: a log must not sit silent
    assert err.text == compile_notice(f"{__name__}.test_cli_notice_once_terminal_or_not.<locals>.first") + "\n"


def _timed_lines(cmd: list[str], env: dict, timeout: float) -> tuple[int, list[tuple[float, str, str]]]:
    """Run ``cmd``; every line of its stdout and stderr with the moment it arrived (seconds since the start)."""
    import threading

    t0 = time.monotonic()
    p = subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    events: list[tuple[float, str, str]] = []

    def read(stream, name):
        for line in iter(stream.readline, b""):
            events.append((time.monotonic() - t0, name, line.decode("utf-8", "replace").rstrip()))

    readers = [threading.Thread(target=read, args=(p.stdout, "out")),
               threading.Thread(target=read, args=(p.stderr, "err"))]
    for r in readers:
        r.start()
    try:
        rc = p.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        p.kill()
        pytest.fail(f"{cmd} did not finish in {timeout:.0f}s")
    for r in readers:
        r.join()
    events.append((time.monotonic() - t0, "exit", ""))
    return rc, sorted(events)


@pytest.mark.slow
def test_quickstart_says_it_compiles_before_the_wait(tmp_path):
    """With an empty kernel cache (``NUMBA_CACHE_DIR``), the notice is on stderr before the longest silence of
    the run (the compile), read from a pipe as a log or CI job would: not only afterwards in the summary."""
    env = {**os.environ, "NUMBA_CACHE_DIR": str(tmp_path / "cache"),
           "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}
    rc, events = _timed_lines([sys.executable, "-m", "converters.cli", "quickstart", "--out", str(tmp_path / "q"),
                               "--lines", "2000", "--no-progress"], env, timeout=900)
    assert rc == 0, events
    notice = [t for t, kind, line in events if kind == "err" and line.startswith("tfpipe: compiling converters.")]
    assert len(notice) == 1, events
    gaps = [(b[0] - a[0], a[0]) for a, b in zip([(0.0, "start", "")] + events, events)]
    longest, began = max(gaps)
    assert notice[0] <= began, (f"the longest silence ({longest:.1f}s from {began:.1f}s) came before the compile "
                                f"notice (at {notice[0]:.1f}s): {events}")
    assert any("compiling the parser, first run on this machine only" in line for _, _, line in events), events


@pytest.mark.parametrize("seconds,compiling,want", [
    (0.41, 0.0, "0.41s"),
    (12.3, 11.9, "0.40s (+ 11.9s compiling the parser, first run on this machine only)"),
])
def test_quickstart_states_compile_time_apart(seconds, compiling, want):
    from converters.cli.quickstart import _took

    assert _took(seconds, compiling) == want


# Runs the command lines given (a JSON list of argv lists) one after another in one process, as ``tfpipe`` would
# run each (``main``); a line after each on stderr marks where its output ends.
_COMMANDS = textwrap.dedent("""
    import json, sys
    from converters.cli import main
    for argv in json.loads(sys.argv[1]):
        code = main(argv)
        print(f"--- exit {code}", file=sys.stderr, flush=True)
""")


@pytest.mark.slow
def test_a_command_whose_kernels_are_cached_prints_no_notice(tmp_path):
    """On an empty kernel cache, ``reshard --layout columnar`` names the kernel it compiles; the next commands
    (``--layout example`` twice, ``--layout columnar`` again) print a notice only for a kernel not compiled yet,
    and the second of each prints none: no command says it compiles when numba loads from its cache.

    Each ``main`` arms the notice for its command's first compile, so commands run one after another in one
    process print what each prints alone (a kernel an earlier command of the process compiled or loaded is not
    loaded again): the first process runs the cold ``columnar`` command and the first ``example`` one, a second
    process the second ``example`` and ``columnar`` commands, where any compile would print a notice."""
    from converters.libsvm.synthetic import write_criteo_shards

    write_criteo_shards(str(tmp_path / "set"), 1500, shard_bytes=32 << 10)
    env = {**os.environ, "NUMBA_CACHE_DIR": str(tmp_path / "cache"), "TF_CPP_MIN_LOG_LEVEL": "2",
           "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}

    def reshard(*runs: tuple[str, str, str]) -> list[list[str]]:
        """Each (input, output, layout) reshard in turn in one process: the lines of each that mention
        compiling."""
        argvs = [["reshard", str(tmp_path / src), "--out", str(tmp_path / out), "--num-shards", "2", "--layout",
                  layout, "--no-progress"] for src, out, layout in runs]
        p = subprocess.run([sys.executable, "-c", _COMMANDS, json.dumps(argvs)], env=env, capture_output=True,
                           text=True, timeout=900)
        assert p.returncode == 0, p.stderr[-2000:]
        *pieces, rest = re.split(r"^--- exit (-?\d+)\n", p.stderr, flags=re.M)
        assert pieces[1::2] == ["0"] * len(runs) and rest == "", p.stderr[-2000:]  # every command succeeded
        return [[line for line in err.splitlines() if "compiling" in line] for err in pieces[0::2]]

    first, _ = reshard(("set", "col1", "columnar"), ("col1", "ex1", "example"))
    assert len(first) == 1 and first[0].startswith("tfpipe: compiling converters."), first
    assert "the parser" not in first[0] and "first run on this machine only" not in first[0]
    assert reshard(("col1", "ex2", "example"), ("set", "col2", "columnar")) == [[], []]


_ALLOCATING = textwrap.dedent("""
    import numpy as np

    from converters.util.jit import njit


    @njit(cache=True)
    def squares(n):
        out = np.empty(n, np.int64)        # an array the kernel allocates: numba's runtime (NRT)
        for i in range(n):
            out[i] = i * i
        return out
""")

_LOAD = textwrap.dedent("""
    import json, sys
    sys.path[:0] = [sys.argv[1], sys.argv[2]]
    from numba.core import base
    refreshed = []
    real = base.BaseContext.refresh
    base.BaseContext.refresh = lambda self: (refreshed.append(1), real(self))[1]
    from converters.util import jit
    import allocating_under_test as k
    got = [int(x) for x in k.squares(6)]
    print(json.dumps({"result": got, "compiles": jit.compiles(), "refreshes": len(refreshed)}))
""")


def test_a_cached_kernel_loads_without_refreshing_numbas_registries(tmp_path):
    """A kernel loaded from the cache skips numba's refresh of its registries (the start of every command that
    loads kernels) and still runs, allocating through numba's runtime; the compile that filled the cache
    refreshed them as numba does."""
    (tmp_path / "allocating_under_test.py").write_text(_ALLOCATING)
    env = {**os.environ, "NUMBA_CACHE_DIR": str(tmp_path / "cache")}

    def child() -> dict:
        p = subprocess.run([sys.executable, "-c", _LOAD, str(ROOT), str(tmp_path)], env=env, capture_output=True,
                           text=True, timeout=300)
        assert p.returncode == 0, p.stderr[-2000:]
        return json.loads(p.stdout.strip().splitlines()[-1])

    cold, warm = child(), child()
    assert cold["result"] == warm["result"] == [0, 1, 4, 9, 16, 25]
    assert cold["compiles"] == 1 and cold["refreshes"] > 0, cold
    assert warm["compiles"] == 0 and warm["refreshes"] == 0, warm


class _PublicOnly:
    """A cache with only numba's public load (a numba whose cache lacks the private parts)."""

    def __init__(self):
        self.calls = []

    def load_overload(self, sig, target_context):
        self.calls.append((sig, target_context))
        return "loaded"


def test_a_cache_without_numbas_private_load_is_loaded_the_public_way():
    cache = _PublicOnly()
    assert jit._load(cache, "sig", "ctx") == "loaded"
    assert cache.calls == [("sig", "ctx")]
