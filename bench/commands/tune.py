"""``tfpipe bench tune [DIR]``: does ``tfpipe pipeline tune`` make the default graph the fastest one here?

One run, on one shard set and batch size:

1. ``tfpipe pipeline tune`` (``--tune-seconds``) into a private cache directory (``--keep`` stores the result
   in the real tfpipe cache instead, where ``read="auto"`` picks it up afterwards);
2. paired rounds (``--repeats``, 7 by default) of: the default ``build_dataset`` without tuning
   (``tune="off"``: the built-in rule), the default after tuning, every hand-tuned graph of
   ``bench.core.variants.HAND_TUNED`` and the naive per-record graph. Each round runs every graph once (one epoch,
   or ``--window-batches``; slow graphs stop after ``--max-seconds``), in an order rotated by one per round.

``--beside reader`` runs both steps beside another TensorFlow process reading the same set in a loop (a busy
training host: other ranks, evaluation), ``--beside matmul`` beside another TensorFlow process computing
(512 x 512 matmuls in a loop on all its threads), ``--beside busy`` beside two busy loops.

Each figure is the median over rounds of a ratio taken inside a round. Targets: tuned default
≥ 0.97× the best hand-tuned graph and ≥ 12× naive; untuned default ≥ 0.9× the best hand-tuned graph.
Without DIR (or with ``--generate N``) 400,000 Criteo-like records are generated in a temporary directory.
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import tempfile

from converters.cli.parser import add_json_out_option, add_set_argument
from converters.cli.types import duration_seconds, positive_int
from sharding.epochs import epoch_batches

__all__ = ["add_parser", "run", "run_benchmark", "summarize", "format_report", "TARGETS"]

DEFAULT_GENERATE = 400_000
UNTUNED, TUNED = "default (untuned)", "default (tuned)"
TARGETS = {"tuned_vs_best_hand_tuned": 0.97, "untuned_vs_best_hand_tuned": 0.9, "tuned_vs_naive": 12.0}


def add_parser(bench_sub) -> argparse.ArgumentParser:
    p = bench_sub.add_parser("tune", help="the default graph before and after `tfpipe pipeline tune` vs the "
                                          "hand-tuned graphs (paired rounds)",
                             description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_set_argument(p, "dir", nargs="?", help="the shard set (a directory with index.json); omitted: generate one")
    p.add_argument("--generate", type=positive_int, metavar="N", default=None,
                   help=f"generate N Criteo-like records (default {DEFAULT_GENERATE:,} when DIR is omitted)")
    p.add_argument("--batch-size", type=positive_int, default=512, metavar="N", help="batch size (default 512)")
    p.add_argument("--repeats", type=positive_int, default=7, metavar="N", help="paired rounds (default 7)")
    p.add_argument("--tune-seconds", type=duration_seconds, default=30.0, metavar="SECONDS",
                   help="budget of 'tfpipe pipeline tune' (default 30)")
    p.add_argument("--window-batches", type=positive_int, default=None, metavar="N",
                   help="batches timed per graph and round (default: one epoch)")
    p.add_argument("--max-seconds", type=duration_seconds, default=3.0, metavar="SECONDS",
                   help="stop a slow graph's run after this (default 3)")
    p.add_argument("--beside", choices=("none", "reader", "matmul", "busy"), default="none",
                   help="tune and time beside another TensorFlow process reading the set or computing matmuls, or "
                        "two busy loops (default none)")
    p.add_argument("--keep", action="store_true", help="store the tuning result in the real tfpipe cache")
    add_json_out_option(p, "the results")
    return p


def summarize(rates: dict[str, list[float]], hand_tuned: list[str]) -> dict:
    """Per graph: median records/s, and median paired ratios to the naive graph and to the best hand-tuned
    graph (the hand-tuned graph with the highest median records/s) with the lowest round's; plus the three
    target figures."""
    from pipeline.plan.tuning import median, paired_ratios

    best = max(hand_tuned, key=lambda n: median(rates[n]))
    vs_best = paired_ratios(rates, best)
    vs_naive = paired_ratios(rates, "naive") if "naive" in rates else {}
    rows = [{"graph": n, "records_per_s": median(r), "vs_naive": median(vs_naive[n]) if vs_naive else None,
             "vs_best_hand_tuned": median(vs_best[n]), "vs_best_hand_tuned_min": min(vs_best[n]),
             "rates": [round(x, 1) for x in r]} for n, r in rates.items()]
    by = {r["graph"]: r for r in rows}
    figures = {"tuned_vs_best_hand_tuned": by[TUNED]["vs_best_hand_tuned"],
               "untuned_vs_best_hand_tuned": by[UNTUNED]["vs_best_hand_tuned"],
               "tuned_vs_naive": by[TUNED]["vs_naive"]}
    return {"best_hand_tuned": best, "rows": rows, "figures": figures,
            "met": {k: (v is not None and v >= TARGETS[k]) for k, v in figures.items()}}


def run_benchmark(data_dir: str, *, batch_size: int = 512, rounds: int = 7, tune_seconds: float = 30.0,
                  window_batches: int | None = None, max_seconds: float = 3.0, keep: bool = False,
                  beside: str = "none", log=None) -> dict:
    """Tune, then time untuned default, tuned default, hand-tuned graphs and naive in paired rounds."""
    from converters.shardset.reader import read_manifest
    from pipeline import tune

    from ..core.busyhost import neighbour_codes, neighbour_processes
    from ..core.variants import HAND_TUNED

    say = log or (lambda s: None)
    manifest = read_manifest(data_dir)
    window = window_batches or max(1, epoch_batches(manifest.records, batch_size, False))
    private = None if keep else tempfile.mkdtemp(prefix="tfpipe-bench-tune-cache-")
    saved = os.environ.get("TFPIPE_CACHE")
    codes = neighbour_codes(beside, data_dir, batch_size)
    try:
        if private:
            os.environ["TFPIPE_CACHE"] = private
        with neighbour_processes(codes):
            say(f"tuning ({tune_seconds:g} s budget; beside: {beside})")
            report = tune(data_dir, batch_size, seconds=tune_seconds)
            say(f"  winner: {report.winner.label()} ({report.vs_rule:.2f}x the built-in rule)")
            rates = _rounds(data_dir, batch_size, rounds, window, max_seconds, say)
    finally:
        if private:
            if saved is None:
                os.environ.pop("TFPIPE_CACHE", None)
            else:
                os.environ["TFPIPE_CACHE"] = saved
            shutil.rmtree(private, ignore_errors=True)
    out = summarize(rates, list(HAND_TUNED))
    out["meta"] = {"dir": data_dir, "records": manifest.records, "shards": len(manifest.shards),
                   "batch_size": batch_size, "rounds": rounds, "window_batches": window, "max_seconds": max_seconds,
                   "cpu_count": os.cpu_count(),
                   "load_avg": list(os.getloadavg()) if hasattr(os, "getloadavg") else None,
                   "tuned_winner": report.winner.label(), "tuned_vs_rule": report.vs_rule,
                   "tune_seconds": report.seconds, "stored": report.path if keep else None, "beside": beside,
                   "tuned_contended": report.contended,
                   "tuned_rejected": report.rejected.label() if report.rejected else None}
    return out


def _rounds(data_dir, batch_size, rounds, window, max_seconds, say):
    """The paired rounds of the untuned and tuned default, the hand-tuned graphs and naive."""
    from pipeline.plan.tuning import run_rounds

    from ..core.variants import HAND_TUNED, VARIANTS

    graphs = {UNTUNED: lambda: VARIANTS["vectorized"](data_dir, batch_size, tune="off"),
              TUNED: lambda: VARIANTS["vectorized"](data_dir, batch_size)}
    for name in (*HAND_TUNED, "naive"):
        graphs[name] = (lambda n: lambda: VARIANTS[n](data_dir, batch_size))(name)
    say(f"{rounds} paired rounds of {len(graphs)} graphs, {window} batches each (at most {max_seconds:g} s)")
    return run_rounds(graphs, rounds=rounds, window=window, max_seconds=max_seconds,
                      on_round=lambda r, _: say(f"  round {r + 1} done"))


RANKING_NOTE = ("ranked by 'vs best hand-tuned': the median over paired rounds of a graph's records/s divided by "
                "the best hand-tuned graph's in the same round (> 1: faster); 'records/s' is its own median, which "
                "busy rounds skew")


def format_report(out: dict) -> str:
    m = out["meta"]

    def ratio(v):
        return "-" if v is None else f"{v:.2f}x"

    lines = [f"{m['records']:,} records in {m['shards']} shards; batch {m['batch_size']}; {m['rounds']} paired "
             f"rounds of {m['window_batches']} batches; {m['cpu_count']} vCPUs",
             f"tuned read: {m['tuned_winner']} ({m['tuned_vs_rule']:.2f}x the built-in rule in tuning)"
             + (f"; {m['tuned_rejected']} beat the rule quiet but read {m['tuned_contended']['vs_rule']:.2f}x it "
                f"beside busy processes, so the rule was kept" if m.get("tuned_rejected") else "")
             + (f"; beside: {m['beside']}" if m.get("beside", "none") != "none" else ""), "",
             RANKING_NOTE,
             f"{'graph':34s} {'vs best hand-tuned':>19s} {'vs naive':>9s} {'records/s':>10s}"]
    for r in sorted(out["rows"], key=lambda r: -r["vs_best_hand_tuned"]):
        mark = "  (best hand-tuned)" if r["graph"] == out["best_hand_tuned"] else ""
        lines.append(f"{r['graph']:34s} {ratio(r['vs_best_hand_tuned']):>19s} {ratio(r['vs_naive']):>9s} "
                     f"{r['records_per_s']:10,.0f}{mark}")
    by = {r["graph"]: r for r in out["rows"]}
    lines += ["", f"lowest paired round vs best hand-tuned: tuned default "
                  f"{ratio(by[TUNED].get('vs_best_hand_tuned_min'))}, untuned default "
                  f"{ratio(by[UNTUNED].get('vs_best_hand_tuned_min'))}", ""]
    names = {"tuned_vs_best_hand_tuned": "tuned default vs best hand-tuned",
             "untuned_vs_best_hand_tuned": "untuned default vs best hand-tuned",
             "tuned_vs_naive": "tuned default vs naive"}
    for k, v in out["figures"].items():
        lines.append(f"{names[k]:38s} {ratio(v):>8s}  target ≥ {TARGETS[k]:g}x: "
                     f"{'met' if out['met'][k] else 'NOT met'}")
    return "\n".join(lines)


def run(args) -> int:
    from converters.util.errors import TfpipeError

    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    if args.dir is not None and args.generate is not None:
        raise TfpipeError("give either DIR or --generate N, not both")
    tmp = tempfile.mkdtemp(prefix="tfpipe-bench-tune-")
    try:
        data_dir = args.dir
        if data_dir is None:
            from converters.libsvm.synthetic import write_criteo_shards

            n = args.generate or DEFAULT_GENERATE
            data_dir = os.path.join(tmp, "criteo")
            print(f"generating {n:,} Criteo-like records in {data_dir}", file=sys.stderr)
            write_criteo_shards(data_dir, n, shard_bytes=16 << 20)
        out = run_benchmark(data_dir, batch_size=args.batch_size, rounds=args.repeats, tune_seconds=args.tune_seconds,
                            window_batches=args.window_batches, max_seconds=args.max_seconds, keep=args.keep,
                            beside=args.beside,
                            log=lambda s: print(s, file=sys.stderr, flush=True))
        print(format_report(out))
        if args.json_out:
            from converters.util.outfile import write_output

            write_output(args.json_out, (json.dumps(out, indent=2, sort_keys=True) + "\n").encode(),
                         what="--json-out")
            print(f"wrote {args.json_out}", file=sys.stderr)
        return 0
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
