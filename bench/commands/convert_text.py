"""``tfpipe bench convert-text``: end-to-end text conversion vs the tokenizer alone, same thread count.

In one process run: generate a synthetic Pile-like ``jsonl.zst`` (no downloads), train a byte-level BPE
``tokenizer.json`` on it (vocabulary >= 16k by default), then time, alternately and ``--repeats`` times,
(a) the pure tokenizer: ``tokenizers``' ``encode_batch`` of the same documents (in memory, already parsed)
and (b) ``convert_text`` end to end (read + decompress + JSON + tokenize + pack + serialize + write
shards + manifest) with ``workers = --workers``. Both use the same Rust thread pool size
(``RAYON_NUM_THREADS = --workers``, set before the first encoding). The ratio (b)/(a) of the best times
says what reading, packing and writing add to tokenization; the target is <= 1.5.
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import tempfile
import time

from converters.cli.parser import add_json_option
from converters.cli.types import positive_int

__all__ = ["add_parser", "run", "run_benchmark", "format_report", "TARGET_RATIO"]

TARGET_RATIO = 1.5


def add_parser(sub) -> argparse.ArgumentParser:
    p = sub.add_parser("convert-text", help="text converter end to end vs tokenizers' encode_batch alone",
                       description=__doc__.split("\n\n", 1)[1])
    p.add_argument("--docs", type=positive_int, default=3000, metavar="N",
                   help="synthetic documents (default 3000, ~12 MB of text)")
    p.add_argument("--vocab-size", type=positive_int, default=16384, metavar="N",
                   help="BPE vocabulary size (default 16384)")
    p.add_argument("--workers", type=positive_int, default=None, metavar="N",
                   help="tokenizer threads for both, as convert text --workers (default: all cores)")
    p.add_argument("--seq-len", type=positive_int, default=2048, metavar="N", help="sequence length (default 2048)")
    p.add_argument("--repeats", type=positive_int, default=3, metavar="N",
                   help="timed repetitions of each, best taken (default 3)")
    add_json_option(p, "the report")
    return p


def run(args) -> int:
    report = run_benchmark(docs=args.docs, vocab_size=args.vocab_size, threads=args.workers, seq_len=args.seq_len,
                           repeats=args.repeats,
                           log=None if args.json else (lambda s: print(s, file=sys.stderr, flush=True)))
    print(json.dumps(report, indent=2) if args.json else format_report(report))
    return 0


def run_benchmark(*, docs: int = 3000, vocab_size: int = 16384, threads: int | None = None, seq_len: int = 2048,
                  repeats: int = 3, mean_words: int = 300, workdir: str | None = None, log=None) -> dict:
    """Run the comparison (also usable as a tiny smoke test); returns the report as a dict."""
    threads = threads or (os.cpu_count() or 1)
    # the Rust pool of `tokenizers` is sized once, at its first parallel use in this process
    os.environ.setdefault("RAYON_NUM_THREADS", str(threads))
    rayon = int(os.environ["RAYON_NUM_THREADS"])
    from converters.shardset.manifest import InputStats
    from converters.text.convert import convert_text
    from converters.text.readers import DEFAULT_BATCH_CHARS, DocReadOptions, iter_documents
    from converters.text.synthetic import write_pile_jsonl
    from converters.text.tokenizers import load_tokenizer, train_bpe

    say = log or (lambda s: None)
    tmp = tempfile.mkdtemp(prefix="tfpipe-bench-text-", dir=workdir)
    try:
        src = os.path.join(tmp, "pile.jsonl.zst")
        say(f"generating {docs:,} Pile-like documents ...")
        write_pile_jsonl(src, docs, seed=0, mean_words=mean_words)
        tok_path = os.path.join(tmp, "tokenizer.json")
        say(f"training a byte-level BPE with vocabulary {vocab_size:,} ...")
        t = time.perf_counter()
        info = train_bpe([src], vocab_size, tok_path)
        train_s = time.perf_counter() - t
        texts = [tx for b in iter_documents(src, DocReadOptions(), InputStats(src)) for tx in b.texts]
        text_bytes = sum(len(tx.encode("utf-8")) for tx in texts)
        tok = load_tokenizer(tok_path)
        hf = tok.tokenizer
        encode = hf.encode_batch_fast if hasattr(hf, "encode_batch_fast") else hf.encode_batch

        # warm-up, not timed: numba kernels, the Rust thread pool, page cache
        encode(texts[:50], add_special_tokens=False)
        convert_text([src], os.path.join(tmp, "warm"), seq_len=seq_len, tokenizer=tok_path, workers=threads,
                     include_subsets=["Pile-CC"])
        tok_runs, conv_runs = [], []
        n_tokens = 0
        manifest = None
        for r in range(repeats):
            say(f"run {r + 1}/{repeats}: tokenizer alone ...")
            t, c = time.perf_counter(), time.process_time()
            encs = encode(texts, add_special_tokens=False)
            tok_runs.append((time.perf_counter() - t, time.process_time() - c))
            n_tokens = sum(len(e.ids) for e in encs)
            del encs
            say(f"run {r + 1}/{repeats}: convert_text end to end ...")
            out = os.path.join(tmp, "out")
            t, c = time.perf_counter(), time.process_time()
            manifest = convert_text([src], out, seq_len=seq_len, tokenizer=tok_path, workers=threads,
                                    overwrite=True)
            conv_runs.append((time.perf_counter() - t, time.process_time() - c))
        x = manifest.extra
        if x["tokens"] + x["tokens_dropped"] != n_tokens + len(texts):
            raise RuntimeError(f"token counts differ: converter {x['tokens'] + x['tokens_dropped']}, "
                               f"tokenizer {n_tokens} + {len(texts)} EOD")
        best_tok = min(tok_runs)
        best_conv = min(conv_runs)
        return {
            "benchmark": "convert-text",
            "documents": len(texts),
            "text_bytes": text_bytes,
            "tokens": n_tokens,
            "vocab_size": info.vocab_size,
            "threads": threads,
            "rayon_threads": rayon,
            "seq_len": seq_len,
            "repeats": repeats,
            "batch_chars": DEFAULT_BATCH_CHARS,
            "bpe_train_seconds": round(train_s, 3),
            "tokenizer": _rate(best_tok, n_tokens, text_bytes, tok_runs),
            "convert": _rate(best_conv, n_tokens, text_bytes, conv_runs),
            "shards": len(manifest.shards),
            "records": manifest.records,
            "ratio": round(best_conv[0] / best_tok[0], 3),
            "cpu_ratio": round(best_conv[1] / max(best_tok[1], 1e-9), 3),
            "target_ratio": TARGET_RATIO,
        }
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def _rate(best, tokens: int, nbytes: int, runs) -> dict:
    secs, cpu = best
    return {"seconds": round(secs, 4), "cpu_seconds": round(cpu, 4), "tokens_per_s": round(tokens / secs, 1),
            "mb_per_s": round(nbytes / secs / 1e6, 3), "all_seconds": [round(s, 4) for s, _ in runs]}


def format_report(r: dict) -> str:
    ok = "meets" if r["ratio"] <= r["target_ratio"] else "MISSES"
    return "\n".join([
        f"convert-text: {r['documents']:,} documents, {r['text_bytes'] / 1e6:.1f} MB of text, "
        f"{r['tokens']:,} BPE tokens (vocab {r['vocab_size']:,}), {r['threads']} thread(s) "
        f"(RAYON_NUM_THREADS={r['rayon_threads']}), best of {r['repeats']}",
        f"  tokenizer alone (encode_batch)   {r['tokenizer']['seconds']:8.3f} s  "
        f"{r['tokenizer']['tokens_per_s']:>12,.0f} tokens/s  {r['tokenizer']['mb_per_s']:6.2f} MB/s  "
        f"cpu {r['tokenizer']['cpu_seconds']:.3f} s",
        f"  convert_text end to end          {r['convert']['seconds']:8.3f} s  "
        f"{r['convert']['tokens_per_s']:>12,.0f} tokens/s  {r['convert']['mb_per_s']:6.2f} MB/s  "
        f"cpu {r['convert']['cpu_seconds']:.3f} s",
        f"  ratio: {r['ratio']:.2f} (wall), {r['cpu_ratio']:.2f} (CPU time); target <= {r['target_ratio']} "
        f"-> {ok} the target",
    ])
