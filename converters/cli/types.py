"""Pieces shared by the ``tfpipe`` subcommands: argparse ``type=`` converters (bad values become usage errors),
the converters' common options, and the skipped-records summary."""
from __future__ import annotations

import argparse
import sys

from ..shardset.options import COMPRESSIONS, ON_ERROR, ShardOutputOptions
from ..util.units import DEFAULT_SHARD_BYTES, parse_size

__all__ = ["positive_int", "nonneg_int", "size", "names", "add_shard_output_options", "shard_output_options",
           "print_skips"]


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
