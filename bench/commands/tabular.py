"""``tfpipe bench tabular``: convert tabular against a per-line Python converter of the DLRM/DeepFM-script kind.

In one process: generate Criteo-like rows (no downloads: missing values, negative counts, Zipf categorical
values, many seen once), then time (a) ``convert tabular`` (DeepFM target, exact vocabularies) with every step
in this process, pass by pass (counting, vocabulary, encoding, shards), and (b) a per-line converter: split
each line, count values in dicts, then one ``tf.train.Example`` per line written with ``TFRecordWriter``
on the same rows (its dicts, like the vocabularies, grow with them: ``--naive-rows N`` takes only the first N,
which flatters it). Reported: rows/s and rows per CPU-second of each pass and of the whole conversion, the
ratio of rows per CPU-second (goal >= 30x, bar >= 10x), and the peak memory (the high-water mark of its RSS)
of ``convert tabular --memory 64MiB --workers 1`` in a fresh process on the rows and on 4x the rows and
distinct values. Then the scaling: the rows cut into three files (days), converted by ``tfpipe convert tabular``
in fresh processes with ``--workers 1`` and ``--workers N`` in paired rounds: rows/s and CPU-seconds of each,
and the wall ratio N / 1."""
from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import subprocess
import sys
import tempfile
import time

from converters.cli.parser import add_json_option
from converters.cli.types import positive_int

__all__ = ["add_parser", "run", "run_benchmark", "format_report", "write_rows", "naive_convert", "scale"]


def add_parser(sub) -> argparse.ArgumentParser:
    p = sub.add_parser("tabular", help="convert tabular vs a per-line Python converter (Criteo-like rows)",
                       description=__doc__.split("\n\n", 1)[1])
    p.add_argument("--rows", type=positive_int, default=450_000, metavar="N", help="rows (default 450,000)")
    p.add_argument("--naive-rows", type=positive_int, default=None, metavar="N",
                   help="rows the per-line converter converts (default: all of them; fewer flatter it)")
    p.add_argument("--no-memory", action="store_true", help="skip the peak-memory runs")
    p.add_argument("--workers", type=positive_int, default=None, metavar="N",
                   help="the scaling runs: --workers 1 against --workers N (default: the usable cores)")
    p.add_argument("--repeats", type=positive_int, default=3, metavar="R",
                   help="paired rounds of the scaling runs (default 3)")
    p.add_argument("--no-scaling", action="store_true", help="skip the scaling runs")
    add_json_option(p, "the report")
    return p


def run(args) -> int:
    report = run_benchmark(rows=args.rows, naive_rows=args.naive_rows, memory=not args.no_memory,
                           scaling=0 if args.no_scaling else args.repeats, workers=args.workers)
    print(json.dumps(report, indent=2) if args.json else format_report(report))
    return 0


def write_rows(path: str, rows: int, seed: int = 0, distinct: int = 200_000) -> int:
    """Criteo-like tab-separated rows; returns the bytes written."""
    rng = random.Random(seed)
    with open(path, "w") as fh:
        for _ in range(rows):
            f = ["1" if rng.random() < 0.25 else "0"]
            for _ in range(13):
                r = rng.random()
                f.append("" if r < 0.2 else "-1" if r < 0.23 else str(int(rng.paretovariate(1.2)) - 1))
            for c in range(26):
                r = rng.random()
                f.append("" if r < 0.15 else f"{rng.getrandbits(32):08x}" if r < 0.3 else
                         f"{(int(rng.paretovariate(1.0)) * 7919 + c) % distinct:08x}")
            fh.write("\t".join(f) + "\n")
    return os.path.getsize(path)


def naive_convert(path: str, out: str, limit: int) -> None:
    """The per-line converter: dict counts, then one tf.train.Example per line (DeepFM ids/values/label)."""
    import math

    import tensorflow as tf

    counts = [dict() for _ in range(26)]
    with open(path) as fh:
        for k, line in enumerate(fh):
            if k >= limit:
                break
            f = line.rstrip("\n").split("\t")
            for c in range(26):
                v = f[14 + c]
                if v:
                    counts[c][v] = counts[c].get(v, 0) + 1
    vocab = [{v: i + 1 for i, (v, _) in enumerate(sorted(d.items(), key=lambda kv: (-kv[1], kv[0])))} for d in counts]
    offsets, at = [], 13
    for v in vocab:
        offsets.append(at)
        at += len(v) + 1
    with tf.io.TFRecordWriter(out) as w, open(path) as fh:
        for k, line in enumerate(fh):
            if k >= limit:
                break
            f = line.rstrip("\n").split("\t")
            ids = list(range(13)) + [offsets[c] + vocab[c].get(f[14 + c], 0) for c in range(26)]
            vals = [math.log1p(max(int(x), 0)) if x else 0.0 for x in f[1:14]] + [1.0] * 26
            ex = tf.train.Example(features=tf.train.Features(feature={
                "ids": tf.train.Feature(int64_list=tf.train.Int64List(value=ids)),
                "values": tf.train.Feature(float_list=tf.train.FloatList(value=vals)),
                "label": tf.train.Feature(float_list=tf.train.FloatList(value=[float(f[0])]))}))
            w.write(ex.SerializeToString())


