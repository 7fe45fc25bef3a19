"""``tfpipe pipeline explain DIR`` (stages, settings and why), ``tfpipe pipeline tune DIR`` (the read strategy
measured on this machine, stored for ``read="auto"``), ``tfpipe pipeline lint script.py:function`` and
``tfpipe pipeline offsets DIR`` (the record-offset indexes a resume seeks with, computed ahead)."""
from __future__ import annotations

import argparse

from converters.cli.parser import add_json_option, add_set_argument
from converters.cli.types import nonneg_int, positive_int
from converters.util.errors import TfpipeError

__all__ = ["register"]


def _epochs(text: str) -> int | None:
    if text in ("forever", "0", "none", "None"):
        return None
    try:
        n = int(text)
    except ValueError:
        n = -1
    if n < 1:
        raise argparse.ArgumentTypeError(f"expected a positive number of epochs or 'forever', got {text!r}")
    return n


def register(sub) -> None:
    p = sub.add_parser("pipeline", help="explain, tune or lint tf.data input pipelines")
    psub = p.add_subparsers(dest="pipeline_command", metavar="COMMAND")
    psub.required = True

    e = psub.add_parser("explain", help="print the stages build_dataset would build, with settings and why")
    add_set_argument(e, "manifest")
    e.add_argument("--batch-size", type=positive_int, required=True, metavar="N", help="batch size per rank")
    e.add_argument("--mode", choices=("file", "pipe"), default="file",
                   help="SageMaker input mode: files on disk or a Pipe-mode FIFO (default file)")
    e.add_argument("--channel", help="Pipe-mode channel name (required with --mode pipe; default: none)")
    e.add_argument("--pipe-dir", default="/opt/ml/input/data", metavar="DIR",
                   help="directory of the Pipe-mode FIFOs (default /opt/ml/input/data)")
    e.add_argument("--shuffle-buffer", type=nonneg_int, default=0, metavar="N",
                   help="records in the read-time shuffle buffer; 0: no shuffle (default 0)")
    e.add_argument("--seed", type=nonneg_int, metavar="S", help="seed of the read-time shuffle (default: none)")
    e.add_argument("--epochs", type=_epochs, default=1, metavar="N|forever",
                   help="number of epochs, or 'forever' (default 1)")
    e.add_argument("--cache", default="auto", metavar="auto|memory|none|file:PATH",
                   help="cache the parsed records: auto (none for one epoch, else memory when this rank's data is "
                        "under 25%% of RAM), memory, none or file:PATH (default auto)")
    e.add_argument("--drop-remainder", action="store_true",
                   help="drop the last partial batch (default: keep it)")
    e.add_argument("--ranks", type=positive_int, default=1, dest="num_shards", metavar="N",
                   help="ranks sharing the read: each keeps a record-level shard(N, --rank) (default 1)")
    e.add_argument("--rank", type=nonneg_int, default=0, dest="shard_index", metavar="I",
                   help="this rank's index among --ranks (default 0)")
    e.add_argument("--read", choices=("auto", "sequential", "interleave", "parallel_reads"), default="auto",
                   help="read strategy; auto: a stored tuning result, else the built-in rule (default auto)")
    e.add_argument("--cores", type=positive_int, metavar="N", help="cores to plan for (default: this host's)")
    e.add_argument("--sparse-as", choices=("sparse", "ragged"), default="sparse",
                   help="variable-length features (a --sparse LibSVM set) as tf.SparseTensor or tf.RaggedTensor "
                        "(default sparse)")
    e.add_argument("--tune", choices=("stored", "on-first-use", "off"), default="stored",
                   help="use a stored 'tfpipe pipeline tune' result (default), tune on first build, or never")
    e.add_argument("--stream-cache-dir", help="remote sets (s3://, ...): the host's stream cache directory "
                                              "(default <scratch>/<hash of the URL>, scratch: $TFPIPE_CACHE, "
                                              "$TMPDIR/tfpipe, SageMaker's /tmp/tfpipe or ~/.cache/tfpipe)")
    e.add_argument("--stream-cache-limit", help="remote sets: most bytes the stream cache keeps, e.g. 200GiB "
                                                "(default: half the free space of its disk, read when the cache opens)")
    e.add_argument("--read-ahead", type=nonneg_int, help="remote sets: shards fetched ahead of the ones being read "
                                                       "(default 2)")
    r = e.add_mutually_exclusive_group()
    r.add_argument("--resumable", action="store_true",
                   help="demand the resumable File-mode order (a pure function of seed, epoch, position; default: "
                        "when possible, i.e. a seeded, shuffled File-mode set) and list what cannot resume")
    r.add_argument("--no-resumable", action="store_true",
                   help="the default shuffle graph even where the resumable order is possible")
    e.add_argument("--service", metavar="grpc://HOST:PORT",
                   help="read and parse on this tf.data service's workers (docs/offload.md; default: here)")
    e.add_argument("--service-job", metavar="NAME", help="with --service: the run's job name, shared by its ranks "
                                                         "(default: from the SageMaker job, TF_CONFIG or the data)")
    e.set_defaults(func=_explain)

    t = psub.add_parser("tune", help="time the output-equivalent read strategies on this machine and store the "
                                     "winner for read='auto'")
    add_set_argument(t, "manifest")
    t.add_argument("--batch-size", type=positive_int, required=True, metavar="N", help="batch size per rank")
    t.add_argument("--seconds", type=_positive_seconds, default=30.0, help="time budget (default 30)")
    t.add_argument("--repeats", type=positive_int, default=7, metavar="N",
                   help="paired rounds (default 7; fewer if the budget ends)")
    t.add_argument("--ranks", type=positive_int, default=1, dest="num_shards", metavar="N",
                   help="tune rank 0's read under a record-level shard(N, 0) (sequential readers only; default 1)")
    t.add_argument("--drop-remainder", action="store_true", help="drop the last partial batch (default: keep it)")
    t.add_argument("--no-store", action="store_true", help="measure and print, store nothing")
    add_json_option(t, "the result")
    t.set_defaults(func=_tune)

    lt = psub.add_parser("lint", help="lint the tf.data graph returned by a function: script.py:function")
    lt.add_argument("target", metavar="SCRIPT:FUNCTION",
                    help="path/to/script.py:function (called without arguments, returns a Dataset)")
    lt.set_defaults(func=_lint)

    o = psub.add_parser("offsets", help="compute and cache the record-offset index of every shard, so that a "
                                        "resume enters a shard mid-file by a seek")
    add_set_argument(o, "manifest", help="shard set: a local directory (or its index.json)")
    o.add_argument("--workers", type=positive_int, default=1, metavar="N", help="shards indexed at once (default 1)")
    add_json_option(o, "the report")
    o.add_argument("--no-progress", action="store_true", help="no progress bar")
    o.set_defaults(func=_offsets)

    k = psub.add_parser("kernel", help="compile (or find) tfpipe's column kernel for this TensorFlow and compiler "
                                       "and say where it is: the one-pass decode of columnar sets")
    k.set_defaults(func=_kernel)

    from .service.cli import register as register_service  # `tfpipe service ...`: a command of its own

    register_service(sub)


