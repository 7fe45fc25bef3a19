"""LibSVM files -> TFRecord shard set: read blocks, parse + serialize them (in worker processes), write in order.

The I/O shell around the pure core (``block.parse`` + ``tfrecord.examples.serialize_batch``):

* inputs are expanded (files, directories, globs; .gz/.bz2/.zst) and read as line-aligned blocks, so
  memory is bounded by the block size times the blocks in flight, never by the input size;
* ``--index-base auto`` is decided over *all* inputs in a pre-pass before anything is converted (any
  index 0 anywhere: zero-based, else one-based);
* blocks are parsed inline or by worker processes (``workers``), consumed in input order, so the shards are
  byte-identical whatever ``workers`` is;
* the main process writes with ``ShardSetWriter`` (temporary names, fsync, rename, manifest last), through
  ``prep.PrepWriter`` when the data is prepared on the way (shuffle, balance, split by label);
* in the sparse layout the manifest's ``extra`` gets ``num_features`` (largest zero-based id + 1 over all
  written records, as scikit-learn's ``n_features``) and the nonzeros per row (min/mean/max/total), summed
  up block by block as the records stream past.

``run(inputs, out, options)`` is the core API (a ``LibsvmOptions``); ``convert_libsvm`` is its keyword form.
"""
from __future__ import annotations

import logging
import os
from typing import Iterable

from ..engines.inprocess import run_job
from ..engines.units import unit_count
from ..prep.options import PrepOptions, prep_from_keywords
from ..prep.writer import PrepWriter
from ..shardset.manifest import InputStats, Manifest
from ..shardset.options import ShardOutputOptions
from ..sources import compression_of, expand_inputs, input_size
from ..tfrecord.layout import EXAMPLE
from ..util.checks import as_int
from ..util.errors import InputError
from ..util.progress import progress_bar
from ..util.system import cap_workers, cpu_count
from ..util.units import DEFAULT_SHARD_BYTES
from .job import LibsvmJob
from .options import LibsvmOptions
from .reasons import first_bad_message
from .totals import (
    DEFAULT_BLOCK_BYTES,
    UNORDERED_NOTE,
    RowTotals,
    account,
    empty_input,
    log_totals,
    nothing_written,
)
from .workers import Pool, resolve_index_base, resolve_parallel, run_blocks, task_count

__all__ = ["run", "convert_libsvm", "RowTotals", "account", "log_totals", "empty_input", "nothing_written",
           "DEFAULT_BLOCK_BYTES", "UNORDERED_NOTE"]

log = logging.getLogger(__name__)


def convert_libsvm(inputs: str | os.PathLike | Iterable[str | os.PathLike], out: str | os.PathLike, *,
                   field_size: int | None = None, shard_size: int | str = DEFAULT_SHARD_BYTES,
                   workers: int | None = None,
                   index_base: str | int | None = None, pad: bool = False, truncate: bool = False,
                   on_error: str = "raise", allow_nonfinite: bool = False, max_index: int | None = None,
                   compression: str | None = None, overwrite: bool = False, prefix: str = "train",
                   label_key: str = "label", ids_key: str = "ids", values_key: str = "values",
                   progress: bool = False, block_bytes: int = DEFAULT_BLOCK_BYTES, sparse: bool = False,
                   multilabel: bool = False, keep_qid: bool = False, qid_key: str = "qid",
                   prep: PrepOptions | None = None, shuffle=False, seed: int | None = None,
                   shuffle_memory: int | str | None = None, tmp_dir: str | None = None, balance=None,
                   split_by_label: bool = False, strict_ids: bool = False, layout: str = EXAMPLE,
                   block_rows: int | None = None) -> Manifest:
    """Convert LibSVM text files into a TFRecord shard set with a manifest; returns the Manifest.

    The keyword form of :func:`run`: builds a ``LibsvmOptions`` from the arguments (``field_size`` for
    fixed-width rows: positional ids kept as written unless ``index_base``/``strict_ids`` say otherwise; or
    ``sparse=True`` with optional ``multilabel``/``keep_qid``). With
    ``on_error="raise"`` the first bad line raises ``InputError`` naming file:line and reason, and no
    manifest is written; with ``"skip"`` bad lines are counted by reason in the manifest (records read ==
    written + skipped). ``shard_size``: bytes or a size such as ``"256MiB"``. Write-time preparation, as the
    command line's flags: ``shuffle=True, seed=S`` (``shuffle_memory``, ``tmp_dir``), ``balance="equal"`` or
    ``"0=0.25,1=1"`` (with ``seed``), ``split_by_label=True`` — or a ready ``prep=PrepOptions(...)``
    (``converters.prep``; see ``prep_from_keywords``). ``layout="columnar"`` (fixed width only) writes blocks of
    ``block_rows`` rows as raw columns (``tfrecord.layout``) instead of one Example per line.
    """
    prep = prep_from_keywords(prep, shuffle=shuffle, seed=seed, shuffle_memory=shuffle_memory, tmp_dir=tmp_dir,
                              balance=balance, split_by_label=split_by_label)
    output = ShardOutputOptions(shard_size=shard_size, compression=compression, prefix=prefix, on_error=on_error,
                                layout=layout, block_rows=block_rows)
    options = LibsvmOptions(field_size, index_base, pad, truncate, allow_nonfinite, max_index, label_key, ids_key,
                            values_key, output, sparse, multilabel, keep_qid, qid_key, strict_ids)
    return run(inputs, out, options, workers=workers, overwrite=overwrite, progress=progress,
               block_bytes=block_bytes, prep=prep)


