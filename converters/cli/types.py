"""Pieces shared by the ``tfpipe`` subcommands: argparse ``type=`` converters (bad values become usage errors),
the converters' common options, and the skipped-records summary."""
from __future__ import annotations

import argparse
import os
import sys

from ..shardset.options import COMPRESSIONS, ON_ERROR, ShardOutputOptions
from ..shardset.layoutopts import add_layout_arguments
from ..util.units import DEFAULT_SHARD_BYTES, parse_size
from .parser import add_endpoint_option

__all__ = ["positive_int", "nonneg_int", "positive_float", "nonneg_float", "nonneg_floats", "size", "names",
           "duration_seconds", "step_milliseconds", "MAX_SECONDS", "MAX_STEP_MS",
           "add_shard_output_options", "shard_output_options", "layout_line", "add_prep_options", "prep_options", "print_skips", "add_engine_options", "engine_choice", "beam_module",
           "print_prep", "convert_on_engine", "use_endpoint"]


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


def positive_float(s: str) -> float:
    """A number > 0 (seconds, milliseconds, a price)."""
    try:
        v = float(s)
    except ValueError:
        v = float("nan")
    if not v > 0 or v == float("inf"):
        raise argparse.ArgumentTypeError(f"expected a positive number, got {s!r}")
    return v


def nonneg_float(s: str) -> float:
    """A finite number >= 0 (a simulated step of 0 ms is no step)."""
    try:
        v = float(s)
    except ValueError:
        v = float("nan")
    if not 0 <= v < float("inf"):
        raise argparse.ArgumentTypeError(f"expected a non-negative number, got {s!r}")
    return v


MAX_SECONDS = 7 * 24 * 3600.0   # a week: the longest wait a duration option takes (timers overflow near 1e9 s)
MAX_STEP_MS = 60_000.0           # a minute: the longest simulated training step


def _bounded(s: str, low: float, high: float, *, open_low: bool, what: str) -> float:
    try:
        v = float(s)
    except ValueError:
        v = float("nan")
    if not ((low < v) if open_low else (low <= v)) or not v <= high:
        raise argparse.ArgumentTypeError(f"expected {what} from {low:g}{' (excluded)' if open_low else ''} to "
                                         f"{high:g}, got {s!r}")
    return v


def duration_seconds(s: str) -> float:
    """A number of seconds > 0 and at most ``MAX_SECONDS`` (a timeout, a budget): a larger one would overflow
    the timers that wait for it."""
    return _bounded(s, 0.0, MAX_SECONDS, open_low=True, what="a number of seconds")


def step_milliseconds(s: str) -> float:
    """A simulated step of 0 to ``MAX_STEP_MS`` milliseconds."""
    return _bounded(s, 0.0, MAX_STEP_MS, open_low=False, what="a step in milliseconds")


def nonneg_floats(s: str) -> list[float]:
    """A comma-separated list of finite numbers >= 0 (``25,100,0``); at least one."""
    values = [v.strip() for v in s.split(",")]
    if not s.strip() or any(not v for v in values):
        raise argparse.ArgumentTypeError(f"expected comma-separated finite numbers >= 0, got {s!r}")
    try:
        return [nonneg_float(v) for v in values]
    except argparse.ArgumentTypeError:
        raise argparse.ArgumentTypeError(f"expected comma-separated finite numbers >= 0, got {s!r}") from None


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
    """The options every converter shares: shard size, error policy, compression, overwrite, prefix, progress,
    S3 endpoint."""
    p.add_argument("--shard-size", type=size, default=None, metavar="SIZE",
                   help="target shard size, e.g. 256MiB, 1GiB or bytes (default 1GiB)")
    p.add_argument("--on-error", choices=ON_ERROR, default="raise",
                   help=f"bad {record}: stop with an error naming file:line (default), or skip and count it")
    p.add_argument("--compression", choices=COMPRESSIONS, default="none", help="shard compression (default none)")
    p.add_argument("--overwrite", action="store_true", help="replace the contents of a non-empty --out")
    p.add_argument("--prefix", default="train", help="shard name prefix (default train)")
    p.add_argument("--no-progress", action="store_true", help="no progress bar")
    add_layout_arguments(p)
    add_endpoint_option(p)


def use_endpoint(args: argparse.Namespace) -> None:
    """``--endpoint-url`` of a conversion: the S3 endpoint of this run's inputs and output, set as
    ``$AWS_ENDPOINT_URL_S3`` so that every worker process and engine resolves it the same way."""
    if getattr(args, "endpoint_url", None):
        os.environ["AWS_ENDPOINT_URL_S3"] = args.endpoint_url


def shard_output_options(args: argparse.Namespace):
    """The ``ShardOutputOptions`` given by ``add_shard_output_options``'s arguments (validated once, there)."""
    if args.block_rows is not None and args.layout != "columnar":
        raise ValueError("--block-rows applies to --layout columnar")
    return ShardOutputOptions(shard_size=args.shard_size or DEFAULT_SHARD_BYTES, compression=args.compression,
                              prefix=args.prefix, on_error=args.on_error, layout=args.layout,
                              block_rows=args.block_rows)


