"""Text/Pile -> TFRecord: read documents, tokenize in parallel, pack into windows, write shards + manifest.

Stages (one process, threads): the calling thread reads and parses documents in batches (``readers``) and
submits each batch to a pool of ``workers`` tokenizer threads (Hugging Face ``encode_batch`` runs in Rust
without the GIL); results are taken back strictly in submission order, packed (``packing.Packer``),
serialized (``tfrecord.examples.serialize_batch``) and written (``shardset.writer.ShardSetWriter``). At most
``2 * workers`` batches are in flight, so memory is bounded by a few batches whatever the input size, and
the output is byte-identical whatever ``workers`` is.

``run(inputs, out, options)`` is the core API (a ``TextOptions``); ``convert_text`` is its keyword form.
"""
from __future__ import annotations

import logging
import os
from concurrent.futures import ThreadPoolExecutor
from typing import Iterable, Iterator, Sequence

import numpy as np

from ..prep.options import PrepOptions, prep_from_keywords
from ..prep.writer import PrepWriter
from ..shardset.blocks import Blocks
from ..shardset.manifest import InputStats, Manifest
from ..shardset.options import ShardOutputOptions
from ..sources import compression_of, expand_inputs, input_size
from ..tfrecord.examples import serialize_batch
from ..util.checks import as_int
from ..util.errors import TfpipeError
from ..util.ordered import ordered_map
from ..util.progress import progress_bar
from ..util.system import available_memory, cap_workers, cpu_count
from ..util.units import DEFAULT_SHARD_BYTES, format_size
from .blocks import COLUMNAR_SHUFFLE, text_layout
from .options import FEATURE, TextOptions, text_schema
from .packing import MAX_RECORD_BYTES, Packed, Packer, PackSpec, window_footprint
from .readers import (
    DEFAULT_BATCH_CHARS,
    INPUT_SUFFIXES,
    DocBatch,
    format_of,
    iter_documents,
)
from .tokenizers import load_tokenizer

__all__ = ["run", "convert_text", "count_subsets"]

log = logging.getLogger(__name__)


def convert_text(inputs: Sequence[str] | str, out: str, *, seq_len: int, shard_size: int | str = DEFAULT_SHARD_BYTES,
                 workers: int | None = None, text_key: str = "text",
                 include_subsets: Iterable[str] | None = None, exclude_subsets: Iterable[str] | None = None,
                 tokenizer: str = "byte", eod_token: str | None = None, no_cross_doc: bool = False,
                 pad_last: bool = False, mask_name: str = "loss_mask", txt_mode: str = "block",
                 on_error: str = "raise", compression: str | None = None, overwrite: bool = False,
                 prefix: str = "train", progress: bool = False,
                 batch_chars: int = DEFAULT_BATCH_CHARS, prep: PrepOptions | None = None, shuffle=False,
                 seed: int | None = None, shuffle_memory: int | str | None = None, tmp_dir: str | None = None,
                 layout: str = "example", block_rows: int | None = None) -> Manifest:
    """Convert jsonl / jsonl.zst / jsonl.gz / parquet / txt documents into TFRecord shards of packed token
    windows (feature ``input_ids`` int64[seq_len + 1], plus ``mask_name`` in padded modes) and a manifest.

    The keyword form of :func:`run`. ``tokenizer`` is ``"byte"`` or a path to a Hugging Face
    ``tokenizer.json`` (``eod_token`` names its end-of-document token; by default ``<|endoftext|>`` and a
    few common ones are tried). See ``converters.text.readers`` for the accounting and skip reasons,
    ``converters.text.packing`` for the window layout. ``shard_size``: bytes or a size such as ``"256MiB"``.
    ``shuffle=True, seed=S`` (``shuffle_memory``, ``tmp_dir``) shuffle the windows before sharding, as the
    command line's ``--shuffle --seed``; or pass a ready ``prep=PrepOptions(...)``. ``layout="columnar"``
    writes blocks of ``block_rows`` windows as raw columns (``tfrecord.layout``; ids in uint16 for a vocabulary
    of at most 65,536), as ``--layout columnar --block-rows N``.
    """
    prep = prep_from_keywords(prep, shuffle=shuffle, seed=seed, shuffle_memory=shuffle_memory, tmp_dir=tmp_dir)
    output = ShardOutputOptions(shard_size=shard_size if isinstance(shard_size, str) else int(shard_size),
                                compression=compression, prefix=prefix, on_error=on_error, layout=layout,
                                block_rows=block_rows)
    options = TextOptions(
        seq_len=seq_len, tokenizer=str(tokenizer), eod_token=eod_token, text_key=text_key,
        include_subsets=_names(include_subsets), exclude_subsets=_names(exclude_subsets),
        no_cross_doc=no_cross_doc, pad_last=pad_last, mask_name=mask_name, txt_mode=txt_mode, output=output)
    return run(inputs, out, options, workers=workers, overwrite=overwrite, progress=progress, prep=prep,
               batch_chars=batch_chars)


