"""``tfpipe convert libsvm``."""
from __future__ import annotations

import os

from ..libsvm.format import FORMAT
from .types import (
    add_engine_options,
    add_prep_options,
    add_shard_output_options,
    convert_on_engine,
    layout_line,
    nonneg_int,
    positive_int,
    print_prep,
    print_skips,
    shard_output_options,
)

__all__ = ["register", "options_from_args"]


def register(convert_sub, top_sub=None) -> None:
    """``convert libsvm`` (``top_sub``: the top-level subcommands, unused: LibSVM adds none)."""
    p = convert_sub.add_parser(
        "libsvm", help="LibSVM text (label id:val ...) -> TFRecord shards of tf.train.Example",
        description="Convert LibSVM files (files, directories, globs; .gz/.bz2/.zst) into TFRecord shards: "
                    "one tf.train.Example per line with a float32 label, int64 ids[field_size] and float32 "
                    "values[field_size] (--field-size), or variable-length ids/values holding every pair of "
                    "the line (--sparse, as scikit-learn's load_svmlight_file reads it). Output is "
                    "byte-identical whatever --workers is, and with --engine beam.")
    p.add_argument("inputs", nargs="+", metavar="INPUT",
                   help="LibSVM files, directories, globs or s3:// / gs:// URLs (an object or a prefix)")
    p.add_argument("--out", required=True, help="output directory (must be empty unless --overwrite)")
    layout = p.add_mutually_exclusive_group(required=True)  # the usage line shows (--field-size N | --sparse)
    layout.add_argument("--field-size", type=positive_int, default=None, metavar="N",
                        help="index:value pairs per line (39 for Criteo); or --sparse")
    layout.add_argument("--sparse", action="store_true",
                   help="any number of pairs per line: variable-length ids/values (explicit zeros kept); the "
                        "manifest records num_features and the nonzeros per row")
    p.add_argument("--multilabel", action="store_true",
                   help="with --sparse: labels written '1,3,5' (or none) become a sorted float32 label list")
    p.add_argument("--keep-qid", action="store_true",
                   help="with --sparse: write each line's leading qid:N as an int64 feature (every line needs "
                        "one); without it qid:N is ignored")
    p.add_argument("--workers", type=positive_int, default=None, metavar="N",
                   help="parser processes (default: all cores, at most one per 4 MiB block of input)")
    p.add_argument("--index-base", choices=("asis", "auto", "0", "1"), default=None,
                   help="how ids are shifted: asis keeps them as written (the --field-size default: positional "
                        "feature ids, as the DeepFM preprocessing writes them); 1 shifts one-based ids down by "
                        "one; 0 is zero-based (no shift); auto: zero-based if any index 0 appears in any input "
                        "(one pre-pass over all inputs), else one-based (the --sparse default, as scikit-learn)")
    p.add_argument("--strict-ids", action="store_true",
                   help="with --field-size: ids must be sorted and unique along a line, as scikit-learn requires "
                        "(else unsorted_index/duplicate_index); without it they are positional fields, kept in "
                        "line order with repeats, and the rows whose ids repeat or do not increase are counted")
    p.add_argument("--pad", action="store_true", help="pad lines with fewer pairs (id 0, value 0)")
    p.add_argument("--truncate", action="store_true", help="keep the first field-size pairs of longer lines")
    p.add_argument("--allow-nonfinite", action="store_true", help="accept nan/inf labels and values")
    p.add_argument("--max-index", type=nonneg_int, default=None, metavar="N",
                   help="reject indices above N (as written in the file)")
    p.add_argument("--label-key", default="label", help="feature name of the label (default label)")
    p.add_argument("--ids-key", default="ids", help="feature name of the ids (default ids)")
    p.add_argument("--values-key", default="values", help="feature name of the values (default values)")
    p.add_argument("--qid-key", default="qid", help="feature name of the qid with --keep-qid (default qid)")
    add_shard_output_options(p, record="line")
    add_prep_options(p)
    add_engine_options(p)
    p.set_defaults(func=lambda args: p.error(msg) if (msg := width_mode_error(args)) else _cmd_convert(args))


def width_mode_error(args) -> str | None:
    """--field-size (fixed width) or --sparse (never both); the options of the other width mode are usage errors."""
    if args.sparse == (args.field_size is not None):
        return ("give --field-size N (fixed width) or --sparse (any number of pairs per line)"
                if not args.sparse else "--field-size and --sparse exclude each other")
    if args.sparse and (args.pad or args.truncate):
        return "--pad/--truncate apply to --field-size, not to --sparse"
    if not args.sparse and (args.multilabel or args.keep_qid):
        return f"{'--multilabel' if args.multilabel else '--keep-qid'} needs --sparse"
    if args.sparse and args.strict_ids:
        return "--strict-ids applies to --field-size: --sparse ids are always sorted and unique"
    return None


def options_from_args(args):
    """The ``LibsvmOptions`` that ``convert libsvm``'s parsed arguments ask for (also used by engines that take
    the same command line, such as ``tfpipe processing run``)."""
    from ..libsvm.options import LibsvmOptions

    if (msg := width_mode_error(args)) is not None:
        raise ValueError(msg)
    return LibsvmOptions(args.field_size, args.index_base, args.pad, args.truncate, args.allow_nonfinite,
                         args.max_index, args.label_key, args.ids_key, args.values_key, shard_output_options(args),
                         args.sparse, args.multilabel, args.keep_qid, args.qid_key, args.strict_ids)


def _cmd_convert(args) -> int:
    from ..libsvm.convert import UNORDERED_NOTE
    from ..storage import is_s3
    from ..util.units import format_size

    options = options_from_args(args)
    m, secs = convert_on_engine(args, options, "libsvm")
    read = sum(i.records_read for i in m.inputs)
    blank = sum(i.blank_lines for i in m.inputs)
    skipped = m.skipped
    print_skips(m, "line", ignore=FORMAT.routine)
    sampled = skipped.get("sampled_out", 0)
    print(f"converted {len(m.inputs)} input(s): {read:,} records read, {m.records:,} written, "
          f"{sum(skipped.values()) - sampled:,} skipped"
          f"{f', {sampled:,} sampled out by --balance' if sampled else ''}, {blank:,} blank/comment lines "
          f"(index base {m.options.get('index_base_used')})")
    print(f"ids: {m.options.get('ids')}")
    unordered = sum(i.notes.get(UNORDERED_NOTE, 0) for i in m.inputs)
    if unordered:
        print(f"{unordered:,} row(s) with ids that repeat or do not increase, kept as positional fields "
              f"(--strict-ids refuses them)")
    where = m.location if is_s3(m.location) else os.path.abspath(m.location)
    print(f"wrote {len(m.shards)} shard(s), {format_size(m.total_bytes)}"
          f"{' GZIP' if m.compression else ''}, in {secs:.1f}s -> {where}")
    if m.layout.columnar:
        print(f"layout: {layout_line(m)}")
    if args.sparse:
        nz = m.extra["nonzeros"]
        print(f"sparse: num_features {m.extra['num_features']:,}, nonzeros per row min {nz['min']:,} "
              f"mean {nz['mean']:,} max {nz['max']:,}")
    print_prep(m)
    print(f"manifest {where.rstrip('/')}/index.json")
    return 0
