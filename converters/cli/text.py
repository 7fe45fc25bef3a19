"""``tfpipe convert text`` and ``tfpipe tokenizer train``."""
from __future__ import annotations

import sys
import time

from ..text.format import FORMAT
from .types import (
    add_engine_options,
    add_prep_options,
    add_shard_output_options,
    convert_on_engine,
    names,
    positive_int,
    print_prep,
    print_skips,
    shard_output_options,
)

__all__ = ["register", "options_from_args"]


def register(convert_sub, top_sub) -> None:
    p = convert_sub.add_parser(
        "text", help="jsonl/jsonl.zst/parquet/txt documents -> tokenized, packed TFRecord shards",
        description="Convert documents (Pile-style jsonl lines {\"text\": ..., \"meta\": {\"pile_set_name\": ...}}, "
                    "plain, .gz, .bz2 or multi-frame .zst; parquet; txt) into TFRecord shards of packed "
                    "token windows: feature input_ids int64[seq_len+1] (inputs = w[:-1], targets = w[1:]), "
                    "an end-of-document id after every document, the remainder carried into the next "
                    "window. Output is byte-identical whatever --workers is, and with --engine beam.")
    p.add_argument("inputs", nargs="+", metavar="INPUT",
                   help="input files, directories, globs or s3:// / gs:// URLs (an object or a prefix)")
    p.add_argument("--out", required=True, help="output directory or s3:// prefix (must be empty unless --overwrite)")
    p.add_argument("--seq-len", type=positive_int, required=True, metavar="N",
                   help="sequence length; every record holds N+1 token ids")
    p.add_argument("--workers", type=positive_int, default=None, metavar="N",
                   help="tokenizer threads / batches in flight (default: all cores)")
    p.add_argument("--text-key", default="text", help="JSON field or parquet column of the text (default text)")
    p.add_argument("--include-subsets", type=names, default=None, metavar="A,B",
                   help="keep only documents whose meta.pile_set_name is in this comma list")
    p.add_argument("--exclude-subsets", type=names, default=None, metavar="A,B",
                   help="drop documents whose meta.pile_set_name is in this comma list")
    p.add_argument("--tokenizer", default="byte", metavar="{byte|PATH}",
                   help="'byte' (UTF-8 bytes + EOD id 256, the offline default) or a Hugging Face tokenizer.json")
    p.add_argument("--eod-token", default=None, metavar="TOKEN",
                   help="end-of-document token of a tokenizer.json (default: <|endoftext|>, </s>, <eos>, ...)")
    p.add_argument("--no-cross-doc", action="store_true",
                   help="never pack two documents into one window: pad each document's last window and add "
                        "a loss_mask feature (1 = real token, 0 = padding)")
    p.add_argument("--pad-last", action="store_true",
                   help="pad the final partial window (adds loss_mask) instead of dropping it")
    p.add_argument("--mask-name", choices=("loss_mask", "attention_mask"), default="loss_mask",
                   help="name of the mask feature in padded modes (default loss_mask)")
    p.add_argument("--txt-mode", choices=("block", "file"), default="block",
                   help=".txt inputs: one document per blank-line-separated block (default) or per file")
    add_shard_output_options(p, record="record")
    add_prep_options(p, labels=False)
    add_engine_options(p)
    p.set_defaults(func=_cmd_convert)

    t = top_sub.add_parser("tokenizer", help="tokenizer tools: train a byte-level BPE tokenizer.json")
    tsub = t.add_subparsers(dest="tokenizer_command", metavar="ACTION")
    tsub.required = True
    tr = tsub.add_parser(
        "train", help="train a byte-level BPE tokenizer.json on local documents (no network)",
        description="Train a GPT-2 style byte-level BPE with the Hugging Face tokenizers library on the "
                    "documents of INPUT (same formats as 'convert text'); <|endoftext|> is its "
                    "end-of-document token. Use the result with 'convert text --tokenizer PATH'.")
    tr.add_argument("inputs", nargs="+", metavar="INPUT", help="input files, directories or globs")
    tr.add_argument("--vocab-size", type=positive_int, required=True, metavar="N", help="vocabulary size")
    tr.add_argument("--out", required=True, help="tokenizer.json to write")
    tr.add_argument("--text-key", default="text", help="JSON field or parquet column of the text (default text)")
    tr.add_argument("--max-chars", type=positive_int, default=None, metavar="N",
                    help="train on the first N characters of text only (a sample)")
    tr.add_argument("--min-frequency", type=positive_int, default=2, metavar="N",
                    help="minimum pair frequency for a merge (default 2)")
    tr.add_argument("--eod-token", default="<|endoftext|>", metavar="TOKEN",
                    help="end-of-document special token (default <|endoftext|>)")
    tr.add_argument("--overwrite", action="store_true", help="replace an existing --out")
    tr.add_argument("--no-progress", action="store_true", help="no progress bar")
    tr.set_defaults(func=_cmd_train)


