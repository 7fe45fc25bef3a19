"""``tfpipe bench resume [SET]``: the resumable graph (``resumable=True``: one seeded order a run can be resumed
in, ``pipeline.graph.resumable``) against the default shuffle graph (``resumable=False``) with the same
``shuffle_buffer``, seed, batch size and epochs: records per CPU-second of this process (``time.process_time``,
every thread; the steadier figure on a shared host) and records/s, over whole epochs after the first batch, in
paired rounds with the order alternating; the median and range of the per-round ratios, and the 1-minute load
before each round. Without SET, Criteo-like records are generated (16 shards of 200,000 records by default).
``--busy N`` runs N busy loops beside the rounds; ``--ranks N`` times rank 0 of N ranks (``num_shards=N``);
``--epochs-per-round N`` reads N epochs per graph and round. The bar: the resumable graph at >= 0.95x the default graph's
records per CPU-second (the median)."""
from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import sys
import tempfile

from converters.cli.parser import add_json_option, add_set_argument
from converters.cli.types import nonneg_int, positive_int

from ..report.tables import mark_default

__all__ = ["add_parser", "run", "run_benchmark", "paired_rounds", "format_report", "TARGET_RATIO", "GRAPHS"]

TARGET_RATIO = 0.95          # resumable vs default graph, records per CPU-second, median of the rounds
DEFAULT_RECORDS = 200_000
DEFAULT_SHARDS = 16
GRAPHS = ("resumable", "default")


def add_parser(bench_sub) -> argparse.ArgumentParser:
    p = bench_sub.add_parser("resume", help="the resumable graph vs the default shuffle graph: records per CPU-second",
                             description=__doc__.split("\n\n", 1)[0])
    add_set_argument(p, "path", nargs="?", help="a shard set to read (default: generate Criteo-like records)")
    p.add_argument("--records", type=positive_int, default=DEFAULT_RECORDS, metavar="N",
                   help=f"Criteo-like records to generate without SET (default {DEFAULT_RECORDS:,})")
    p.add_argument("--shards", type=positive_int, default=DEFAULT_SHARDS, metavar="N",
                   help=f"shards to write them in (default {DEFAULT_SHARDS})")
    p.add_argument("--batch-size", type=positive_int, default=256, metavar="N", help="batch size (default 256)")
    p.add_argument("--shuffle-buffer", type=nonneg_int, default=1_000, metavar="N",
                   help="shuffle_buffer of both graphs (default 1000)")
    p.add_argument("--seed", type=nonneg_int, default=1, help="seed of both graphs (default 1)")
    p.add_argument("--epochs-per-round", type=positive_int, default=1, metavar="N",
                   help="epochs each graph reads per round (default 1; from 2 the default graph may cache in memory)")
    p.add_argument("--ranks", type=positive_int, default=1, dest="num_shards", metavar="N",
                   help="time rank 0 of N ranks sharing the set (num_shards=N; default 1)")
    p.add_argument("--repeats", type=positive_int, default=15, metavar="N", help="paired rounds (default 15)")
    p.add_argument("--busy", type=nonneg_int, default=0, metavar="N", help="busy loops beside the rounds (default 0)")
    add_json_option(p, "the report")
    return p


def run(args) -> int:
    say = None if args.json else (lambda s: print(s, file=sys.stderr, flush=True))
    report = run_benchmark(args.path, records=args.records, shards=args.shards, batch_size=args.batch_size,
                           shuffle_buffer=args.shuffle_buffer, seed=args.seed,
                           epochs=args.epochs_per_round, ranks=args.num_shards, rounds=args.repeats, busy=args.busy, log=say)
    print(json.dumps(report, indent=2) if args.json else format_report(report))
    return 0


