"""Pieces shared by the ``tfpipe`` subcommands: argparse ``type=`` converters (bad values become usage errors),
the converters' common options, and the skipped-records summary."""
from __future__ import annotations

import argparse
import sys

from ..shardset.options import COMPRESSIONS, ON_ERROR, ShardOutputOptions
from ..util.units import DEFAULT_SHARD_BYTES, parse_size

__all__ = ["positive_int", "nonneg_int", "size", "names", "add_shard_output_options", "shard_output_options",
           "print_skips", "add_engine_options", "engine_choice", "beam_module"]


def _int(s: str, *, minimum: int, what: str) -> int:
    try:
        v = int(s)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a {what} integer, got {s!r}") from None
    if v < minimum:
        raise argparse.ArgumentTypeError(f"expected a {what} integer, got {s!r}")
    return v


def positive_int(s: str) -> int:
    return _int(s, minimum=1, what="positive")


def nonneg_int(s: str) -> int:
    return _int(s, minimum=0, what="non-negative")


def size(s: str) -> int:
    """A positive byte size: ``256MiB``, ``1GiB`` or bytes."""
    try:
        return parse_size(s)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def names(s: str) -> list[str]:
    """A non-empty comma-separated list of names."""
    out = [n.strip() for n in s.split(",") if n.strip()]
    if not out:
        raise argparse.ArgumentTypeError(f"expected a comma-separated list of names, got {s!r}")
    return out


def add_shard_output_options(p: argparse.ArgumentParser, *, record: str = "line") -> None:
    """The options every converter shares: shard size, error policy, compression, overwrite, prefix, progress."""
    p.add_argument("--shard-size", type=size, default=None, metavar="SIZE",
                   help="target shard size, e.g. 256MiB, 1GiB or bytes (default 1GiB)")
    p.add_argument("--on-error", choices=ON_ERROR, default="raise",
                   help=f"bad {record}: stop with an error naming file:line (default), or skip and count it")
    p.add_argument("--compression", choices=COMPRESSIONS, default="none", help="shard compression")
    p.add_argument("--overwrite", action="store_true", help="replace the contents of a non-empty --out")
    p.add_argument("--prefix", default="train", help="shard name prefix (default train)")
    p.add_argument("--no-progress", action="store_true", help="no progress bar")


def shard_output_options(args: argparse.Namespace):
    """The ``ShardOutputOptions`` given by ``add_shard_output_options``'s arguments (validated once, there)."""
    return ShardOutputOptions(shard_size=args.shard_size or DEFAULT_SHARD_BYTES, compression=args.compression,
                              prefix=args.prefix, on_error=args.on_error)


def add_engine_options(p: argparse.ArgumentParser) -> None:
    """``--engine local|beam`` and ``--beam-option KEY=VALUE`` (repeatable)."""
    p.add_argument("--engine", choices=("local", "beam"), default="local",
                   help="local: this machine's processes/threads (default); beam: an Apache Beam pipeline, "
                        "in-process by default, any runner with --beam-option runner=... (same bytes)")
    p.add_argument("--beam-option", action="append", default=[], metavar="KEY=VALUE",
                   help="a Beam pipeline option for --engine beam, e.g. runner=DataflowRunner, "
                        "direct_num_workers=2, direct_running_mode=multi_processing (repeatable)")


def engine_choice(args: argparse.Namespace) -> dict | None:
    """The Beam options of ``--engine beam`` (a dict), or None for the local engine; mixing the engines'
    options is a usage error."""
    if args.engine != "beam":
        if args.beam_option:
            raise ValueError("--beam-option needs --engine beam")
        return None
    if args.workers is not None:
        raise ValueError("--workers is the local engine's; with --engine beam use --beam-option "
                         "direct_num_workers=N (in-process) or the runner's own worker options")
    from ..engines.options import parse_beam_options

    return parse_beam_options(args.beam_option)


def beam_module():
    """``converters.engines.beam`` (imports apache_beam), or a clear error if Beam is not installed."""
    try:
        from ..engines import beam
    except ModuleNotFoundError as exc:
        if exc.name and exc.name.split(".")[0] == "apache_beam":
            from ..util.errors import TfpipeError

            raise TfpipeError("--engine beam needs Apache Beam: pip install 'tfpipe[beam]'") from None
        raise
    return beam


def print_skips(manifest, noun: str, *, ignore: tuple[str, ...] = (), examples: int = 10) -> None:
    """On stderr: skipped records by reason (reasons in ``ignore`` are routine, not bad input) and the first
    ``examples`` of them as ``file:line: reason: ...``."""
    bad = {k: v for k, v in manifest.skipped.items() if k not in ignore}
    if not bad:
        return
    print(f"tfpipe: skipped {sum(bad.values()):,} bad {noun}(s): " + ", ".join(f"{k} {v:,}" for k, v in bad.items()),
          file=sys.stderr)
    shown = [ex for i in manifest.inputs for ex in i.examples if not any(r in ex for r in ignore)]
    for ex in shown[:examples]:
        print(f"  {ex}", file=sys.stderr)