def options_from_args(args):
    """The ``TextOptions`` that ``convert text``'s parsed arguments ask for (also used by engines that take the
    same command line, such as ``tfpipe processing run``)."""
    from ..text.options import TextOptions

    return TextOptions(
        seq_len=args.seq_len, tokenizer=args.tokenizer, eod_token=args.eod_token, text_key=args.text_key,
        include_subsets=args.include_subsets, exclude_subsets=args.exclude_subsets,
        no_cross_doc=args.no_cross_doc, pad_last=args.pad_last, mask_name=args.mask_name,
        txt_mode=args.txt_mode, output=shard_output_options(args))


def _cmd_convert(args) -> int:
    from ..util.units import format_size

    options = options_from_args(args)
    m, secs = convert_on_engine(args, options, "text")
    x = m.extra
    read = sum(i.records_read for i in m.inputs)
    skipped = m.skipped
    print_skips(m, "record", ignore=FORMAT.routine)
    print(f"converted {len(m.inputs)} input(s): {read:,} documents read, {x['documents']:,} tokenized, "
          f"{sum(skipped.values()):,} skipped"
          + (f" ({', '.join(f'{k} {v:,}' for k, v in skipped.items())})" if skipped else ""))
    print(f"tokens      {x['tokens']:,} written, {x['tokens_dropped']:,} dropped (final partial window), "
          f"{x['padding_tokens']:,} padding   tokenizer {x['tokenizer']['name']} "
          f"(vocab {x['tokenizer']['vocab_size']:,}, EOD {x['eod_id']})")
    print(f"records     {m.records:,} windows of {x['seq_len'] + 1} ids in {len(m.shards)} shard(s), "
          f"{format_size(m.total_bytes)}, {secs:.1f} s ({x['tokens'] / max(secs, 1e-9):,.0f} tokens/s)")
    if m.layout.columnar:
        print(f"layout      columnar: blocks of {m.layout.block_rows:,} windows, "
              + ", ".join(f"{name} stored as {t}" for name, t in m.layout.stored))
    print_prep(m)
    print(f"manifest    {m.location.rstrip('/')}/index.json")
    return 0


def _cmd_train(args) -> int:
    from ..text.tokenizers import train_bpe

    start = time.perf_counter()
    info = train_bpe(args.inputs, args.vocab_size, args.out, text_key=args.text_key, max_chars=args.max_chars,
                     min_frequency=args.min_frequency, eod_token=args.eod_token, overwrite=args.overwrite,
                     progress=not args.no_progress and sys.stderr.isatty())
    print(f"trained byte-level BPE: vocab {info.vocab_size:,}, EOD {args.eod_token!r} = {info.eod_id}, "
          f"{time.perf_counter() - start:.1f} s -> {args.out} (sha256 {info.sha256[:12]}...)")
    return 0
