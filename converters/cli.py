"""The ``tfpipe`` console script: ``main(argv)`` builds the parser from each package's ``register``
(entry points in group ``tfpipe.commands``) and turns library errors into one line and an exit code."""
from __future__ import annotations

import argparse
import json
import logging
import os
import sys
from importlib.metadata import entry_points

from . import __version__
from .errors import TfpipeError

__all__ = ["main", "build_parser", "register"]

# packages that contribute subcommands; used when the entry-point metadata is unavailable (source tree)
_FALLBACK = ("converters.cli:register", "sharding.cli:register", "pipeline.cli:register", "bench.cli:register")


def _registrars():
    eps = sorted(entry_points(group="tfpipe.commands"), key=lambda e: _FALLBACK_ORDER.get(e.value, 99))
    if eps:
        return [ep.load for ep in eps]
    import importlib

    def loader(spec):
        mod, _, fn = spec.partition(":")
        return lambda: getattr(importlib.import_module(mod), fn)
    return [loader(s) for s in _FALLBACK]


_FALLBACK_ORDER = {s: i for i, s in enumerate(_FALLBACK)}


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="tfpipe",
        description="Fast, correct TensorFlow input pipelines: convert data to TFRecord shards, plan "
                    "sharding, build tf.data graphs, and measure GPU idle time.")
    parser.add_argument("--version", action="version", version=f"tfpipe {__version__}")
    parser.add_argument("-v", "--verbose", action="count", default=0, help="more logging (-vv for debug)")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    sub.required = True
    for load in _registrars():
        load()(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    # TensorFlow's C++ INFO/WARNING lines (CPU feature notes) are noise in a CLI; TF_CPP_MIN_LOG_LEVEL=0 brings
    # them back. Set before any command imports TensorFlow.
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    parser = build_parser()
    args = parser.parse_args(argv)
    level = logging.WARNING - 10 * min(args.verbose, 2)
    logging.basicConfig(level=level, format="%(levelname)s %(name)s: %(message)s")
    try:
        return int(args.func(args) or 0)
    except TfpipeError as exc:
        print(f"tfpipe: error: {exc}", file=sys.stderr)
        return exc.exit_code
    except (ValueError, FileNotFoundError, IsADirectoryError, PermissionError) as exc:
        print(f"tfpipe: error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("tfpipe: interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:
        return 0


# -- converters' own subcommands ------------------------------------------------------------------------

def register(sub) -> None:
    """Add ``convert``, ``inspect``, ``verify`` and ``quickstart``."""
    convert = sub.add_parser("convert", help="convert LibSVM or text/jsonl data into TFRecord shards")
    csub = convert.add_subparsers(dest="format", metavar="FORMAT")
    csub.required = True
    from . import cli_libsvm, cli_text

    cli_libsvm.register(csub, sub)
    cli_text.register(csub, sub)

    p = sub.add_parser("inspect", help="print a shard set's manifest summary and schema")
    p.add_argument("path", help="shard-set directory (or its index.json), local or s3://")
    p.add_argument("--json", action="store_true", help="print the manifest as JSON")
    p.set_defaults(func=_cmd_inspect)

    p = sub.add_parser("verify", help="read every record with CRC checks and compare with the manifest")
    p.add_argument("path", help="shard-set directory (or its index.json), local or s3://")
    p.add_argument("--all", action="store_true", help="report every problem, not only the first")
    p.add_argument("--no-progress", action="store_true", help="no progress bar")
    p.set_defaults(func=_cmd_verify)


def _cmd_inspect(args) -> int:
    from .manifest import read_manifest
    from .units import format_size

    m = read_manifest(args.path)
    if args.json:
        print(json.dumps(m.to_json(), indent=2, sort_keys=True))
        return 0
    print(f"shard set   {m.location}")
    print(f"kind        {m.kind}   (tfpipe {m.tfpipe_version}, format {m.format_version})")
    print(f"records     {m.records:,}")
    print(f"shards      {len(m.shards)}   {format_size(m.total_bytes)} total"
          f"{'   GZIP' if m.compression else ''}")
    if m.shards:
        sizes = [s.bytes for s in m.shards]
        print(f"shard size  min {format_size(min(sizes))}, max {format_size(max(sizes))}")
    print("schema")
    for f in m.schema.features:
        role = "   (label)" if f.name == m.schema.label else ""
        print(f"  {f.name:<16} {f.dtype:<8} {list(f.shape)}{role}")
    if m.inputs:
        read = sum(i.records_read for i in m.inputs)
        print(f"inputs      {len(m.inputs)} file(s), {read:,} records read, "
              f"{sum(i.records_written for i in m.inputs):,} written, "
              f"{sum(i.records_skipped for i in m.inputs):,} skipped")
    for reason, n in m.skipped.items():
        print(f"  skipped {n:,} x {reason}")
    for k, v in sorted(m.extra.items()):
        if not isinstance(v, (dict, list)):
            print(f"{k:<11} {v}")
    return 0


def _cmd_verify(args) -> int:
    from .verify import verify

    report = verify(args.path, progress=not args.no_progress and sys.stderr.isatty(),
                    raise_on_error=not args.all)
    if report.problems:
        for p in report.problems:
            print(f"FAIL {p}", file=sys.stderr)
        print(f"tfpipe: error: {len(report.problems)} problem(s) in {report.location}", file=sys.stderr)
        return 4
    print(f"OK {report.location}: {report.shards} shards, {report.records:,} records, CRCs, counts, "
          f"sizes and sha256 match the manifest")
    return 0
