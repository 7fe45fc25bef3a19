"""``tfpipe bench layout [SET]``: the Example and the columnar layout of the same rows side by side — records/s and
records per CPU-second of tfpipe's default graph on the columnar set against the best hand-tuned tf.Example graph
(and tfpipe's default) on the Example set, in paired rounds with the order alternating, and bytes on disk — for
fixed-width Criteo-like LibSVM rows and for text windows of 2,049 token ids. With SET (a fixed-width set of
either layout) its rows are re-laid into the other layout and measured instead of the Criteo rows. ``--busy N``
runs N busy loops beside the rounds, ``--beside matmul`` another TensorFlow process computing; ``--shuffle`` adds
how far a seeded shuffled read moves rows in each layout with the same buffer; ``--shuffle-buffer B`` adds the
seeded shuffled read (the default graph of both layouts, ``seed=1``) against the hand-tuned ``shuffle(B)`` graph
on the Example set, in paired rounds. Every fixed-width workload also shows the machine's limit: the bare block
read (``TFRecordDataset`` of the columnar set's blocks, nothing decoded; 8 blocks an element, and one) beside the
unshuffled and the seeded shuffled default of both layouts (``shuffle_buffer`` B, or 10,000), rows/s and rows per
CPU-second."""
from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import tempfile

from converters.cli.parser import add_json_option, add_set_argument
from converters.cli.types import nonneg_int, positive_int
from converters.shardset.layoutopts import block_rows_arg
from converters.tfrecord.layout import COLUMNAR, DEFAULT_BLOCK_ROWS, EXAMPLE

from ..report.tables import mark_default

__all__ = ["add_parser", "run", "run_benchmark", "format_report", "limit_lines", "size_problem", "set_layout",
           "TARGET_RATIO", "DEFAULT_ROWS", "LIMIT_BUFFER"]

TARGET_RATIO = 2.5          # the bar: columnar default vs the best hand-tuned Example graph, median of the rounds
DEFAULT_ROWS = 300_000
DEFAULT_WINDOWS = 20_000
SHUFFLE_BUFFERS = (1_000, 10_000)
LIMIT_BUFFER = 10_000       # the seeded shuffled defaults beside the bare block read, without --shuffle-buffer
BESIDE = ("none", "matmul")    # --beside: the other TensorFlow process beside the rounds (busyhost.neighbour_codes)


def add_parser(bench_sub) -> argparse.ArgumentParser:
    p = bench_sub.add_parser("layout", help="Example vs columnar layout of the same rows: records/s, CPU, bytes",
                             description=__doc__.split("\n\n", 1)[0])
    add_set_argument(p, "path", nargs="?", help="a fixed-width shard set to re-lay and measure (default: generate "
                                                 "Criteo-like rows)")
    p.add_argument("--rows", type=positive_int, default=DEFAULT_ROWS, metavar="N",
                   help=f"Criteo-like rows to generate without SET (default {DEFAULT_ROWS:,})")
    p.add_argument("--windows", type=nonneg_int, default=DEFAULT_WINDOWS, metavar="N",
                   help=f"text windows of 2,049 token ids (default {DEFAULT_WINDOWS:,}; 0: no text rows)")
    p.add_argument("--batch-size", type=positive_int, default=1024, metavar="N",
                   help="batch size of the LibSVM rows (default 1024)")
    p.add_argument("--text-batch-size", type=positive_int, default=64, metavar="N",
                   help="batch size of the text windows (default 64)")
    p.add_argument("--block-rows", type=block_rows_arg, default=DEFAULT_BLOCK_ROWS, metavar="N",
                   help=f"rows per block of the columnar LibSVM set (default {DEFAULT_BLOCK_ROWS}, as convert's)")
    p.add_argument("--repeats", type=positive_int, default=5, metavar="N", help="paired rounds (default 5)")
    p.add_argument("--busy", type=nonneg_int, default=0, metavar="N", help="busy loops beside the rounds (default 0)")
    p.add_argument("--beside", choices=BESIDE, default="none",
                   help="another TensorFlow process beside the rounds: matmul (512x512 matmuls in a loop on all its "
                        "threads, a model's step on the host) or none (the default)")
    p.add_argument("--shuffle", action="store_true", help="also measure how far a shuffled read moves rows")
    p.add_argument("--shuffle-buffer", type=nonneg_int, default=0, metavar="B",
                   help="also time the seeded shuffled default of both layouts against the hand-tuned shuffle(B) "
                        "Example graph (default 0: not timed)")
    add_json_option(p, "the report")
    p.set_defaults(layout_parser=p)
    return p


