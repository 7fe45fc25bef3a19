"""argparse ``type=`` converters shared by every ``tfpipe`` subcommand (bad values become usage errors)."""
from __future__ import annotations

import argparse

__all__ = ["positive_int", "nonneg_int", "size", "names", "add_shard_output_options"]


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
    from .units import parse_size

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
    p.add_argument("--on-error", choices=("raise", "skip"), default="raise",
                   help=f"bad {record}: stop with an error naming file:line (default), or skip and count it")
    p.add_argument("--compression", choices=("none", "gzip"), default="none", help="shard compression")
    p.add_argument("--overwrite", action="store_true", help="replace the contents of a non-empty --out")
    p.add_argument("--prefix", default="train", help="shard name prefix (default train)")
    p.add_argument("--no-progress", action="store_true", help="no progress bar")