def run(inputs: Sequence[str] | str, out: str, opts: TextOptions, *, workers: int | None = None,
        overwrite: bool = False, progress: bool = False, batch_chars: int = DEFAULT_BATCH_CHARS,
        prep: PrepOptions | None = None) -> Manifest:
    """Convert text inputs into a shard set at ``out`` as ``opts`` say; returns the Manifest. ``workers``
    tokenizer threads (default: CPU count, at most 16); the output does not depend on it."""
    if not isinstance(opts, TextOptions):
        raise TypeError(f"options must be a TextOptions, got {type(opts).__name__}")
    if workers is None:
        workers = min(cpu_count(), 16)
    workers = cap_workers(as_int(workers, "workers", minimum=1), "tokenizer threads")
    if isinstance(inputs, (str, os.PathLike)):
        inputs = [inputs]
    files = expand_inputs(inputs, suffixes=INPUT_SUFFIXES, out=out)
    for f in files:
        format_of(f)  # unknown formats fail before any output is created
    tok = load_tokenizer(opts.tokenizer, eod_token=opts.eod_token)
    info = tok.info
    spec = PackSpec(seq_len=opts.seq_len, eod_id=info.eod_id, no_cross_doc=opts.no_cross_doc,
                    pad_last=opts.pad_last, mask_name=opts.mask_name)
    max_windows = _check_window(spec, info.vocab_size, files)  # before any output exists or anything is allocated
    schema = text_schema(opts.seq_len, spec.mask_name if spec.masked else None)
    layout = text_layout(opts.layout, schema, max(info.vocab_size - 1, spec.eod_id, spec.pad_id))
    blocks = Blocks(schema, layout) if layout.columnar else None
    if blocks is not None and prep is not None and prep.active:
        raise ValueError(COLUMNAR_SHUFFLE)
    read_opts = opts.read_options(batch_chars)
    packer = Packer(spec)
    stats: list[InputStats] = []
    subset_docs: dict[str, int] = {}
    subset_tokens: dict[str, int] = {}

    def batches() -> Iterator[DocBatch]:
        for path in files:
            st = InputStats(path)
            stats.append(st)
            for b in iter_documents(path, read_opts, st):
                if b.texts or b.nbytes:
                    yield b

    def encode(batch: DocBatch):
        return tok.encode_batch(batch.texts) if batch.texts else (np.zeros(0, np.int64), np.zeros(0, np.int64))

    if prep is not None and prep.needs_labels:
        raise ValueError(f"{prep.describe()} needs labelled records; text windows have none (use --shuffle)")

    def write(writer: PrepWriter, packed: Packed) -> None:
        if len(packed) == 0:
            return
        cols = {FEATURE: packed.windows}
        if packed.mask is not None:
            cols[spec.mask_name] = packed.mask
        if blocks is None:
            writer.write(*serialize_batch(schema, cols))
        for framed, lengths, rows in blocks.add(cols) if blocks is not None else ():
            writer.target.write(framed, lengths, rows)  # no preparation with columnar: the plain shard writer

    with progress_bar(progress, desc="convert text") as bar:
        with PrepWriter(out, opts.output, prep, overwrite=overwrite) as writer, \
                ThreadPoolExecutor(max_workers=workers, thread_name_prefix="tfpipe-tok") as pool:
            for batch, (ids, lengths) in ordered_map(lambda b: pool.submit(encode, b), batches(), 2 * workers):
                if batch.texts:
                    count_subsets(batch.subsets, lengths, subset_docs, subset_tokens)
                    for packed in packer.add_chunks(ids, lengths, max_windows):
                        write(writer, packed)
                bar.update(batch.nbytes)
                bar.set_postfix(docs=f"{packer.documents:,}", tokens=f"{packer.tokens:,}", refresh=False)
            write(writer, packer.finish())
            subsets = {k: {"documents": subset_docs[k], "tokens": subset_tokens[k]} for k in sorted(subset_docs)}
            extra = {
                "documents": packer.documents,
                "tokens": packer.tokens,
                "tokens_dropped": packer.tokens_dropped,
                "padding_tokens": packer.padding,
                "windows": packer.windows,
                "seq_len": opts.seq_len,
                "eod_id": info.eod_id,
                "pad_id": spec.pad_id,
                "mask": spec.mask_name if spec.masked else None,
                "tokenizer": info.to_json(),
                "subsets": subsets,
            }
            if blocks is None:
                manifest = writer.finish(schema=schema, inputs=stats, options=opts.to_json(), kind="text",
                                         extra=extra)
            else:
                for framed, lengths, rows in blocks.finish():
                    writer.target.write(framed, lengths, rows)
                manifest = writer.target.finish(schema=schema, inputs=stats, options=opts.to_json(), kind="text",
                                                extra=extra, layout=layout)
    log.info("text: %d documents, %d tokens (%d dropped) -> %d windows of %d", packer.documents, packer.tokens,
             packer.tokens_dropped, packer.windows, spec.window)
    return manifest


