"""``tfpipe bench pipeline [DIR]``: every pipeline variant, in one run, with no step and against a step.

For each variant of ``bench.core.variants.VARIANTS`` (naive per-record parse, the vectorized ``build_dataset``
defaults, hand-tuned candidates, no prefetch, cache placement, Pipe mode, shuffle):

1. pure pipeline throughput (records/s with no training step) over ``--runs`` rounds (every variant once per
   round, the order rotated by one per round): each variant's min, median and max records/s, and the
   medians of its per-round ratios to the naive graph and to the best hand-tuned graph of the same round,
   and the cores it used (median of process CPU-seconds over wall seconds): a graph's speed on a shared host
   follows the CPU it gets, which changes from run to run; one figure hides which speed it got;
2. against a simulated accelerator step: input-wait %, verdict, records/s, step times. Without
   ``--step-ms`` the step (and, without ``--batch-size``, the step scenario's batch size) is chosen from
   the throughputs just measured: one at which the naive graph is input-bound and the default graph is
   not (``choose_scenario``), and the output says why.

The row of tfpipe's default graph (``vectorized``: ``build_dataset`` with the defaults) is marked
``tfpipe default``, the hand-tuned graphs ``hand-tuned``. Prints a table and SageMaker-style metric lines; ``--json`` and ``--png`` write the results and the chart
(two panels: no-step throughput per variant, and the per-step wait/compute split).
Without DIR (or with ``--generate N``) a Criteo-like shard set is generated in a temporary directory.
"""
from __future__ import annotations

import argparse
import logging
import os
import shutil
import sys
import tempfile

from converters.cli.parser import add_json_out_option, add_output_file_option, add_set_argument
from converters.cli.types import nonneg_int, positive_float, positive_int, step_milliseconds
from sharding.epochs import epoch_batches

__all__ = ["add_parser", "run", "load_variants", "choose_scenario", "throughput_rounds", "roles", "one_epoch",
           "DEFAULT_GENERATE", "DEFAULT_STEP_MS", "DEFAULT_RUNS", "DEFAULT_VARIANT"]

log = logging.getLogger(__name__)

DEFAULT_GENERATE = 200_000  # records generated when no DIR is given
DEFAULT_BATCH = 512
DEFAULT_STEP_MS = 50.0      # the step when it cannot be chosen from measured throughputs
FETCH_FLOOR_MS = 2.0        # next() on a ready batch after an idle step: ~1 ms median, ~2 ms mean on the 2-core VMs
MIN_STEP_MS = 80.0          # the fetch floor stays at half of 5 % (not input-bound) of a step this long
NAIVE_SHARE = 3             # the step is a third of the naive graph's time per batch (it idles ~2/3)
MAX_BATCH_SCALE = 64
DEFAULT_RUNS = 5            # no-step throughput rounds: each variant's distribution over them
DEFAULT_VARIANT = "vectorized"   # the variant that is tfpipe's default graph (build_dataset, default options)