def _positive_seconds(text: str) -> float:
    try:
        v = float(text)
    except ValueError:
        v = float("nan")
    if not v > 0:
        raise argparse.ArgumentTypeError(f"expected a positive number of seconds, got {text!r}")
    return v


def _explain(args: argparse.Namespace) -> int:
    from .describe import describe
    from .plan.manifest import PipelineSpec

    extra = {"cores": args.cores} if args.cores else {}
    if args.resumable or args.no_resumable:
        extra["resumable"] = bool(args.resumable)
    if args.service:
        extra.update(service=args.service, service_job=args.service_job)
    spec = PipelineSpec.from_manifest(
        args.manifest, args.batch_size, mode=args.mode, channel=args.channel, pipe_dir=args.pipe_dir,
        shuffle_buffer=args.shuffle_buffer, seed=args.seed, epochs=args.epochs, cache=args.cache,
        drop_remainder=args.drop_remainder, num_shards=args.num_shards, shard_index=args.shard_index,
        read=args.read, sparse_as=args.sparse_as, tune=args.tune,
        stream_cache_dir=args.stream_cache_dir, stream_cache_limit=args.stream_cache_limit, read_ahead=args.read_ahead,
        **extra)
    print(describe(spec))
    if args.service:
        _warn_idle_workers(spec)
    if args.resumable:
        from .resume.state import RESUME_LIMITS

        print("cannot resume mid-epoch (each refused with one line):")
        print("\n".join(f"  - {limit}" for limit in RESUME_LIMITS))
    return 0