def size_problem(args) -> str | None:
    """Why the sizes asked for cannot be timed (one line), or None: each workload needs more rows than one
    batch (the first batch is the warmup). Checked before anything is written; SET's row count is read from its
    manifest."""
    if args.path:
        from converters.shardset.reader import read_manifest

        rows = read_manifest(args.path).records
        what = f"{args.path} holds {rows:,} rows"
    else:
        rows, what = args.rows, f"--rows {args.rows:,}"
    if rows <= args.batch_size:
        return (f"{what}: too few rows to time at --batch-size {args.batch_size} (give more than "
                f"{args.batch_size:,}: the first batch is the warmup)")
    if args.windows and args.windows <= args.text_batch_size:
        return (f"--windows {args.windows:,}: too few windows to time at --text-batch-size {args.text_batch_size} "
                f"(give 0 or more than {args.text_batch_size:,}: the first batch is the warmup)")
    return None


def set_layout(path: str) -> str:
    """The record layout of the set at ``path`` (its default graph is the one a user of it gets)."""
    from converters.shardset.reader import read_manifest

    return COLUMNAR if read_manifest(path).layout.columnar else EXAMPLE


def run(args) -> int:
    problem = size_problem(args)
    if problem is not None:
        parser = getattr(args, "layout_parser", None)
        if parser is None:
            raise ValueError(problem)
        parser.error(problem)  # a usage error, before anything is written
    say = None if args.json else (lambda s: print(s, file=sys.stderr, flush=True))
    report = run_benchmark(args.path, rows=args.rows, windows=args.windows, batch_size=args.batch_size,
                           text_batch_size=args.text_batch_size, block_rows=args.block_rows, rounds=args.repeats,
                           busy=args.busy, beside=args.beside, shuffle=args.shuffle,
                           shuffle_buffer=args.shuffle_buffer, log=say)
    print(json.dumps(report, indent=2) if args.json else format_report(report))
    return 0


def run_benchmark(path: str | None = None, *, rows: int = DEFAULT_ROWS, windows: int = DEFAULT_WINDOWS,
                  batch_size: int = 1024, text_batch_size: int = 64, block_rows: int = DEFAULT_BLOCK_ROWS, rounds: int = 5,
                  busy: int = 0, beside: str = "none", shuffle: bool = False, shuffle_buffer: int = 0,
                  workdir: str | None = None, log=None) -> dict:
    """Write the sets, then the paired rounds of each workload (beside ``busy`` busy loops and the ``beside``
    neighbour: ``busyhost.neighbour_codes``); the report dict."""
    from ..core.layoutbench import (compare_layouts, compare_limit, compare_shuffled, criteo_sets, relay_set,
                                    shuffle_table, text_sets)
    from ..core.busyhost import BUSY_LOOP, neighbour_codes, neighbour_processes

    if beside not in BESIDE:
        raise ValueError(f"beside must be one of {BESIDE}, got {beside!r}")

    say = log or (lambda s: None)
    tmp = tempfile.mkdtemp(prefix="tfpipe-bench-layout-", dir=workdir)
    try:
        work, defaults = {}, {}   # defaults: the layout whose default graph is the user's, per workload
        if path:
            say(f"re-laying the rows of {path} ...")
            work["set"] = (relay_set(path, os.path.join(tmp, "set"), block_rows=block_rows), batch_size)
            defaults["set"] = set_layout(path)
        else:
            say(f"writing {rows:,} Criteo-like rows in both layouts ...")
            work["libsvm"] = (criteo_sets(os.path.join(tmp, "libsvm"), rows, block_rows=block_rows), batch_size)
        if windows:
            say(f"writing {windows:,} text windows of 2,049 token ids in both layouts ...")
            work["text"] = (text_sets(os.path.join(tmp, "text"), windows), text_batch_size)
        report = {"benchmark": "layout", "busy_loops": busy, "beside": beside, "target_ratio": TARGET_RATIO,
                  "workloads": {}}
        with neighbour_processes([BUSY_LOOP] * busy + neighbour_codes(beside, "", batch_size)):
            for name, ((example, columnar), batch) in work.items():
                say(f"{name}: {rounds} paired rounds, batch {batch}")
                report["workloads"][name] = compare_layouts(example, columnar, batch, rounds=rounds, log=say)
                report["workloads"][name]["default_layout"] = defaults.get(name, EXAMPLE)
                if shuffle_buffer and name != "text":
                    say(f"{name}: seeded shuffled reads, shuffle_buffer {shuffle_buffer:,}")
                    report["workloads"][name]["shuffled"] = compare_shuffled(example, columnar, batch, shuffle_buffer,
                                                                             rounds=rounds, log=say)
                if name != "text":
                    buffer = shuffle_buffer or LIMIT_BUFFER
                    say(f"{name}: the bare block read beside the defaults, shuffle_buffer {buffer:,}")
                    report["workloads"][name]["limit"] = compare_limit(example, columnar, batch, buffer,
                                                                       rounds=rounds, log=say)
        if shuffle:
            say("shuffle: mean displacement and rank correlation per layout ...")
            report["shuffle"] = shuffle_table(os.path.join(tmp, "mix"), min(rows, 100_000), SHUFFLE_BUFFERS)
        return report
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