def _write_set(root: str, records: int, shards: int) -> str:
    from converters.libsvm.synthetic import write_criteo_shards

    per_record = 316          # a Criteo-like record of 39 fields, framed, about
    write_criteo_shards(root, records, shard_bytes=max(1 << 16, records * per_record // shards + 1))
    return root


def _graph(path: str, graph: str, batch_size: int, shuffle_buffer: int, seed: int, epochs: int, ranks: int):
    from pipeline import PipelineSpec, build_dataset

    spec = PipelineSpec.from_manifest(path, batch_size, shuffle_buffer=shuffle_buffer, seed=seed, epochs=epochs,
                                      num_shards=ranks, shard_index=0, resumable=graph == "resumable")
    return build_dataset(spec)


def _round(path: str, order, **sizes) -> dict:
    from ..core.variants import throughput

    return {g: throughput(_graph(path, g, **sizes), warmup=1) for g in order}


def paired_rounds(path: str, *, batch_size: int = 256, shuffle_buffer: int = 1_000, seed: int = 1, epochs: int = 1,
                  ranks: int = 1, rounds: int = 15, log=None) -> dict:
    """``rounds`` paired rounds (the first graph alternating) of the resumable and the default graph over ``path``;
    per round the resumable graph's records per CPU-second (and records/s) over the default graph's."""
    if rounds < 1:
        raise ValueError(f"rounds must be >= 1, got {rounds!r}")
    say = log or (lambda s: None)
    sizes = dict(batch_size=batch_size, shuffle_buffer=shuffle_buffer, seed=seed, epochs=epochs, ranks=ranks)
    cpu_ratios, wall_ratios, loads, rates = [], [], [], {g: {"cpu": [], "wall": []} for g in GRAPHS}
    for r in range(rounds):
        loads.append(os.getloadavg()[0])
        res = _round(path, GRAPHS if r % 2 == 0 else GRAPHS[::-1], **sizes)
        got = [res[g]["records"] for g in GRAPHS]    # equal, but for a batch under equal steps of several ranks
        if not min(got) or max(got) - min(got) > batch_size * (ranks > 1):
            raise ValueError(f"{path}: the graphs read {got[0]} and {got[1]} records after the first batch: too few "
                             f"records to time at batch {batch_size}, or not the same epoch")
        for g in GRAPHS:
            rates[g]["cpu"].append(res[g]["records_per_cpu_s"])
            rates[g]["wall"].append(res[g]["records_per_s"])
        cpu_ratios.append(rates["resumable"]["cpu"][-1] / rates["default"]["cpu"][-1])
        wall_ratios.append(rates["resumable"]["wall"][-1] / rates["default"]["wall"][-1])
        say(f"round {r + 1}/{rounds}: resumable {rates['resumable']['cpu'][-1]:,.0f}, default "
            f"{rates['default']['cpu'][-1]:,.0f} rec/CPU-s: {cpu_ratios[-1]:.2f}x (load {loads[-1]:.1f})")
    med = statistics.median
    return {"rounds": rounds, **sizes, "records": res["default"]["records"],
            "cpu_ratio": med(cpu_ratios), "cpu_ratio_min": min(cpu_ratios), "cpu_ratio_max": max(cpu_ratios),
            "cpu_ratios": [round(x, 3) for x in cpu_ratios], "wall_ratio": med(wall_ratios),
            "wall_ratio_min": min(wall_ratios), "wall_ratio_max": max(wall_ratios),
            **{f"{g}_rec_per_cpu_s": med(rates[g]["cpu"]) for g in GRAPHS},
            **{f"{g}_rec_s": med(rates[g]["wall"]) for g in GRAPHS},
            "load_min": min(loads), "load_max": max(loads), "cpu_count": os.cpu_count()}


def run_benchmark(path: str | None = None, *, records: int = DEFAULT_RECORDS, shards: int = DEFAULT_SHARDS,
                  batch_size: int = 256, shuffle_buffer: int = 1_000, seed: int = 1, epochs: int = 1, ranks: int = 1,
                  rounds: int = 15,
                  busy: int = 0, workdir: str | None = None, log=None) -> dict:
    """Write the set (without ``path``), then the paired rounds beside ``busy`` busy loops; the report dict."""
    from ..core.busyhost import BUSY_LOOP, neighbour_processes

    say = log or (lambda s: None)
    tmp = tempfile.mkdtemp(prefix="tfpipe-bench-resume-", dir=workdir)
    try:
        if path is None:
            say(f"writing {records:,} Criteo-like records in {shards} shards ...")
            path = _write_set(os.path.join(tmp, "criteo"), records, shards)
        with neighbour_processes([BUSY_LOOP] * busy):
            say(f"{rounds} paired rounds, shuffle_buffer {shuffle_buffer:,}, batch {batch_size}, {busy} busy loop(s)")
            figures = paired_rounds(path, batch_size=batch_size, shuffle_buffer=shuffle_buffer, seed=seed,
                                    epochs=epochs, ranks=ranks, rounds=rounds, log=say)
        return {"benchmark": "resume", "busy_loops": busy, "target_ratio": TARGET_RATIO, **figures}
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def format_report(r: dict) -> str:
    ok = "meets" if r["cpu_ratio"] >= r["target_ratio"] else "MISSES"
    return "\n".join([
        f"resumable vs default graph, shuffle_buffer {r['shuffle_buffer']:,}, batch {r['batch_size']}, "
        f"{r['epochs']} epoch(s), rank 0 of {r['ranks']}, {r['busy_loops']} busy loop(s) beside; median of {r['rounds']} paired rounds, "
        f"load {r['load_min']:.1f}-{r['load_max']:.1f} on {r['cpu_count']} cores:",
        mark_default(f"  resumable  {r['resumable_rec_per_cpu_s']:>12,.0f} rec/CPU-s  {r['resumable_rec_s']:>12,.0f} "
                     f"rec/s", "what a seeded spec builds"),
        f"  default    {r['default_rec_per_cpu_s']:>12,.0f} rec/CPU-s  {r['default_rec_s']:>12,.0f} rec/s",
        f"  per CPU-second {r['cpu_ratio']:.2f}x (range {r['cpu_ratio_min']:.2f}-{r['cpu_ratio_max']:.2f}; {ok} the "
        f"bar >= {r['target_ratio']:g}x), records/s {r['wall_ratio']:.2f}x (range {r['wall_ratio_min']:.2f}-"
        f"{r['wall_ratio_max']:.2f})"])