def _warn_idle_workers(spec) -> None:
    """Warn when the service's workers outnumber this rank's files (asks the dispatcher, 2 s at most)."""
    from converters.util.errors import ServiceError

    from .plan.servicejob import idle_workers_warning
    from .service.probe import dispatcher_workers

    try:
        workers: int | None = len(dispatcher_workers(spec.service, 2.0))
    except (ServiceError, ValueError):  # no dispatcher answering (yet): judged on the files alone
        workers = None
    line = idle_workers_warning(len(spec.files), workers)
    if line:
        print(line)


def _tune(args: argparse.Namespace) -> int:
    import json
    import os
    import sys

    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    from .training import tune
    from .plan.tuning import format_report


    def progress(r, rates):
        print(f"  round {r + 1}: {len(rates)} candidates timed", file=sys.stderr)

    print(f"tuning the read of {args.manifest} at batch {args.batch_size} (about {args.seconds:g} s)",
          file=sys.stderr)
    report = tune(args.manifest, args.batch_size, seconds=args.seconds, rounds=args.repeats, store=not args.no_store,
                  num_shards=args.num_shards, drop_remainder=args.drop_remainder, on_round=progress)
    if args.json:
        print(json.dumps({**report.to_json(), "path": report.path}, indent=2, sort_keys=True))
    else:
        print(format_report(report, manifest=args.manifest))
    return 0


def _lint(args: argparse.Namespace) -> int:
    from .lint import lint, load_target

    dataset = load_target(args.target)()
    if not hasattr(dataset, "_as_serialized_graph"):
        raise TfpipeError(f"{args.target} returned {type(dataset).__name__}, not a tf.data.Dataset")
    findings = lint(dataset)
    for f in findings:
        print(f)
    if not findings:
        print("no findings")
    return 1 if findings else 0


def _offsets(args: argparse.Namespace) -> int:
    import json
    import sys

    from .resume.setoffsets import format_offsets_report, index_offsets

    report = index_offsets(args.manifest, workers=args.workers,
                           progress=not args.no_progress and sys.stderr.isatty())
    if args.json:
        print(json.dumps(report.to_json(), indent=2, sort_keys=True))
    else:
        print(format_offsets_report(report))
    return 1 if report.uncached else 0


def _kernel(args: argparse.Namespace) -> int:
    from .graph.cutkernel import DIR_ENV, KERNEL_ENV, build_kernel, kernel_dir

    state = build_kernel(retry=True)
    if not state.on:
        print(f"column kernel: off ({state.why}); columnar sets are read with TensorFlow's ops (the same rows, "
              f"more CPU)")
        return 1
    how = "compiled now" if state.compiled else "found in the cache"
    print(f"column kernel: on, {how}: {state.path}\n(cache: {kernel_dir()}, set by {DIR_ENV}; {KERNEL_ENV}=0 "
          f"turns it off)")
    return 0
