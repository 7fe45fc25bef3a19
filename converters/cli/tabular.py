"""``tfpipe convert tabular``: Criteo-style tables -> DeepFM or DLRM training sets."""
from __future__ import annotations

from ..tabular.format import FORMAT
from ..tabular.schema import FORMATS
from .types import (
    add_engine_options,
    add_shard_output_options,
    convert_on_engine,
    nonneg_int,
    positive_int,
    print_skips,
    shard_output_options,
    size,
)

__all__ = ["register", "options_from_args", "refused_option", "REFUSED"]


def _rate(s: str) -> float:
    import argparse

    try:
        v = float(s)
    except ValueError:
        v = float("nan")
    if not 0 < v <= 1:
        raise argparse.ArgumentTypeError(f"expected a rate in (0, 1], got {s!r}")
    return v


def _fraction(s: str) -> float:
    import argparse

    try:
        v = float(s)
    except ValueError:
        v = float("nan")
    if not 0 <= v <= 1:
        raise argparse.ArgumentTypeError(f"expected a fraction in [0, 1], got {s!r}")
    return v


def register(convert_sub, top_sub) -> None:
    p = convert_sub.add_parser(
        "tabular", help="raw click logs: TSV/CSV/Parquet tables (Criteo) -> DeepFM or DLRM training sets",
        description="Convert tables of a label, integer counts and categorical values (the Criteo click logs: "
                    "label, I1..I13, C1..C26, tab-separated, empty fields where missing) into TFRecord shards: "
                    "--target deepfm writes ids int64[F], values float32[F], label; --target dlrm writes dense "
                    "float32[13], sparse int64[26], label. Categorical values get exact vocabularies (written "
                    "into the set as vocab/<column>.txt, StringLookup-compatible) or Keras Hashing bins. "
                    "Byte-identical on every engine. See docs/tabular.md.")
    p.add_argument("inputs", nargs="+", metavar="INPUT",
                   help="input files, directories or globs (.gz too; .csv: CSV with a header; .parquet), in order")
    p.add_argument("--out", required=True, help="output directory or s3:// prefix (must be empty unless --overwrite)")
    p.add_argument("--schema", default=None, metavar="{criteo|FILE}",
                   help="'criteo' (label, I1..I13, C1..C26; the default) or a JSON schema file naming each "
                        "column's role (docs/tabular.md); with --vocab-from, the set's")
    p.add_argument("--target", choices=("deepfm", "dlrm"), default=None,
                   help="deepfm: ids/values/label (default); dlrm: dense/sparse/label; with --vocab-from, the "
                        "set's")
    p.add_argument("--numeric", choices=("log1p", "minmax"), default=None,
                   help="numeric transform after missing/negative -> 0: log1p (default) or min-max scaling "
                        "fitted on the pre-pass (counting); with --vocab-from, the set's")
    p.add_argument("--vocab-from", default=None, metavar="SET",
                   help="use SET's vocabularies (and min-max) as they are, with its schema, target and numeric "
                        "transform: no pre-pass (e.g. the test day); options that contradict SET are refused")
    p.add_argument("--hash-buckets", type=positive_int, default=None, metavar="N",
                   help="no vocabulary: the bin tf.keras.layers.Hashing(num_bins=N) gives each value (not with "
                        "--vocab-from)")
    p.add_argument("--min-count", type=positive_int, default=None, metavar="T",
                   help="a value seen at least T times over all inputs gets an id; rarer ones share id 0 "
                        "(default 1; not with --vocab-from or --hash-buckets)")
    p.add_argument("--negative-rate", type=_rate, default=1.0, metavar="R",
                   help="keep this fraction of label-0 rows (seeded by --seed, per row; default 1: all)")
    p.add_argument("--seed", type=nonneg_int, default=0, metavar="S", help="seed of --negative-rate (default 0)")
    p.add_argument("--memory", type=size, default=None, metavar="SIZE",
                   help="memory per process, split between the passes: a pre-pass task's categorical counts "
                        "before it spills sorted runs to the output's temporary area; half of it for the "
                        "vocabulary merge, half for pass 1's lookups (a larger column is looked up on disk), "
                        "a quarter for pass 1's chunks (default 256MiB)")
    p.add_argument("--format", dest="table_format", choices=FORMATS, default=None,
                   help="read every input as tab-separated text by position, CSV with a header line, or Parquet "
                        "(default: .csv and .parquet by suffix; other text is CSV when its first line is a "
                        "header with the schema's columns, else tab-separated)")
    p.add_argument("--pad-short-rows", action="store_true",
                   help="read a row with fewer fields than the table (its trailing empty fields stripped) as if "
                        "the missing fields were empty (default: a wrong_field_count error)")
    p.add_argument("--max-skip-fraction", type=_fraction, default=0.5, metavar="F",
                   help="with --on-error skip, fail (exit 2, nothing written) when the rows skipped as bad input "
                        "are every row or more than this fraction of the rows read (default 0.5)")
    p.add_argument("--workers", type=positive_int, default=None, metavar="N",
                   help="local processes (default: all cores, at most one per input file)")
    g = p.add_argument_group("write-time preparation (refused: see --shuffle)")
    g.add_argument("--shuffle", action="store_true",
                   help="refused: rows are written in input order; shuffle at read time (shuffle_buffer) or "
                        "with tfpipe reshard")
    g.add_argument("--split-by-label", action="store_true",
                   help="refused: split by input file instead (one run per split, --vocab-from for the test day)")
    add_shard_output_options(p, record="row")
    add_engine_options(p)
    p.set_defaults(func=_cmd_convert)


