"""``tfpipe bench tabular``: convert tabular against a per-line Python converter of the DLRM/DeepFM-script kind.

In one process: generate Criteo-like rows (no downloads: missing values, negative counts, Zipf categorical
values, many seen once), then time (a) ``convert tabular`` (DeepFM target, exact vocabularies) with every step
in this process, pass by pass (counting, vocabulary, encoding, shards), and (b) a per-line converter: split
each line, count values in dicts, then one ``tf.train.Example`` per line written with ``TFRecordWriter``
on the same rows (its dicts, like the vocabularies, grow with them: ``--naive-rows N`` takes only the first N,
which flatters it). Reported: rows/s and rows per CPU-second of each pass and of the whole conversion, the
ratio of rows per CPU-second (goal >= 30x, bar >= 10x), and the peak memory (the high-water mark of its RSS)
of ``convert tabular --memory 64MiB --workers 1`` in a fresh process on the rows and on 4x the rows and
distinct values."""
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

__all__ = ["add_parser", "run", "run_benchmark", "format_report", "write_rows", "naive_convert"]


def add_parser(sub) -> argparse.ArgumentParser:
    p = sub.add_parser("tabular", help="convert tabular vs a per-line Python converter (Criteo-like rows)",
                       description=__doc__.split("\n\n", 1)[1])
    p.add_argument("--rows", type=positive_int, default=450_000, metavar="N", help="rows (default 450,000)")
    p.add_argument("--naive-rows", type=positive_int, default=None, metavar="N",
                   help="rows the per-line converter converts (default: all of them; fewer flatter it)")
    p.add_argument("--no-memory", action="store_true", help="skip the peak-memory runs")
    add_json_option(p, "the report")
    return p


def run(args) -> int:
    report = run_benchmark(rows=args.rows, naive_rows=args.naive_rows, memory=not args.no_memory)
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


def run_benchmark(*, rows: int = 450_000, naive_rows: int | None = None, memory: bool = True,
                  workdir: str | None = None) -> dict:
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
    return "\n".join(lines)