def _timed(fn):
    w, c = time.perf_counter(), time.process_time()
    out = fn()
    return out, time.perf_counter() - w, time.process_time() - c


def _tfpipe(path: str, out: str) -> dict:
    from converters.engines.core import Outcome
    from converters.engines.group import finalize_outcome
    from converters.tabular.job import TabularJob
    from converters.tabular.options import TabularOptions

    passes: dict[str, list] = {}
    job = TabularJob.create([path], out, TabularOptions())
    units = job.units()
    pre, *passes["count"] = _timed(lambda: [job.prepass(u) for u in units])
    ctx, *passes["vocabulary"] = _timed(lambda: job.resolve(pre))
    sums, *passes["encode"] = _timed(lambda: [job.pass1(u, ctx) for u in units])
    plan, *passes["plan"] = _timed(lambda: job.plan(sums, [], ctx))
    res, *passes["shards"] = _timed(lambda: [job.pass2(s) for s in plan.shards])
    m, *passes["commit"] = _timed(lambda: finalize_outcome(job.area, job.output, job.schema, job.kind,
                                                           Outcome.of(plan, res)))
    return {"records": m.records, "feature_size": m.extra["feature_size"],
            "passes": {k: {"wall_s": round(v[0], 3), "cpu_s": round(v[1], 3)} for k, v in passes.items()},
            "wall_s": round(sum(v[0] for v in passes.values()), 3), "cpu_s": round(sum(v[1] for v in passes.values()), 3)}


def _peak(path: str, out: str) -> int:
    """Peak RSS (KiB) of ``convert tabular --memory 64MiB --workers 1`` in a fresh process: its ``VmHWM``, the
    high-water mark of its own memory (``ru_maxrss`` would start from this process's size: Linux keeps it across
    fork and exec). ``--workers 1``: the conversion is that one process."""
    code = ("import sys; from converters.cli.main import main; rc = main(sys.argv[1:]); "
            "print(next(int(l.split()[1]) for l in open('/proc/self/status') if l.startswith('VmHWM:'))); "
            "sys.exit(rc)")
    r = subprocess.run([sys.executable, "-c", code, "convert", "tabular", path, "--out", out, "--memory", "64MiB",
                        "--workers", "1", "--no-progress", "--overwrite"], capture_output=True, text=True, check=True)
    return int(r.stdout.strip().splitlines()[-1])