def run(inputs: str | os.PathLike | Iterable[str | os.PathLike], out: str | os.PathLike, options: LibsvmOptions,
        *, workers: int | None = None, overwrite: bool = False, progress: bool = False,
        block_bytes: int = DEFAULT_BLOCK_BYTES, allow_empty: bool = False, prep: PrepOptions | None = None
        ) -> Manifest:
    """Convert LibSVM inputs into a shard set at ``out`` as ``options`` say; returns the Manifest.

    ``workers`` processes parse and serialize (default: all cores; never more than one per task of
    ``block_bytes`` of text, so a small input is converted in this process); the output bytes depend on neither it nor
    ``block_bytes``. Inputs without a single valid line are an error unless
    ``allow_empty`` (a part of a larger conversion, such as one Processing instance's share): then the
    manifest lists no shard, only the accounting. ``prep`` (``converters.prep.PrepOptions``): shuffle, balance
    labels or split by label on the way to the shards (balancing reads the input twice).

    A columnar set (``options.output.layout``) needs the whole set's value ranges before its first block (the
    stored types): it runs as the two-pass job (``engines.inprocess.run_job``, its parallel steps on ``workers``
    processes), the very steps every engine runs, so its bytes are every engine's.
    """
    if not isinstance(options, LibsvmOptions):
        raise TypeError(f"options must be a LibsvmOptions, got {type(options).__name__}")
    workers = cap_workers(as_int(cpu_count() if workers is None else workers, "workers", minimum=1),
                          "parser workers")
    block_bytes = as_int(block_bytes, "block_bytes", minimum=1)
    if isinstance(inputs, (str, os.PathLike)):
        inputs = [inputs]
    if options.output.columnar:
        if allow_empty:
            raise ValueError("a columnar part of a larger conversion has no stored types of its own: convert the "
                             "whole input in one job (--layout columnar)")
        return _run_columnar(inputs, out, options, workers, overwrite, block_bytes, prep)
    if prep is not None and prep.needs_labels and options.multilabel:
        raise ValueError(f"{prep.describe()} needs one label per record: --multilabel records have lists")
    paths = expand_inputs(inputs, out=out)
    workers = _at_most_tasks(workers, task_count(paths, block_bytes, at_most=workers))
    size = None if any(compression_of(p) for p in paths) else sum(input_size(p) for p in paths)
    with PrepWriter(str(out), options.output, prep, overwrite=overwrite, expected_bytes=size) as writer:
        pool = Pool(workers, options.parse_options(1), options.keys) if workers > 1 else None
        try:
            return _convert(paths, options, writer, pool, block_bytes, progress, size, allow_empty)
        finally:
            if pool is not None:
                pool.close()


def _at_most_tasks(workers: int, tasks: int | None) -> int:
    """No more workers than the input's tasks (None: not known before reading)."""
    if tasks is not None and tasks < workers:
        log.debug("%d parser worker(s) for %d task(s)", max(1, tasks), tasks)
        return max(1, tasks)
    return workers