_PACK_BUDGET = 256 << 20  # 256 MiB of windows in flight between the packer and the writer


def _check_window(spec: PackSpec, vocab_size: int, files: Sequence[str]) -> int:
    """Refuse a window that cannot be written or held: a record over the 2 GiB protobuf limit, a window whose
    way to disk needs more than half the available memory, or a large window longer than the whole input
    could fill (plain inputs: at most one token and one end-of-document id per byte), which would only be
    padding or dropped. Returns how many windows to pack at once."""
    record, working = window_footprint(spec, vocab_size)
    bound = _token_bound(files)
    if bound is not None and spec.window > bound and working > _PACK_BUDGET:
        raise TfpipeError(f"--seq-len {spec.seq_len} is longer than the whole input could fill (at most "
                          f"{bound:,} tokens in {bound // 2:,} bytes of text), and every window needs about "
                          f"{format_size(working)}: choose a --seq-len the input can fill")
    if record > MAX_RECORD_BYTES:
        raise TfpipeError(f"--seq-len {spec.seq_len} makes every record about {format_size(record)}; a "
                          f"tf.train.Example must stay under 2 GiB: choose a much smaller --seq-len")
    avail = available_memory()
    if avail is not None and working > avail // 2:
        raise TfpipeError(f"--seq-len {spec.seq_len} needs about {format_size(working)} of memory per window "
                          f"({'windows and mask' if spec.masked else 'windows'} as int64, plus the serialized "
                          f"record), more than half of the {format_size(avail)} available: choose a smaller "
                          "--seq-len")
    return max(1, _PACK_BUDGET // working)


def _token_bound(files: Sequence[str]) -> int | None:
    """At most this many tokens + end-of-document ids can come out of ``files`` (2 per byte of text), when
    every input is plain text or jsonl; None when any is compressed (its size says little)."""
    total = 0
    for f in files:
        if compression_of(f) is not None or format_of(f) == "parquet":
            return None
        total += input_size(f)
    return 2 * total


def _names(v):
    return v if v is None or isinstance(v, str) else tuple(v)


def count_subsets(subsets: list[str], lengths: np.ndarray, docs: dict[str, int], tokens: dict[str, int]) -> None:
    """Per-subset documents and tokens (document ids + its EOD)."""
    names, inv = np.unique(np.asarray(subsets, dtype=object), return_inverse=True)
    nd = np.bincount(inv, minlength=len(names))
    nt = np.bincount(inv, weights=(lengths + 1).astype(np.float64), minlength=len(names))
    for k, name in enumerate(names):
        docs[name] = docs.get(name, 0) + int(nd[k])
        tokens[name] = tokens.get(name, 0) + int(round(nt[k]))
