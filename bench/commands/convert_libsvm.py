"""``tfpipe bench convert-libsvm``: our LibSVM converter vs a naive one, same file, same single core.

In one process run: generate a Criteo-like LibSVM file (39 fields; with ``--sparse`` a sparse file of 0-150
pairs per line, ids up to 200,000, ``qid:``), convert it with ``convert_libsvm`` (``workers=1``; ``--sparse
--keep-qid``) and with a naive converter (per-line Python parse, ``tf.train.Example``,
``tf.io.TFRecordWriter``), both pinned to the same CPU core, and report throughputs (MB/s of input text,
records/s) and their ratio; then the scaling of ``convert_libsvm`` with ``--workers`` (all cores allowed).
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import tempfile
import time

from converters.cli.parser import add_json_option
from converters.cli.types import nonneg_int, positive_int

from ..infra.pinning import pinned, rate

__all__ = ["add_parser", "run", "run_benchmark", "naive_convert", "format_report", "TARGET_RATIO", "pinned"]

TARGET_RATIO = 8.0


def add_parser(sub) -> argparse.ArgumentParser:
    p = sub.add_parser("convert-libsvm", help="LibSVM converter vs naive tf.train.Example converter (1 core)",
                       description=__doc__.split("\n\n", 1)[1])
    p.add_argument("--lines", type=positive_int, default=None, metavar="N",
                   help="lines in the generated file (default 100000; 1000000 with --engine beam)")
    p.add_argument("--field-size", type=positive_int, default=39, metavar="N", help="fields per line (default 39)")
    p.add_argument("--sparse", action="store_true",
                   help="sparse data (0-150 pairs per line, qid:) converted with --sparse --keep-qid")
    p.add_argument("--workers-list", default="1,2", metavar="N,N,...",
                   help="worker counts for the scaling run (default 1,2)")
    p.add_argument("--pin-core", type=nonneg_int, default=None, dest="cpu", metavar="ID",
                   help="the core (its id) the 1-core comparison is pinned to (default: the lowest allowed)")
    add_json_option(p, "the report")
    p.add_argument("--engine", choices=("local", "beam"), default="local",
                   help="beam: compare the Beam engine (in-process runner) with the local converter instead, "
                        "same file, same core (default --lines for it: 1000000)")
    p.add_argument("--repeats", type=positive_int, default=2, metavar="N",
                   help="--engine beam: alternating runs, best kept (default 2)")
    p.add_argument("--beam-workers", type=nonneg_int, default=0, metavar="N",
                   help="--engine beam: also time N Beam worker processes (multi_processing; default 0: none)")
    return p


def run(args) -> int:
    say = None if args.json else (lambda s: print(s, file=sys.stderr, flush=True))
    if args.engine == "beam":
        from ..core.convert_beam import format_beam_report, run_beam_benchmark

        if args.sparse:
            raise ValueError("--engine beam compares fixed-width conversion; drop --sparse")
        lines = args.lines if args.lines is not None else 1_000_000
        report = run_beam_benchmark(lines=lines, field_size=args.field_size, repeat=args.repeats,
                                    beam_workers=args.beam_workers, cpu=args.cpu, log=say)
        print(json.dumps(report, indent=2) if args.json else format_beam_report(report))
        return 0
    if args.lines is None:
        args.lines = 100_000
    try:
        workers = [int(w) for w in args.workers_list.split(",") if w.strip()]
    except ValueError:
        raise ValueError(f"--workers-list must be comma-separated integers, got {args.workers_list!r}") from None
    if args.lines <= 0 or any(w <= 0 for w in workers):
        raise ValueError("--lines and --workers-list entries must be positive")
    report = run_benchmark(lines=args.lines, field_size=args.field_size, workers_list=workers, cpu=args.cpu,
                           log=say, sparse=args.sparse)
    print(json.dumps(report, indent=2) if args.json else format_report(report))
    return 0


def naive_convert(src: str, dst: str, field_size: int | None) -> int:
    """The baseline: one line at a time in Python, one ``tf.train.Example`` per line, TF's writer.
    ``field_size=None``: sparse rows (any number of pairs) with their leading ``qid:N`` kept as ``qid``."""
    import tensorflow as tf

    n = 0
    with open(src, "rb") as f, tf.io.TFRecordWriter(dst) as w:
        for line in f:
            parts = line.split(b"#", 1)[0].split()
            if not parts:
                continue
            feats = parts[1:]
            qid = int(feats.pop(0)[4:]) if field_size is None and feats[:1] and feats[0][:4] == b"qid:" else 0
            ids, vals = [], []
            for tok in feats:
                i, v = tok.split(b":", 1)
                ids.append(int(i) - 1)
                vals.append(float(v))
            if field_size is not None and len(ids) != field_size:
                raise ValueError(f"line {n + 1}: {len(ids)} pairs")
            feature = {
                "label": tf.train.Feature(float_list=tf.train.FloatList(value=[float(parts[0])])),
                "ids": tf.train.Feature(int64_list=tf.train.Int64List(value=ids)),
                "values": tf.train.Feature(float_list=tf.train.FloatList(value=vals)),
            }
            if field_size is None:
                feature["qid"] = tf.train.Feature(int64_list=tf.train.Int64List(value=[qid]))
            w.write(tf.train.Example(features=tf.train.Features(feature=feature)).SerializeToString())
            n += 1
    return n


def _variant(sparse: bool, field_size: int):
    """The data and the two converters compared: ``(generate(path, n, seed) -> bytes, convert(src, out,
    workers) -> Manifest, naive(src, dst) -> records)``."""
    from converters.libsvm.convert import convert_libsvm
    from converters.libsvm.synthetic import write_criteo_libsvm, write_sparse_libsvm

    if sparse:
        return (lambda path, n, seed: write_sparse_libsvm(path, n, seed=seed, qid=True),
                lambda src, out, workers: convert_libsvm(src, out, sparse=True, keep_qid=True, workers=workers),
                lambda src, dst: naive_convert(src, dst, None))
    return (lambda path, n, seed: write_criteo_libsvm(path, n, field_size=field_size, seed=seed),
            lambda src, out, workers: convert_libsvm(src, out, field_size=field_size, workers=workers),
            lambda src, dst: naive_convert(src, dst, field_size))


def run_benchmark(*, lines: int = 100_000, field_size: int = 39, workers_list=(1, 2), cpu: int | None = None,
                  workdir: str | None = None, log=None, sparse: bool = False) -> dict:
    """Run the comparison; returns the report as a dict (see ``format_report``). ``sparse``: sparse data
    (``synthetic.sparse_lines`` with ``qid:``) converted with ``sparse=True, keep_qid=True``."""
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    generate, convert, naive_run = _variant(sparse, field_size)
    say = log or (lambda s: None)
    tmp = tempfile.mkdtemp(prefix="tfpipe-bench-libsvm-", dir=workdir)
    try:
        src = os.path.join(tmp, "input.libsvm")
        say(f"generating {lines:,} {'sparse' if sparse else 'Criteo-like'} lines ...")
        nbytes = generate(src, lines, 0)
        warm = os.path.join(tmp, "warm.libsvm")
        generate(warm, 200, 1)

        import tensorflow as tf  # noqa: F401  (imported before pinning, like a trainer's process)
        from google.protobuf.internal import api_implementation

        backend = api_implementation.Type()
        with pinned(cpu) as core:
            # warm-up (numba kernels from cache, TF graph-free writer): not timed
            convert(warm, os.path.join(tmp, "w0"), 1)
            naive_run(warm, os.path.join(tmp, "w1.tfrecord"))

            say("tfpipe convert_libsvm, workers=1 ...")
            t, c = time.perf_counter(), time.process_time()
            m = convert(src, os.path.join(tmp, "ours"), 1)
            ours = rate(nbytes, m.records, time.perf_counter() - t, time.process_time() - c)

            say(f"naive converter (protobuf {backend}) ...")
            t, c = time.perf_counter(), time.process_time()
            n = naive_run(src, os.path.join(tmp, "naive.tfrecord"))
            naive = rate(nbytes, n, time.perf_counter() - t, time.process_time() - c)
        if n != m.records:
            raise RuntimeError(f"record counts differ: naive {n}, tfpipe {m.records}")

        scaling = []
        for w in workers_list:
            say(f"tfpipe convert_libsvm, workers={w} (all cores allowed, a fresh process) ...")
            secs = _timed_in_fresh_process(src, warm, os.path.join(tmp, f"scale{w}"), w, sparse, field_size)
            scaling.append({"workers": w, **rate(nbytes, m.records, secs)})
        base = next((s["seconds"] for s in scaling if s["workers"] == 1), scaling[0]["seconds"] if scaling else 0)
        for s in scaling:
            s["speedup_vs_1"] = round(base / s["seconds"], 2)
        return {
            "benchmark": "convert-libsvm",
            "lines": lines,
            "sparse": sparse,
            "field_size": None if sparse else field_size,
            "input_bytes": nbytes,
            "pinned_cpu": core,
            "cores_allowed": len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count(),
            "protobuf_backend": backend,
            "tfpipe_workers_1": ours,
            "naive": naive,
            "ratio": round(naive["seconds"] / ours["seconds"], 2),
            "ratio_cpu": round(naive["cpu_seconds"] / max(ours["cpu_seconds"], 1e-9), 2),
            "target_ratio": TARGET_RATIO,
            "scaling": scaling,
        }
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


_SCALING = """
import sys, time
from converters.libsvm.convert import convert_libsvm
src, warm, out, workers, sparse, field_size = sys.argv[1:]
kw = dict(sparse=True, keep_qid=True) if sparse == "1" else dict(field_size=int(field_size))
convert_libsvm(warm, out + ".warm", workers=int(workers), **kw)
t = time.perf_counter()
convert_libsvm(src, out, workers=int(workers), **kw)
print(time.perf_counter() - t)
"""


def _timed_in_fresh_process(src: str, warm: str, out: str, workers: int, sparse: bool, field_size: int) -> float:
    """Seconds of one conversion in a process of its own (no TensorFlow loaded: workers fork warm, as from the
    CLI), after a warm-up conversion there."""
    import subprocess

    r = subprocess.run([sys.executable, "-c", _SCALING, src, warm, out, str(workers), "1" if sparse else "0",
                        str(field_size)], capture_output=True, text=True)
    if r.returncode != 0:
        raise RuntimeError(f"the scaling run with {workers} worker(s) failed: {r.stderr.strip()[-500:]}")
    return float(r.stdout.strip().splitlines()[-1])


def format_report(r: dict) -> str:
    o, nv = r["tfpipe_workers_1"], r["naive"]
    data = ("sparse lines (0-150 pairs, qid:; --sparse --keep-qid)" if r.get("sparse") else
            f"Criteo-like lines, {r['field_size']} fields")
    ours = "tfpipe convert libsvm --workers 1" + (" --sparse" if r.get("sparse") else "")
    lines = [
        f"convert-libsvm: {r['lines']:,} {data}, "
        f"{r['input_bytes'] / 1e6:.1f} MB of text; 1-core runs pinned to CPU {r['pinned_cpu']}",
        f"  {'converter':<44} {'seconds':>8} {'MB/s':>8} {'records/s':>11} {'CPU s':>7} {'rec/CPU-s':>11}",
        f"  {'naive (per-line Python, protobuf ' + r['protobuf_backend'] + ')':<44}"
        f" {nv['seconds']:>8.2f} {nv['mb_per_s']:>8.1f} {nv['records_per_s']:>11,.0f} {nv['cpu_seconds']:>7.2f}"
        f" {nv['records_per_cpu_s']:>11,.0f}",
        f"  {ours:<44} {o['seconds']:>8.2f} {o['mb_per_s']:>8.1f} "
        f"{o['records_per_s']:>11,.0f} {o['cpu_seconds']:>7.2f} {o['records_per_cpu_s']:>11,.0f}",
        f"  ratio: {r['ratio']:.1f}x the naive converter on one core, wall clock ({r['ratio_cpu']:.1f}x by CPU "
        f"time; target >= {r['target_ratio']:.0f}x)" + ("" if r["ratio"] >= r["target_ratio"] else "  [BELOW TARGET]"),
    ]
    if r["protobuf_backend"] != "upb":
        lines.append(f"  note: protobuf backend is {r['protobuf_backend']!r}, not 'upb': the naive baseline is slow")
    if r["scaling"]:
        lines.append(f"scaling with --workers ({r['cores_allowed']} core(s) allowed):")
        for s in r["scaling"]:
            lines.append(f"  workers {s['workers']:>2}: {s['seconds']:>7.2f} s {s['mb_per_s']:>8.1f} MB/s "
                         f"{s['records_per_s']:>11,.0f} rec/s  {s['speedup_vs_1']:.2f}x")
    return "\n".join(lines)