def add_prep_options(p: argparse.ArgumentParser, *, labels: bool = True) -> None:
    """Write-time preparation: ``--shuffle``, ``--seed``, ``--shuffle-memory``, ``--tmp-dir`` and, for labelled
    records, ``--balance`` and ``--split-by-label``."""
    g = p.add_argument_group("preparation (before sharding)")
    and_balance = " (and balance's)" if labels else ""
    g.add_argument("--shuffle", action="store_true",
                   help="shuffle globally before sharding (bounded memory, deterministic for --seed)")
    g.add_argument("--seed", type=nonneg_int, default=None, metavar="S",
                   help="seed of --shuffle and --balance (required with them)" if labels else
                        "seed of --shuffle (required with it)")
    g.add_argument("--shuffle-memory", type=size, default=None, metavar="SIZE",
                   help="memory the shuffle may hold (default 1GiB); the rest waits in temporary bucket files")
    g.add_argument("--tmp-dir", default=None, metavar="DIR",
                   help=f"where the shuffle's{and_balance} temporary files go (default: under --out; the "
                        "system temporary directory for s3:// outputs); removed when the run ends")
    if labels:
        g.add_argument("--balance", default=None, metavar="equal|LABEL=RATE,...",
                       help="sample to balance labels, exact counts: 'equal' keeps as many of every label as the "
                            "rarest has; '0=0.25,1=1' keeps round(rate x count) of the named labels")
        g.add_argument("--split-by-label", action="store_true",
                       help="one shard set per label under OUT/label=<v>/ and a group manifest OUT/index.json")


def prep_options(args: argparse.Namespace):
    """The ``PrepOptions`` the arguments of ``add_prep_options`` ask for (None when none)."""
    from ..prep.balance import BalanceOptions
    from ..prep.options import PrepOptions
    from ..prep.shuffle import DEFAULT_SHUFFLE_MEMORY, WriteShuffleOptions

    balance = getattr(args, "balance", None)
    split = getattr(args, "split_by_label", False)
    if (args.shuffle or balance) and args.seed is None:
        raise ValueError(f"{'--shuffle' if args.shuffle else '--balance'} needs --seed S (the same seed gives "
                         "the same bytes)")
    if not args.shuffle and (args.shuffle_memory is not None or args.tmp_dir is not None) and not balance:
        raise ValueError("--shuffle-memory/--tmp-dir apply to --shuffle (and --balance)")
    shuffle = (WriteShuffleOptions(args.seed, args.shuffle_memory or DEFAULT_SHUFFLE_MEMORY, args.tmp_dir)
               if args.shuffle else None)
    prep = PrepOptions(shuffle, BalanceOptions.parse(balance, args.seed) if balance else None, split)
    return prep if prep.active else None


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


def convert_on_engine(args: argparse.Namespace, options, format_name: str):
    """Run a conversion of format ``format_name`` (``converters.registry``) as the command line asks: the local
    engine (the format's ``run``, with the workers, progress and write-time preparation) or ``--engine beam``
    (``beam.convert``). Returns ``(manifest, seconds)``."""
    import time

    from .. import registry
    from ..shardset.overlap import check_disjoint

    fmt = registry.get(format_name)
    fmt.check_layout(options)
    beam_options = engine_choice(args)
    prep = prep_options(args)
    use_endpoint(args)
    check_disjoint(args.out, args.inputs)  # before anything is created or claimed
    start = time.perf_counter()
    if beam_options is not None:
        m = beam_module().convert(format_name, args.inputs, args.out, options, beam_options=beam_options,
                                  overwrite=args.overwrite, prep=prep)
    else:
        m = fmt.run(args.inputs, args.out, options, workers=args.workers, overwrite=args.overwrite,
                    progress=not args.no_progress and sys.stderr.isatty(), prep=prep)
    return m, time.perf_counter() - start


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


def layout_line(manifest) -> str:
    """A set's record layout in words: ``example (one tf.train.Example per row)`` or ``columnar, blocks of 256
    rows, stored ids int32, label uint8, values float32``."""
    lay = manifest.layout
    if not lay.columnar:
        return "example (one tf.train.Example per row)"
    return (f"columnar, blocks of {lay.block_rows:,} rows, stored "
            + ", ".join(f"{name} {stype}" for name, stype in lay.stored))


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


def print_prep(manifest) -> None:
    """What write-time preparation did (from the manifest): shuffle quality, balance counts, per-label parts."""
    sh = manifest.extra.get("shuffle")
    if sh:
        mix = (f", largest label-mix deviation of a shard {sh['label_mix_max_deviation']:.2%} over "
               f"{sh['label_mix_shards']} shard(s)" if "label_mix_max_deviation" in sh else "")
        print(f"shuffle: seed {sh['seed']}, rank correlation input/output position {sh['rank_correlation']:+.4f}"
              f"{mix}")
    bal = manifest.extra.get("balance")
    if bal:
        print("balance: " + ", ".join(f"label {k}: {bal['counts_in'][k]:,} -> {bal['counts_out'][k]:,}"
                                      for k in bal["counts_in"]))
    for part in manifest.parts:
        print(f"part {part.path}: {part.records:,} records in {part.shards} shard(s)")
