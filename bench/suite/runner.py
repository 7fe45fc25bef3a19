"""Runs for ``tfpipe bench all``: each run of each benchmark in a fresh Python process, with the 1-minute load
average before and after it and the CPU count, then per metric the median, range and verdicts.

A fresh process per run means no in-process state carries from one run to the next (TensorFlow graphs and
thread pools, tf.data, numba's in-memory dispatchers, the Rust tokenizer pool): what does carry is what a user's
own rerun of the command would find, the on-disk numba cache (``NUMBA_CACHE_DIR``) and the OS page cache.
Runs go round-robin (every benchmark's run 1, then every run 2, ...), so a burst of load from other jobs
spreads over the benchmarks instead of spoiling all runs of one.

``python -m bench.suite.runner NAME [--smoke]`` is the child: it runs one benchmark once and prints its metrics as
one JSON line on stdout.
"""
from __future__ import annotations

import json
import os
import signal
import statistics
import subprocess
import sys
import time
from typing import Callable

from .specs import BENCHMARKS, meets

__all__ = ["run_all", "summarize", "load_avg", "cpu_counts", "child_main", "FRESH_PROCESS"]

FRESH_PROCESS = ("each run in a fresh Python process: nothing in memory carries over between runs; the on-disk "
                 "numba cache and the OS page cache do, as for a user rerunning the command")


def load_avg() -> float | None:
    """The 1-minute load average (None where the platform has none)."""
    try:
        return round(os.getloadavg()[0], 2)
    except (AttributeError, OSError):
        return None


def cpu_counts() -> dict:
    allowed = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    return {"cpu_count": os.cpu_count(), "cores_allowed": allowed}


def _kill_group(proc: subprocess.Popen) -> None:
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass
    proc.wait()


def _one_run(name: str, smoke: bool, timeout: float | None) -> dict:
    """One run of benchmark ``name`` in a child process: its metrics, or an ``error`` line."""
    env = dict(os.environ)
    env.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    cmd = [sys.executable, "-m", "bench.suite.runner", name] + (["--smoke"] if smoke else [])
    before, t = load_avg(), time.perf_counter()
    # a session of its own: a timeout stops the run's own children too (worker processes, the scaling run)
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env,
                            start_new_session=True)
    try:
        out, err = proc.communicate(timeout=timeout)
        rc = proc.returncode
    except subprocess.TimeoutExpired:
        _kill_group(proc)
        proc.communicate()
        out, err, rc = "", f"timed out after {timeout:g} s", None
    except BaseException:  # Ctrl-C, SIGTERM: take the run down with us
        _kill_group(proc)
        raise
    run = {"seconds": round(time.perf_counter() - t, 2), "load_before": before, "load_after": load_avg(),
           **cpu_counts()}
    lines = out.strip().splitlines()
    if rc == 0 and lines:
        try:
            run["metrics"] = json.loads(lines[-1])
            return run
        except json.JSONDecodeError:
            pass
    tail = [ln for ln in err.strip().splitlines() if ln.strip()][-1:] or ["no output"]
    run["error"] = tail[0] if rc is None else f"exit {rc}: {tail[0][:300]}"
    return run


def run_all(names: list[str], repeats: int, *, smoke: bool = False, timeout: float | None = None,
            say: Callable[[str], None] | None = None) -> dict:
    """``repeats`` runs of each named benchmark, round-robin; the per-run data and the per-metric summary."""
    if repeats < 1:
        raise ValueError(f"repeats must be >= 1, got {repeats}")
    unknown = [n for n in names if n not in BENCHMARKS]
    if unknown:
        raise ValueError(f"unknown benchmark(s) {', '.join(unknown)}; known: {', '.join(BENCHMARKS)}")
    say = say or (lambda s: None)
    runs: dict[str, list[dict]] = {n: [] for n in names}
    started, t0 = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), time.perf_counter()
    total, k = len(names) * repeats, 0
    for r in range(repeats):
        for n in names:
            k += 1
            say(f"[{k}/{total}] {n}, run {r + 1} of {repeats} (load {load_avg()}) ...")
            run = _one_run(n, smoke, timeout)
            runs[n].append({"run": r + 1, **run})
            what = run.get("error") or ", ".join(f"{m}={v:.3g}" for m, v in run["metrics"].items()
                                                 if isinstance(v, (int, float)))
            say(f"    {run['seconds']:.1f} s, load {run['load_before']} -> {run['load_after']}: {what}")
    return {"command": "tfpipe bench all", "started": started, "seconds": round(time.perf_counter() - t0, 1),
            "repeats": repeats, "smoke": smoke, "fresh_process": FRESH_PROCESS, **cpu_counts(),
            "benchmarks": [summarize(n, runs[n], smoke) for n in names]}


def summarize(name: str, runs: list[dict], smoke: bool = False) -> dict:
    """One benchmark's runs and, per metric, median / min / max over the runs that finished, the verdict of
    the median and how many runs met the target."""
    b = BENCHMARKS[name]
    ok = [r for r in runs if "metrics" in r]
    loads = [x for r in runs for x in (r.get("load_before"), r.get("load_after")) if x is not None]
    metrics = []
    for m in b.metrics:
        values = [float(r["metrics"][m.key]) for r in ok if isinstance(r["metrics"].get(m.key), (int, float))]
        row = {"key": m.key, "label": m.label, "unit": m.unit, "op": m.op, "target": m.target,
               "runs": len(values), "values": values}
        if values:
            med = statistics.median(values)
            each = [meets(m, v) for v in values]
            row.update(median=med, min=min(values), max=max(values), median_meets=meets(m, med),
                       runs_meeting=None if m.op is None else sum(bool(e) for e in each),
                       all_runs_meet=None if m.op is None else all(each))
        metrics.append(row)
    return {"name": name, "command": b.command, "size": b.size(smoke), "runs_asked": len(runs), "runs_ok": len(ok),
            "load": {"min": min(loads), "max": max(loads)} if loads else None,
            "errors": [r["error"] for r in runs if "error" in r], "metrics": metrics, "runs": runs}


def child_main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    smoke = "--smoke" in argv
    names = [a for a in argv if a != "--smoke"]
    if len(names) != 1 or names[0] not in BENCHMARKS:
        print(f"usage: python -m bench.suite.runner NAME [--smoke]; NAME one of {', '.join(BENCHMARKS)}",
              file=sys.stderr)
        return 64
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    import logging

    from converters.cli.quiet import lean_tensorflow_import

    lean_tensorflow_import()  # Keras loads if the benchmark uses it

    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    result = BENCHMARKS[names[0]].measure(smoke)
    print(json.dumps(result))
    return 0


if __name__ == "__main__":
    sys.exit(child_main())