def _split(path: str, parts: int) -> list[str]:
    """``path`` cut at line ends into ``parts`` files of about equal size (days of a click log)."""
    data = open(path, "rb").read()
    out, at = [], 0
    for k in range(parts):
        end = len(data) if k == parts - 1 else data.find(b"\n", max(at, len(data) * (k + 1) // parts)) + 1
        out.append(f"{path}-{k}")
        with open(out[-1], "wb") as f:
            f.write(data[at:end])
        at = end
    return out


def _cli_run(paths: list[str], out: str, workers: int) -> tuple[float, float]:
    """Wall and CPU seconds (the process and its workers) of ``convert tabular --workers N`` in a fresh process."""
    import resource

    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    w = time.perf_counter()
    subprocess.run([sys.executable, "-m", "converters.cli", "convert", "tabular", *paths, "--out", out, "--workers",
                    str(workers), "--no-progress", "--overwrite"], capture_output=True, check=True,
                   env={**os.environ, "TFPIPE_IGNORE_LOAD": "1"})
    wall = time.perf_counter() - w
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return wall, (after.ru_utime + after.ru_stime) - (before.ru_utime + before.ru_stime)


def scale(data: str, rows: int, tmp: str, workers: int | None = None, rounds: int = 3, files: int = 3) -> dict:
    """``convert tabular`` of the rows as ``files`` days with ``--workers 1`` and ``--workers N``, each in a fresh
    process (as a user runs it), in ``rounds`` paired rounds (the order alternating): the medians of rows/s,
    CPU-seconds and the per-round wall ratio N / 1, and the processes N asks for on this input."""
    import statistics

    from converters.engines.units import input_files, plan_units
    from converters.tabular.convert import work_for
    from converters.tabular.job import UNIT_BYTES
    from converters.util.system import cpu_count

    n = workers or cpu_count()
    paths = _split(data, files)
    runs: dict[int, list] = {1: [], n: []}
    for r in range(rounds):
        for k in sorted({1, n}, reverse=r % 2 == 1):
            runs[k].append(_cli_run(paths, os.path.join(tmp, f"scale-{k}"), k))
    med = {k: (statistics.median(w for w, _ in v), statistics.median(c for _, c in v)) for k, v in runs.items()}
    processes = min(n, work_for(plan_units(input_files(paths), UNIT_BYTES)))
    return {"files": files, "workers": n, "processes": processes, "rounds": rounds,
            "rows_per_s": {str(k): round(rows / w) for k, (w, _) in med.items()},
            "cpu_s": {str(k): round(c, 2) for k, (_, c) in med.items()},
            "wall_ratio": round(statistics.median(a[0] / b[0] for a, b in zip(runs[n], runs[1])), 3)}


def run_benchmark(*, rows: int = 450_000, naive_rows: int | None = None, memory: bool = True,
                  workdir: str | None = None, scaling: int = 0, workers: int | None = None) -> dict:
    """``scaling``: paired rounds of ``--workers 1`` against ``--workers`` (0: none)."""
    tmp = tempfile.mkdtemp(prefix="tfpipe-bench-tabular-", dir=workdir)
    try:
        data = os.path.join(tmp, "day_0")
        nbytes = write_rows(data, rows)
        warm = os.path.join(tmp, "warm")
        write_rows(warm, 5_000, seed=1)  # enough rows for every kernel a block of the real input runs
        _tfpipe(warm, os.path.join(tmp, "w"))  # compiles / loads the kernels
        t = _tfpipe(data, os.path.join(tmp, "out"))
        n = rows if naive_rows is None else min(naive_rows, rows)
        naive_convert(warm, os.path.join(tmp, "warm.tfrecord"), 200)  # TensorFlow imported before the clock
        _, nw, nc = _timed(lambda: naive_convert(data, os.path.join(tmp, "naive.tfrecord"), n))
        report = {"rows": rows, "input_mb": round(nbytes / 1e6, 1), "tfpipe": t,
                  "tfpipe_rows_per_s": round(rows / t["wall_s"]), "tfpipe_rows_per_cpu_s": round(rows / t["cpu_s"]),
                  "naive_rows": n, "naive_rows_per_s": round(n / nw), "naive_rows_per_cpu_s": round(n / nc),
                  "load": os.getloadavg()[0]}
        report["ratio_cpu"] = round(report["tfpipe_rows_per_cpu_s"] / report["naive_rows_per_cpu_s"], 1)
        report["ratio_wall"] = round(report["tfpipe_rows_per_s"] / report["naive_rows_per_s"], 1)
        for k, v in t["passes"].items():
            v["rows_per_cpu_s"] = round(rows / v["cpu_s"]) if v["cpu_s"] > 0 else None
        if memory:
            big = os.path.join(tmp, "day_big")
            write_rows(big, 4 * rows, seed=2, distinct=800_000)
            a = _peak(data, os.path.join(tmp, "m1"))
            b = _peak(big, os.path.join(tmp, "m4"))
            report["peak_rss_mib"] = {"rows": round(a / 1024, 1), "rows_x4": round(b / 1024, 1)}
            report["peak_growth"] = round(b / a, 3)
        if scaling:
            report["scaling"] = scale(data, rows, tmp, workers, scaling)
            report["scaling"]["load"] = os.getloadavg()[0]
        return report
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def format_report(r: dict) -> str:
    lines = [f"convert tabular, {r['rows']:,} Criteo-like rows ({r['input_mb']} MB), DeepFM target, exact "
             f"vocabularies (feature_size {r['tfpipe']['feature_size']:,}), one process; load {r['load']:.1f}"]
    for k, v in r["tfpipe"]["passes"].items():
        lines.append(f"  {k:<11} {v['wall_s']:8.2f} s wall {v['cpu_s']:8.2f} s CPU"
                     + (f"  {v['rows_per_cpu_s']:>12,} rows/CPU-s" if v.get("rows_per_cpu_s") else ""))
    lines.append(f"tfpipe      {r['tfpipe_rows_per_s']:>12,} rows/s {r['tfpipe_rows_per_cpu_s']:>12,} rows/CPU-s")
    lines.append(f"per-line    {r['naive_rows_per_s']:>12,} rows/s {r['naive_rows_per_cpu_s']:>12,} rows/CPU-s "
                 f"({r['naive_rows']:,} rows)")
    lines.append(f"ratio       {r['ratio_cpu']}x rows per CPU-second (goal >= 30x, bar >= 10x), {r['ratio_wall']}x wall")
    if "peak_rss_mib" in r:
        p = r["peak_rss_mib"]
        lines.append(f"peak memory --memory 64MiB: {p['rows']} MiB; 4x rows and distinct values: {p['rows_x4']} MiB "
                     f"({r['peak_growth']}x)")
    if "scaling" in r:
        c, n = r["scaling"], str(r["scaling"]["workers"])
        lines.append(f"scaling, the rows as {c['files']} files, fresh processes, median of {c['rounds']} paired "
                     f"rounds (load {c['load']:.1f}): --workers 1 {c['rows_per_s']['1']:,} rows/s "
                     f"({c['cpu_s']['1']} CPU-s); --workers {n} ({c['processes']} process(es) for this input) "
                     f"{c['rows_per_s'][n]:,} rows/s ({c['cpu_s'][n]} CPU-s); wall N/1 {c['wall_ratio']}x")
    return "\n".join(lines)