REFUSED = {
    "shuffle": "--shuffle does not apply to tabular: rows are written in input order (the two passes and "
               "--negative-rate follow it); shuffle at read time (shuffle_buffer) or with tfpipe reshard",
    "split_by_label": "--split-by-label does not apply to tabular: split by input file instead (one run per "
                      "split, --vocab-from SET for the test days)",
}


def refused_option(args) -> str | None:
    """The one-line reason ``convert tabular`` refuses the first write-time preparation option asked for."""
    return next((why for name, why in REFUSED.items() if getattr(args, name, False)), None)


def options_from_args(args):
    """The ``TabularOptions`` that ``convert tabular``'s parsed arguments ask for."""
    from ..tabular.options import DEFAULT_MEMORY, TabularOptions

    why = refused_option(args)
    if why:
        raise ValueError(why)
    fixed = {"schema": "criteo", "target": "deepfm", "numeric": "log1p"}
    if args.vocab_from is not None:
        for flag, value in (("--min-count", args.min_count), ("--hash-buckets", args.hash_buckets)):
            if value is not None:
                raise ValueError(f"--vocab-from {args.vocab_from}: {flag} does not apply (the set's vocabularies "
                                 "are used as they are): drop it")
        from ..tabular.setinfo import source_set

        ss = source_set(args.vocab_from)
        fixed = {"schema": ss.schema, "target": ss.target, "numeric": ss.numeric}
    given = {k: getattr(args, k) for k in fixed if getattr(args, k) is not None}
    return TabularOptions(schema=given.get("schema", fixed["schema"]), numeric=given.get("numeric", fixed["numeric"]),
                          min_count=args.min_count or 1, vocab_from=args.vocab_from, hash_buckets=args.hash_buckets,
                          target=given.get("target", fixed["target"]),
                          negative_rate=args.negative_rate, seed=args.seed, memory=args.memory or DEFAULT_MEMORY,
                          output=shard_output_options(args), input_format=args.table_format,
                          pad_short_rows=args.pad_short_rows, max_skip_fraction=args.max_skip_fraction)


def _cmd_convert(args) -> int:
    from ..util.units import format_size

    options = options_from_args(args)
    args.shuffle_memory = args.tmp_dir = None
    m, secs = convert_on_engine(args, options, "tabular")
    x = m.extra
    read = sum(i.records_read for i in m.inputs)
    print_skips(m, "row", ignore=FORMAT.routine)
    print(f"converted {len(m.inputs)} input(s): {read:,} rows read, {m.records:,} written in {len(m.shards)} "
          f"shard(s), {format_size(m.total_bytes)}, {secs:.1f} s ({m.records / max(secs, 1e-9):,.0f} rows/s)")
    if x["negatives_in"] and x["negative_kept_fraction"] < 1:
        print(f"negatives   {x['negatives_kept']:,} of {x['negatives_in']:,} kept "
              f"({x['negative_kept_fraction']:.4f})")
    print(f"target      {x['target']}: feature_size {x['feature_size']:,}; table sizes "
          + ", ".join(f"{e['column']} {e['table_size']:,}" for e in x["categorical"]))
    print(f"manifest    {m.location.rstrip('/')}/index.json")
    return 0