LIMIT_NAMES = {"bare_blocks": "bare block read, 8 an elem.", "bare_block": "bare block read, 1 an elem.",
               "columnar_unshuffled": "columnar default",
               "columnar_shuffled": "columnar default, seeded", "example_unshuffled": "Example default",
               "example_shuffled": "Example default, seeded"}


def limit_lines(lim: dict | None) -> list[str]:
    """The limit table of a workload: the bare block read beside the defaults (``layoutbench.compare_limit``)."""
    if not lim:
        return []
    lines = [f"    the machine's limit (median [range] of {lim['rounds']} paired rounds, seeded: shuffle_buffer "
             f"{lim['shuffle_buffer']:,}, load {lim['load_min']:.1f}-{lim['load_max']:.1f}; per CPU-second over the "
             "bare read of 8 / of 1 block an element):"]
    for key, what in LIMIT_NAMES.items():
        x = lim[key]
        lines.append(f"      {what:<26} {x['rows_s']:>11,.0f} rows/s [{x['rows_s_min']:,.0f}-{x['rows_s_max']:,.0f}]  "
                     f"{x['rows_per_cpu_s']:>11,.0f} rows/CPU-s [{x['rows_per_cpu_s_min']:,.0f}-"
                     f"{x['rows_per_cpu_s_max']:,.0f}]  {x['of_bare_cpu']:.2f}x / {x['of_bare1_cpu']:.2f}x the "
                     "bare reads per CPU-s")
    lines.append(f"      seeded vs unshuffled columnar per CPU-second: {lim['shuffled_of_unshuffled_cpu']:.2f}x")
    return lines


def _default_mark(default: str, workload: str):
    """How a workload's rows are marked: the row of the ``default`` layout as tfpipe's default, the others not."""
    why = "the given set's layout" if workload == "set" else "the layout convert writes"
    return lambda row, layout: mark_default(row, f"{why}, read with the default spec") if layout == default else row


def format_report(r: dict) -> str:
    other = "" if r.get("beside", "none") == "none" else f", a TensorFlow {r['beside']} loop"
    lines = [f"Example vs columnar layout of the same rows ({r['busy_loops']} busy loop(s){other} beside):"]
    for name, w in r["workloads"].items():
        ok = "meets" if w["ratio"] >= r["target_ratio"] else "MISSES"
        mark = _default_mark(w.get("default_layout", EXAMPLE), name)
        lines += [f"  {name} (batch {w['batch_size']}, median of {w['rounds']} paired rounds, load "
                  f"{w['load_min']:.1f}-{w['load_max']:.1f} on {w['cpu_count']} cores):",
                  mark(f"    columnar default          {w['columnar_rec_s']:>12,.0f} rec/s  "
                       f"{w['columnar_rec_per_cpu_s']:>12,.0f} rec/CPU-s  {w['columnar_bytes']:>14,} bytes", COLUMNAR),
                  f"    best hand-tuned Example   {w['best_example_rec_s']:>12,.0f} rec/s  "
                  f"{w['best_example_rec_per_cpu_s']:>12,.0f} rec/CPU-s  {w['example_bytes']:>14,} bytes",
                  mark(f"    tfpipe default, Example   {w['example_default_rec_s']:>12,.0f} rec/s", EXAMPLE),
                  f"    columnar vs best Example  {w['ratio']:.2f}x (range {w['ratio_min']:.2f}-{w['ratio_max']:.2f}; "
                  f"{ok} the bar >= {r['target_ratio']:g}x), per CPU-second {w['cpu_ratio']:.2f}x, bytes "
                  f"{w['bytes_ratio']:.3f}x",
                  f"    block checks: checked decode vs unchecked {w['check_ratio']:.2f}x rows/s (range "
                  f"{w['check_ratio_min']:.2f}-{w['check_ratio_max']:.2f}), per CPU-second {w['check_cpu_ratio']:.2f}x"]
        sh = w.get("shuffled")
        if sh:
            lines += [f"    seeded shuffled read (shuffle_buffer {sh['shuffle_buffer']:,}, load {sh['load_min']:.1f}-"
                      f"{sh['load_max']:.1f}), vs the hand-tuned shuffle(B) Example graph "
                      f"({sh['hand_shuffle_rec_s']:,.0f} rec/s):"]
            for key, what in (("columnar_default", "columnar default"), ("example_default", "Example default")):
                lines.append(f"      {what:<22}  {sh[key + '_rec_s']:>12,.0f} rec/s  {sh[key + '_ratio']:.2f}x (range "
                             f"{sh[key + '_ratio_min']:.2f}-{sh[key + '_ratio_max']:.2f})")
        lines += limit_lines(w.get("limit"))
    for row in r.get("shuffle", []):
        lines.append(f"  shuffle_buffer {row['buffer']:,}: mean displacement Example {row['example_displacement']:,.0f}"
                     f" / columnar {row['columnar_displacement']:,.0f} ({row['displacement_ratio']:.2f}x), rank "
                     f"correlation {row['example_rank_correlation']:.3f} / {row['columnar_rank_correlation']:.3f}")
    return "\n".join(lines)
