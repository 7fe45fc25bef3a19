"""``tfpipe bench threads``: intra-op / inter-op / OMP_NUM_THREADS combinations for a CPU training step,
each in a fresh process; prints a table and the best setting."""
from __future__ import annotations

import argparse
import json
import os
import sys

from converters.cli.parser import add_json_out_option
from converters.cli.types import duration_seconds, nonneg_int, positive_int

from ..report.tables import mark_default

__all__ = ["add_parser", "run", "apply_hint"]


def apply_hint(c) -> str:
    """How to apply a combination in a trainer (0 / None = leave TensorFlow's / OpenMP's default)."""
    if c.intra and c.inter and c.omp is not None:
        return f"pipeline.configure_threads(intra={c.intra}, inter={c.inter}, omp={c.omp})"
    parts = []
    if c.omp is not None:
        parts.append(f"export OMP_NUM_THREADS={c.omp}")
    if c.intra:
        parts.append(f"tf.config.threading.set_intra_op_parallelism_threads({c.intra})")
    if c.inter:
        parts.append(f"tf.config.threading.set_inter_op_parallelism_threads({c.inter})")
    return "; ".join(parts) if parts else "leave threading at TensorFlow's defaults (set nothing)"


def add_parser(bench_sub) -> argparse.ArgumentParser:
    p = bench_sub.add_parser("threads", help="find the best intra/inter-op and OMP thread counts for a CPU step",
                             description=__doc__)
    p.add_argument("--model", choices=("deepfm", "lm"), default="deepfm", help="training step to time (default deepfm)")
    p.add_argument("--batch-size", type=positive_int, default=512, metavar="N", help="batch size (default 512)")
    p.add_argument("--steps", type=positive_int, default=30, metavar="N",
                   help="timed steps per combination (default 30)")
    p.add_argument("--warmup", type=nonneg_int, default=5, metavar="N",
                   help="untimed steps per combination (default 5)")
    p.add_argument("--cores", type=positive_int, default=None, metavar="N",
                   help="cores (vCPUs) to plan for (default: this host's)")
    p.add_argument("--combos", default=None, metavar="I,J,K;...",
                   help="explicit combinations intra,inter[,omp] separated by ';' (omp '-' = unset; 0 = TF default)")
    p.add_argument("--timeout", type=duration_seconds, default=300.0, metavar="SECONDS",
                   help="seconds per combination (default 300)")
    add_json_out_option(p, "the results")
    return p


def run(args) -> int:
    from converters.util.errors import TfpipeError
    from converters.util.outfile import write_output

    from ..core.threads import best, candidate_combos, parse_combos, tune

    cpus = args.cores or os.cpu_count() or 1
    combos = parse_combos(args.combos) if args.combos else candidate_combos(cpus)
    print(f"{len(combos)} combinations, {args.model} step, batch {args.batch_size}, {cpus} vCPUs", file=sys.stderr)

    def show(r):
        msg = f"{r.step_ms_p50:.2f} ms/step" if r.ok else r.error
        print(f"  {r.combo.label}: {msg}", file=sys.stderr)

    results = tune(combos, steps=args.steps, warmup=args.warmup, batch_size=args.batch_size, model=args.model,
                   timeout=args.timeout, on_result=show)
    top = best(results)
    head = ("intra", "inter", "OMP_NUM_THREADS", "step p50 ms", "step mean ms", "records/s", "speed vs best")
    rows = []
    for r in results:
        c = r.combo
        rows.append(("tf" if c.intra == 0 else str(c.intra), "tf" if c.inter == 0 else str(c.inter),
                     "unset" if c.omp is None else str(c.omp),
                     f"{r.step_ms_p50:.2f}" if r.ok else "failed",
                     f"{r.step_ms_mean:.2f}" if r.ok else "-",
                     f"{r.records_per_s:,.0f}" if r.ok else "-",
                     f"{top.step_ms_p50 / r.step_ms_p50:.2f}x" if r.ok and top else "-"))  # speed: > 1 is better
    widths = [max(len(h), *(len(row[i]) for row in rows)) for i, h in enumerate(head)]
    print("  ".join(h.rjust(w) for h, w in zip(head, widths)))
    for row, r in zip(rows, results):
        cells = "  ".join(c.rjust(w) for c, w in zip(row, widths))
        untouched = r.combo.intra == 0 and r.combo.inter == 0 and r.combo.omp is None
        print(mark_default(cells, "TensorFlow's own thread counts") if untouched else cells)
    if args.json_out:
        doc = {"model": args.model, "batch_size": args.batch_size, "cpus": cpus,
               "results": [r.as_dict() for r in results], "best": top.as_dict() if top else None}
        write_output(args.json_out, (json.dumps(doc, indent=2, sort_keys=True) + "\n").encode(), what="--json-out")
    if top is None:
        raise TfpipeError("every thread combination failed: " + "; ".join(r.error for r in results))
    c = top.combo
    print(f"best: {c.label} ({top.step_ms_p50:.2f} ms/step)")
    print("  apply: " + apply_hint(c))
    for r in results:
        if r.ok:
            print(f"tfpipe: threads_intra={r.combo.intra}; threads_inter={r.combo.inter}; "
                  f"omp={r.combo.omp if r.combo.omp is not None else 0}; step_ms_p50={r.step_ms_p50:.3f};")
    return 0