def add_parser(bench_sub) -> argparse.ArgumentParser:
    p = bench_sub.add_parser(
        "pipeline", help="pipeline variants: records/s with no step, and input-wait %% against a simulated step",
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_set_argument(p, "dir", nargs="?", help="the shard set (a directory with index.json); omitted: generate one")
    p.add_argument("--generate", type=positive_int, metavar="N", default=None,
                   help=f"generate N Criteo-like records in a temp dir (default {DEFAULT_GENERATE:,} when DIR is omitted)")
    p.add_argument("--step-ms", type=step_milliseconds, default=None, metavar="MS",
                   help="simulated accelerator step time (default: chosen from the measured throughputs, so that "
                        "the naive graph is input-bound and the default is not)")
    p.add_argument("--batch-size", type=positive_int, default=None, metavar="N",
                   help=f"batch size (default {DEFAULT_BATCH}; the step scenario's may be larger, chosen with the "
                        f"step)")
    p.add_argument("--steps", type=positive_int, default=100, metavar="N", help="measured steps per variant (default 100)")
    p.add_argument("--warmup", type=nonneg_int, default=10, metavar="N",
                   help="unmeasured warmup steps per variant (default 10)")
    p.add_argument("--throughput-batches", type=positive_int, default=None, metavar="N",
                   help="batches read per variant for the no-step throughput (default: one epoch, at most 400)")
    p.add_argument("--runs", type=positive_int, default=DEFAULT_RUNS, metavar="N",
                   help=f"no-step throughput rounds (default {DEFAULT_RUNS}): min, median and max per variant")
    p.add_argument("--variants", default=None, metavar="A,B", help="comma-separated variant names (default: all)")
    p.add_argument("--device", choices=("auto", "host", "gpu"), default="auto",
                   help="where the simulated step runs (default auto: GPU if TensorFlow sees one)")
    add_json_out_option(p, "the results")
    add_output_file_option(p, "--png", "write the where-the-time-goes chart (PNG)")
    p.add_argument("--price-per-hour", type=positive_float, default=None, metavar="USD",
                   help="accelerator instance price; adds idle GPU-hours and dollars per epoch")
    p.add_argument("--no-throughput", action="store_true", help="skip the no-step throughput pass")
    return p


# -- variants ------------------------------------------------------------------------------------------

def load_variants():
    """The pipeline engineer's registry module ``bench.core.variants`` (``VARIANTS``, ``HAND_TUNED``,
    ``run_speed_suite``)."""
    from converters.util.errors import TfpipeError

    from ..core import variants as V

    missing = [n for n in ("VARIANTS", "HAND_TUNED", "run_speed_suite") if not hasattr(V, n)]
    if missing:
        raise TfpipeError(f"bench.core.variants lacks {', '.join(missing)}")
    return V


def one_epoch(records: int, batch_size: int, *, drop_remainder: bool = False) -> int:
    """Batches in one epoch of ``records`` records as the product counts them (the variants keep a short last
    batch, as ``PipelineSpec`` does by default), at least one."""
    return max(1, epoch_batches(records, batch_size, drop_remainder))


def _epochs_for(batches: int, batch_size: int, records: int) -> int:
    """Epochs needed to serve ``batches`` batches (plus one for short final batches)."""
    per_epoch = one_epoch(records, batch_size)
    return -(-batches // per_epoch) + 1


def choose_scenario(naive_rate: float, default_rate: float, batch_size: int, *,
                    scale_batch: bool = True) -> tuple[int, float, str]:
    """(batch, step ms, why): a scenario in which the naive graph is input-bound and the default is not.

    Both graphs produce in the background while the step runs (tf.data injects a prefetch even into the
    naive graph), so a graph is input-bound when producing a batch takes longer than the step: it idles
    max(0, t − step) / max(t, step). The step is a third of the naive graph's time per batch (it idles ~2/3,
    and still over 20 % if it runs twice as fast as measured, e.g. when the measurement ran on a busy host),
    provided that keeps the default's fetch floor (~2 ms per ``next()`` after an idle step) at half of 5 %
    (step ≥ 80 ms; at batch 4096 and a 40 ms step the default read ~10 % here, 2 % at 80 ms) and the
    default's own time per batch under half the step. On 2 cores the naive graph needs ~15–25 ms per batch of
    512, far too little for both; with ``scale_batch`` the batch is doubled until both hold (≤ 64×).
    """
    if not (naive_rate > 0 and default_rate > 0 and batch_size > 0):
        raise ValueError(f"rates and batch size must be > 0, got {naive_rate!r}, {default_rate!r}, {batch_size!r}")
    batch = batch_size
    while True:
        t_naive = 1000.0 * batch / naive_rate
        t_default = 1000.0 * batch / default_rate
        step = t_naive / NAIVE_SHARE
        ok = step >= MIN_STEP_MS and t_default <= step / 2
        if ok or not scale_batch or batch >= MAX_BATCH_SCALE * batch_size:
            break
        batch *= 2
    step = max(1.0, 5.0 * round(step / 5.0)) if step >= 5 else round(step, 1) or 0.1
    naive_idle = 100 * max(0.0, t_naive - step) / max(t_naive, step)
    default_idle = 100 * (FETCH_FLOOR_MS + max(0.0, t_default - step)) / (step + FETCH_FLOOR_MS)
    from ..core.measure import verdict_for

    why = (f"the naive graph needs {t_naive:.1f} ms per batch of {batch}, so with {step:g} ms steps it idles "
           f"~{naive_idle:.0f}% ({verdict_for(naive_idle)}); the default needs {t_default:.1f} ms, hidden behind the "
           f"step, and only the ~{FETCH_FLOOR_MS:g} ms fetch floor is left (~{default_idle:.0f}%: "
           f"{verdict_for(min(100.0, default_idle))})")
    if batch != batch_size:
        why += (f"; batch {batch}, not {batch_size}: at {batch_size} the naive graph needs only "
                f"{1000.0 * batch_size / naive_rate:.1f} ms, and a step that short would put the default's fetch "
                f"floor above 5%")
    if not ok:
        why = (f"no step separates them at batch {batch} (the fetch floor is over 5% of any step at which the "
               f"naive graph is input-bound): try a larger --batch-size; {why}")
    return batch, step, why


def roles(names, hand_tuned) -> dict[str, str]:
    """The table's mark of each variant: ``tfpipe default`` for :data:`DEFAULT_VARIANT`, ``hand-tuned``."""
    return {n: ("tfpipe default" if n == DEFAULT_VARIANT else "hand-tuned" if n in hand_tuned else "") for n in names}


def throughput_rounds(V, data_dir: str, batch_size: int, names: list[str], *, runs: int, max_batches: int,
                      options: dict | None = None) -> dict[str, dict]:
    """Per variant over ``runs`` rounds (the order rotated by one per round): the median, min and max records/s
    and every round's, and the medians of the per-round ratios to naive and to the best hand-tuned graph."""
    import statistics

    per: dict[str, list[dict]] = {n: [] for n in names}
    for r in range(runs):
        order = names[r % len(names):] + names[:r % len(names)]
        for row in V.run_speed_suite(data_dir, batch_size, order, max_batches=max_batches, options=options):
            per[row["variant"]].append(row)
    out = {}
    for n, rows in per.items():
        rates = [x["records_per_s"] for x in rows]
        best = dict(max(rows, key=lambda x: x["records_per_s"]))

        def med(key):
            vals = [x[key] for x in rows if x.get(key) is not None]
            return statistics.median(vals) if vals else None

        cores = [x["cpu_seconds"] / x["seconds"] for x in rows if x.get("cpu_seconds") is not None and x.get("seconds")]
        best.update({"records_per_s": statistics.median(rates), "records_per_s_min": min(rates),
                     "records_per_s_max": max(rates), "rates": [round(x, 1) for x in rates], "runs": len(rates),
                     "vs_naive": med("vs_naive"), "vs_best_hand_tuned": med("vs_best_hand_tuned"),
                     "cores": statistics.median(cores) if cores else None})
        out[n] = best
    return out


# -- command -------------------------------------------------------------------------------------------

def run(args) -> int:
    from converters.util.errors import TfpipeError

    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")  # before TensorFlow loads: keep C++ INFO/WARNING off the table
    if args.png:   # the extra --png needs, checked before the first measurement (--json-out needs none)
        from ..report.plot import check_plotting

        check_plotting("--png")
    tmp = tempfile.mkdtemp(prefix="tfpipe-bench-")
    try:
        data_dir = args.dir
        if data_dir is None or args.generate is not None:
            if data_dir is not None:
                raise TfpipeError("give either DIR or --generate N, not both")
            from converters.libsvm.synthetic import write_criteo_shards

            n = args.generate or DEFAULT_GENERATE
            data_dir = os.path.join(tmp, "criteo")
            print(f"generating {n:,} Criteo-like records in {data_dir}", file=sys.stderr)
            write_criteo_shards(data_dir, n, shard_bytes=16 << 20)
        return _run(args, data_dir, tmp)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def _run(args, data_dir: str, scratch: str) -> int:
    from converters.shardset.reader import read_manifest
    from converters.util.errors import TfpipeError

    from ..core.compare import compare
    from ..report.tables import format_table, reports_to_json
    from ..core.steps import simulated_step

    manifest = read_manifest(data_dir)
    V = load_variants()
    registry = V.VARIANTS
    names = list(registry)
    if args.variants:
        names = [s.strip() for s in args.variants.split(",") if s.strip()]
        unknown = [n for n in names if n not in registry]
        if unknown:
            raise TfpipeError(f"unknown variant(s) {', '.join(unknown)}; known: {', '.join(registry)}")
    hand_tuned = [n for n in V.HAND_TUNED if n in names]

    # 1. pure pipeline throughput, no step: the variants' own suite, one run
    batch_size = args.batch_size or DEFAULT_BATCH
    tput: dict[str, dict] = {}
    if not args.no_throughput:
        max_batches = args.throughput_batches or min(one_epoch(manifest.records, batch_size), 400)
        print(f"throughput with no step: {len(names)} variants, up to {max_batches} batches each, {args.runs} "
              f"round(s)", file=sys.stderr)
        tput = throughput_rounds(V, data_dir, batch_size, names, runs=args.runs, max_batches=max_batches,
                                 options={"pipe": {"pipe_dir": os.path.join(scratch, "pipe-throughput")}})

    # 2. against the simulated step: input wait, verdict, cost
    step_batch, step_ms, step_why = _scenario(args, tput, batch_size)
    print(f"step scenario: batch {step_batch}, step {step_ms:g} ms, {step_why}")
    step = simulated_step(step_ms, device=args.device)
    device = getattr(step, "device", "host")
    need = args.steps + args.warmup

    def factory(name):
        if name == "pipe":  # one FIFO per epoch: ask for enough epochs instead of repeat()
            epochs = _epochs_for(need, step_batch, manifest.records)
            pipe_dir = tempfile.mkdtemp(prefix="pipe-step-", dir=scratch)
            return lambda: registry[name](data_dir, step_batch, epochs=epochs, pipe_dir=pipe_dir)
        return lambda: registry[name](data_dir, step_batch).repeat()

    def show(r):
        print(f"  {r.name}: input wait {r.input_wait_pct:.1f}% ({r.verdict})", file=sys.stderr)

    print(f"against a {step_ms:g} ms step on {device}: {args.steps} steps after {args.warmup} warmup",
          file=sys.stderr)
    reports = compare({n: factory(n) for n in names}, step, steps=args.steps, warmup=args.warmup,
                      price_per_hour=args.price_per_hour, records_per_epoch=manifest.records,
                      gpu_sampler="auto", on_report=show)

    extra_cols = {"graph": roles(names, hand_tuned)}
    if tput:
        def ratio(v):
            return "-" if v is None else f"{v:.2f}x"
        extra_cols["no-step rec/s"] = {n: f"{t['records_per_s']:,.0f}" for n, t in tput.items()}
        extra_cols["min-max"] = {n: f"{t['records_per_s_min']:,.0f}-{t['records_per_s_max']:,.0f}"
                                 for n, t in tput.items()}
        extra_cols["cores used"] = {n: "-" if t.get("cores") is None else f"{t['cores']:.2f}" for n, t in tput.items()}
        extra_cols["vs naive"] = {n: ratio(t.get("vs_naive")) for n, t in tput.items()}
        extra_cols["vs best tuned"] = {n: ratio(t.get("vs_best_hand_tuned")) for n, t in tput.items()}
    runs = f"median [min-max] of {args.runs} round(s), load {os.getloadavg()[0]:.1f}; " if tput else ""
    print(f"{manifest.records:,} records in {len(manifest.shards)} shards; no-step throughput at batch {batch_size} "
          f"({runs}ratios: medians of per-round ratios); "
          f"step scenario: batch {step_batch}, simulated step {step_ms:g} ms on {device}; {os.cpu_count()} vCPUs")
    print(format_table(reports, extra_columns=extra_cols))
    for r in reports:
        print(r.metric_line())

    meta = {"dir": data_dir, "records": manifest.records, "shards": len(manifest.shards),
            "batch_size": batch_size, "step_batch_size": step_batch, "step_ms": step_ms,
            "step_chosen": args.step_ms is None, "step_why": step_why, "step_device": device,
            "steps": args.steps, "warmup": args.warmup, "price_per_hour": args.price_per_hour,
            "hand_tuned": hand_tuned, "default_variant": DEFAULT_VARIANT, "runs": args.runs,
            "cpu_count": os.cpu_count(), "throughput": tput}
    if args.json_out:
        from converters.util.outfile import write_output

        write_output(args.json_out, (reports_to_json(reports, meta=meta) + "\n").encode(), what="--json-out")
        print(f"wrote {args.json_out}", file=sys.stderr)
    if args.png:
        from ..report.plot import plot_pipeline

        chosen = ", chosen from the throughputs" if args.step_ms is None else ""
        plot_pipeline(reports, {n: t["records_per_s"] for n, t in tput.items()}, args.png,
                      title=f"tfpipe bench pipeline: {manifest.records:,} records, {os.cpu_count()} vCPUs",
                      throughput_title=f"Throughput with no step (batch {batch_size})",
                      step_title=f"Time per step: batch {step_batch}, {step_ms:g} ms step{chosen} ({device})",
                      hand_tuned=hand_tuned or None)
        print(f"wrote {args.png}", file=sys.stderr)
    return 0


def _scenario(args, tput: dict, batch_size: int) -> tuple[int, float, str]:
    """(batch, step ms, why): ``--step-ms`` as given, or chosen from the naive and default (``vectorized``)
    no-step throughputs (the batch too, unless ``--batch-size`` was given)."""
    if args.step_ms is not None:
        return batch_size, args.step_ms, "as asked (--step-ms)"
    naive, default = tput.get("naive"), tput.get("vectorized")
    if naive and default and naive["records_per_s"] > 0 and default["records_per_s"] > 0:
        batch, step, why = choose_scenario(naive["records_per_s"], default["records_per_s"], batch_size,
                                           scale_batch=args.batch_size is None)
        return batch, step, f"chosen from the measured throughputs: {why}"
    return batch_size, DEFAULT_STEP_MS, ("the default step: naive and vectorized throughputs were not both "
                                         "measured, so it could not be chosen from them")
