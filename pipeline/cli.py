"""``tfpipe pipeline explain DIR`` (stages, settings and why), ``tfpipe pipeline tune DIR`` (the read strategy
measured on this machine, stored for ``read="auto"``) and ``tfpipe pipeline lint script.py:function``."""
from __future__ import annotations

import argparse

from converters.util.errors import TfpipeError

__all__ = ["register"]


def _epochs(text: str) -> int | None:
    if text in ("forever", "0", "none", "None"):
        return None
    return int(text)


def register(sub) -> None:
    p = sub.add_parser("pipeline", help="explain, tune or lint tf.data input pipelines")
    psub = p.add_subparsers(dest="pipeline_command", metavar="COMMAND")
    psub.required = True

    e = psub.add_parser("explain", help="print the stages build_dataset would build, with settings and why")
    e.add_argument("manifest", help="shard-set directory or its index.json (local or s3://)")
    e.add_argument("--batch-size", type=int, required=True)
    e.add_argument("--mode", choices=("file", "pipe"), default="file")
    e.add_argument("--channel", help="Pipe-mode channel name")
    e.add_argument("--pipe-dir", default="/opt/ml/input/data")
    e.add_argument("--shuffle-buffer", type=int, default=0)
    e.add_argument("--seed", type=int)
    e.add_argument("--epochs", type=_epochs, default=1, help="number of epochs, or 'forever'")
    e.add_argument("--cache", default="auto", help="auto|memory|none|file:PATH")
    e.add_argument("--drop-remainder", action="store_true")
    e.add_argument("--num-shards", type=int, default=1)
    e.add_argument("--shard-index", type=int, default=0)
    e.add_argument("--read", choices=("auto", "sequential", "interleave", "parallel_reads"), default="auto")
    e.add_argument("--cores", type=int, help="cores to plan for (default: this host's)")
    e.add_argument("--sparse-as", choices=("sparse", "ragged"), default="sparse",
                   help="variable-length features (a --sparse LibSVM set) as tf.SparseTensor or tf.RaggedTensor")
    e.add_argument("--tune", choices=("stored", "on-first-use", "off"), default="stored",
                   help="use a stored `tfpipe pipeline tune` result (default), tune on first build, or never")
    e.add_argument("--cache-dir", help="remote sets (s3://, ...): the host's stream cache directory "
                                       "(default $TFPIPE_CACHE/<hash of the URL>)")
    e.add_argument("--cache-limit", help="remote sets: most bytes the stream cache keeps, e.g. 200GiB (default: none)")
    e.add_argument("--read-ahead", type=int, help="remote sets: shards fetched ahead of the ones being read (default 2)")
    e.set_defaults(func=_explain)

    t = psub.add_parser("tune", help="time the output-equivalent read strategies on this machine and store the "
                                     "winner for read='auto'")
    t.add_argument("manifest", help="shard-set directory or its index.json (local or s3://)")
    t.add_argument("--batch-size", type=int, required=True)
    t.add_argument("--seconds", type=float, default=30.0, help="time budget (default 30)")
    t.add_argument("--rounds", type=int, default=7, help="paired rounds (default 7; fewer if the budget ends)")
    t.add_argument("--num-shards", type=int, default=1,
                   help="tune rank 0's read under a record-level shard(n, i) (sequential readers only)")
    t.add_argument("--drop-remainder", action="store_true")
    t.add_argument("--no-store", action="store_true", help="measure and print, store nothing")
    t.add_argument("--json", action="store_true", help="print the result as JSON")
    t.set_defaults(func=_tune)

    lt = psub.add_parser("lint", help="lint the tf.data graph returned by a function: script.py:function")
    lt.add_argument("target", help="path/to/script.py:function (called without arguments, returns a Dataset)")
    lt.set_defaults(func=_lint)


def _explain(args: argparse.Namespace) -> int:
    from .describe import describe
    from .spec import PipelineSpec

    extra = {"cores": args.cores} if args.cores else {}
    spec = PipelineSpec.from_manifest(
        args.manifest, args.batch_size, mode=args.mode, channel=args.channel, pipe_dir=args.pipe_dir,
        shuffle_buffer=args.shuffle_buffer, seed=args.seed, epochs=args.epochs, cache=args.cache,
        drop_remainder=args.drop_remainder, num_shards=args.num_shards, shard_index=args.shard_index,
        read=args.read, sparse_as=args.sparse_as, tune=args.tune, cache_dir=args.cache_dir,
        cache_limit=args.cache_limit, read_ahead=args.read_ahead, **extra)
    print(describe(spec))
    return 0


def _tune(args: argparse.Namespace) -> int:
    import json
    import os
    import sys

    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    from .helpers import tune
    from .tuning import format_report

    if args.seconds <= 0 or args.rounds < 1:
        raise ValueError(f"--seconds must be > 0 and --rounds >= 1, got {args.seconds} and {args.rounds}")
    if args.batch_size < 1:
        raise ValueError(f"batch_size must be a positive integer, got {args.batch_size}")

    def progress(r, rates):
        print(f"  round {r + 1}: {len(rates)} candidates timed", file=sys.stderr)

    print(f"tuning the read of {args.manifest} at batch {args.batch_size} (about {args.seconds:g} s)",
          file=sys.stderr)
    report = tune(args.manifest, args.batch_size, seconds=args.seconds, rounds=args.rounds, store=not args.no_store,
                  num_shards=args.num_shards, drop_remainder=args.drop_remainder, on_round=progress)
    if args.json:
        print(json.dumps({**report.to_json(), "path": report.path}, indent=2, sort_keys=True))
    else:
        print(format_report(report, manifest=args.manifest))
    return 0


def _load_target(target: str):
    import importlib.util
    import os

    path, sep, func = target.rpartition(":")
    if not sep or not path or not func:
        raise TfpipeError(f"lint target must be script.py:function, got {target!r}")
    if not os.path.isfile(path):
        raise TfpipeError(f"lint target {path}: no such file")
    spec = importlib.util.spec_from_file_location("_tfpipe_lint_target", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    fn = getattr(module, func, None)
    if not callable(fn):
        raise TfpipeError(f"lint target {path}: no function {func!r}")
    return fn


def _lint(args: argparse.Namespace) -> int:
    from .lint import lint

    dataset = _load_target(args.target)()
    if not hasattr(dataset, "_as_serialized_graph"):
        raise TfpipeError(f"{args.target} returned {type(dataset).__name__}, not a tf.data.Dataset")
    findings = lint(dataset)
    for f in findings:
        print(f)
    if not findings:
        print("no findings")
    return 1 if findings else 0