def _run_columnar(inputs, out, options: LibsvmOptions, workers: int, overwrite: bool, block_bytes: int,
                  prep: PrepOptions | None) -> Manifest:
    """A columnar set: the two-pass job's steps in this process, or on ``workers`` local processes (no more
    than the job's units)."""
    job = LibsvmJob.create(inputs, out, options, overwrite=overwrite, block_bytes=block_bytes, prep=prep)
    try:
        workers = _at_most_tasks(workers, unit_count(job.paths, job.unit_size, at_most=workers))
        pool = Pool(workers, options.parse_options(1), options.keys) if workers > 1 else None
    except BaseException:  # Ctrl-C while the workers start: the run's area goes, as run_job would remove it
        job.area.cleanup()
        job.area.release()
        raise
    try:
        return run_job(job, pmap=pool.map if pool is not None else None)
    finally:
        if pool is not None:
            pool.close()


def _convert(paths: list[str], opts: LibsvmOptions, writer: PrepWriter, pool: Pool | None, block_bytes: int,
             progress: bool, total: int | None, allow_empty: bool = False) -> Manifest:
    """``total``: the inputs' bytes (None when any is compressed), for the progress bar."""
    raise_on_bad = opts.output.on_error == "raise"
    if opts.index_base != "auto":
        base = opts.index_base
    elif pool is None:
        base = resolve_index_base(paths, block_bytes)
    else:
        base = resolve_parallel(paths, block_bytes, pool)
    stats = {p: InputStats(p) for p in paths}
    rows = RowTotals() if opts.sparse else None
    fallback = lines = 0
    if writer.needs_counts:  # balancing: a first pass counts the labels (bad input stops it as it would later)
        _count_labels(writer, run_blocks(paths, opts.parse_options(base), opts.keys, pool, block_bytes,
                                         raise_on_bad), raise_on_bad, progress, total)
    # a block's records may be views of a worker's ring slot: the writer writes or copies them before it asks
    # for the next block
    results = run_blocks(paths, opts.parse_options(base), opts.keys, pool, block_bytes, raise_on_bad,
                         split_packs=writer.prep.balance is not None)
    try:
        with progress_bar(progress, desc="convert libsvm", total=total) as bar:
            for path, _, res in results:
                if res.bad and raise_on_bad:
                    raise _bad_line(path, res)
                dropped = writer.write(res.framed, res.lengths, res.labels)
                account(stats[path], res.written, res.skipped, res.blank, res.bad, path, unordered=res.unordered)
                if dropped:
                    stats[path].records_written -= dropped
                    stats[path].skip("sampled_out", dropped)
                if rows is not None:
                    rows.add(res.sparse)
                fallback += res.fallback
                lines += res.lines
                bar.update(res.nbytes)
                bar.set_postfix(lines=f"{lines:,}", records=f"{writer.records:,}", refresh=False)
    finally:
        results.close()  # stops the worker pool now, also when a bad line raised
    read = sum(s.records_read for s in stats.values())
    blank = sum(s.blank_lines for s in stats.values())
    if writer.records == 0 and not allow_empty:
        raise empty_input(stats.values(), paths[0] if len(paths) == 1 else None)
    log_totals(stats.values(), read, fallback)
    options = opts.to_json()
    options["index_base_used"] = base
    options["ids"] = opts.ids_json(base)
    extra = {"index_base": base, "blank_lines": blank, **(rows.extra() if rows is not None else {})}
    return writer.finish(schema=opts.schema, inputs=[stats[p] for p in paths], options=options, kind="libsvm",
                         extra=extra)


def _bad_line(path: str, res) -> InputError:
    """The block's first bad line, as ``--on-error raise`` reports it (``res``: the block's result)."""
    b = res.bad[0]
    return InputError(first_bad_message(res.bad, res.skipped, res.written), path=path, line=b.line,
                      reason=b.reason)


def _count_labels(writer: PrepWriter, results, raise_on_bad: bool, progress: bool, total: int | None) -> None:
    try:
        with progress_bar(progress, desc="count labels", total=total) as bar:
            for path, _, res in results:
                if res.bad and raise_on_bad:
                    raise _bad_line(path, res)
                if res.labels is not None and res.labels.shape[0]:
                    writer.count(res.labels)
                bar.update(res.nbytes)
    finally:
        results.close()
    writer.start()
