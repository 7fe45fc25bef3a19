"""LibSVM files -> TFRecord shard set: read blocks, parse + serialize them in worker processes, write in order.

The I/O shell around the pure core (``libsvm.parse_block`` + ``examples.serialize_batch``):

* inputs are expanded (files, directories, globs; .gz/.bz2/.zst) and read as line-aligned blocks, so
  memory is bounded by the block size times the blocks in flight, never by the input size;
* ``--index-base auto`` is decided over *all* inputs in a pre-pass before anything is converted (any
  index 0 anywhere: zero-based, else one-based);
* with ``workers == 1`` everything runs inline on ``sources.iter_blocks`` blocks; with more, worker
  processes read their own line-aligned byte ranges of plain files (``read_range``; compressed inputs are
  decompressed here and sent as blocks), parse and serialize them; results are consumed strictly in input
  order with at most ``2 * workers`` tasks in flight (line numbers are renumbered from the running line
  count), so the shards are byte-identical whatever ``workers`` is;
* the main process writes with ``ShardSetWriter`` (temporary names, fsync, rename, manifest last).
"""
from __future__ import annotations

import logging
import os
import sys
from dataclasses import asdict, dataclass, field
from typing import Iterable, Iterator

import numpy as np

from .errors import InputError
from .manifest import MAX_EXAMPLES, InputStats, Manifest
from .sources import compression_of, expand_inputs, iter_blocks
from .ordered import ordered_map
from .system import cpu_count
from .units import DEFAULT_SHARD_BYTES

__all__ = ["ConvertOptions", "convert_libsvm", "resolve_index_base", "read_range", "DEFAULT_BLOCK_BYTES"]

log = logging.getLogger(__name__)

DEFAULT_BLOCK_BYTES = 4 << 20  # 4 MiB of text per parse task


@dataclass(frozen=True)
class ConvertOptions:
    """Everything that decides the output of a LibSVM conversion (validated; bad values named)."""

    field_size: int
    shard_size: int = DEFAULT_SHARD_BYTES
    index_base: str | int = "auto"
    pad: bool = False
    truncate: bool = False
    on_error: str = "raise"
    allow_nonfinite: bool = False
    max_index: int | None = None
    compression: str | None = None
    prefix: str = "train"
    label_key: str = "label"
    ids_key: str = "ids"
    values_key: str = "values"

    def __post_init__(self):
        if not isinstance(self.field_size, int) or isinstance(self.field_size, bool) or self.field_size <= 0:
            raise ValueError(f"field_size must be a positive integer, got {self.field_size!r}")
        if not isinstance(self.shard_size, int) or self.shard_size <= 0:
            raise ValueError(f"shard_size must be a positive number of bytes, got {self.shard_size!r}")
        base = self.index_base
        if isinstance(base, str) and base in ("0", "1"):
            object.__setattr__(self, "index_base", int(base))
        elif base not in ("auto", 0, 1) or isinstance(base, bool):
            raise ValueError(f"index_base must be 'auto', 0 or 1, got {base!r}")
        if self.on_error not in ("raise", "skip"):
            raise ValueError(f"on_error must be 'raise' or 'skip', got {self.on_error!r}")
        if self.max_index is not None and (not isinstance(self.max_index, int) or self.max_index < 0):
            raise ValueError(f"max_index must be a non-negative integer, got {self.max_index!r}")
        if self.compression not in (None, "none", "gzip"):
            raise ValueError(f"compression must be 'none' or 'gzip', got {self.compression!r}")
        if self.compression == "none":
            object.__setattr__(self, "compression", None)
        keys = (self.label_key, self.ids_key, self.values_key)
        for k in keys:
            if not isinstance(k, str) or not k:
                raise ValueError(f"feature names must be non-empty strings, got {k!r}")
        if len(set(keys)) != 3:
            raise ValueError(f"label/ids/values feature names must differ, got {keys}")
        if not self.prefix or "/" in self.prefix:
            raise ValueError(f"prefix must be a non-empty name without '/', got {self.prefix!r}")

    def to_json(self) -> dict:
        return asdict(self)


@dataclass
class _BlockResult:
    """What a worker sends back for one block (picklable)."""

    framed: np.ndarray
    lengths: np.ndarray
    written: int
    blank: int
    skipped: dict[str, int]
    bad: list = field(default_factory=list)  # libsvm.BadLine, first ones in line order
    nbytes: int = 0
    lines: int = 0
    fallback: int = 0


def _work(block: bytes, first_line: int, popts, schema_keys: tuple[str, str, str], stop_on_bad: bool
          ) -> _BlockResult:
    """Parse + serialize one block (runs in a worker process, or inline with workers=1)."""
    from .libsvm import _parse, serialize_parsed

    pb = _parse(block, popts, first_line, MAX_EXAMPLES)
    if stop_on_bad and pb.bad:  # the run stops here: no need to serialize
        framed, lengths = np.zeros(0, np.uint8), np.zeros(0, np.int64)
    else:
        framed, lengths = serialize_parsed(pb, schema_keys)
    return _BlockResult(framed, lengths, pb.n, pb.blank, pb.skipped, pb.bad, len(block), pb.lines,
                        pb.fallback_lines)


def resolve_index_base(paths: list[str], block_size: int = DEFAULT_BLOCK_BYTES) -> int:
    """``--index-base auto`` over all inputs: 0 if any index 0 appears anywhere, else 1 (one pass over
    the inputs; stops at the first index 0)."""
    from .libsvm import has_zero_index

    for path in paths:
        for block, _, _ in iter_blocks(path, block_size):
            if has_zero_index(block):
                log.info("index base auto: index 0 found in %s -> zero-based", path)
                return 0
    log.info("index base auto: no index 0 in %d input(s) -> one-based", len(paths))
    return 1


def convert_libsvm(inputs: str | os.PathLike | Iterable[str | os.PathLike], out: str | os.PathLike, *,
                   field_size: int, shard_size: int = DEFAULT_SHARD_BYTES, workers: int | None = None,
                   index_base: str | int = "auto", pad: bool = False, truncate: bool = False,
                   on_error: str = "raise", allow_nonfinite: bool = False, max_index: int | None = None,
                   compression: str | None = None, overwrite: bool = False, prefix: str = "train",
                   label_key: str = "label", ids_key: str = "ids", values_key: str = "values",
                   progress: bool = False, block_size: int = DEFAULT_BLOCK_BYTES) -> Manifest:
    """Convert LibSVM text files into a TFRecord shard set with a manifest; returns the Manifest.

    ``workers`` processes parse and serialize (default: all cores); output bytes do not depend on it nor
    on ``block_size`` (the text read per task). With ``on_error="raise"`` the first bad line raises
    ``InputError`` naming file:line and reason, and no manifest is written; with ``"skip"`` bad lines are
    counted by reason in the manifest (records read == written + skipped).
    """
    opts = ConvertOptions(field_size, shard_size, index_base, pad, truncate, on_error, allow_nonfinite, max_index,
                          compression, prefix, label_key, ids_key, values_key)
    if workers is None:
        workers = cpu_count()
    if not isinstance(workers, int) or workers < 1:
        raise ValueError(f"workers must be a positive integer, got {workers!r}")
    if not isinstance(block_size, int) or block_size < 1:
        raise ValueError(f"block_size must be a positive integer, got {block_size!r}")
    if isinstance(inputs, (str, os.PathLike)):
        inputs = [inputs]
    paths = expand_inputs(inputs)

    from .libsvm import ParseOptions
    from .shards import ShardSetWriter
    from .synthetic import libsvm_schema

    schema = libsvm_schema(field_size, label_key, ids_key, values_key)
    with ShardSetWriter(str(out), prefix=prefix, shard_bytes=shard_size, compression=opts.compression,
                        overwrite=overwrite) as writer:
        pool = _Pool(workers, ParseOptions(field_size, 1, pad, truncate, allow_nonfinite, max_index),
                     (label_key, ids_key, values_key)) if workers > 1 else None
        try:
            return _convert(paths, opts, writer, schema, pool, block_size, progress)
        finally:
            if pool is not None:
                pool.close()


def _convert(paths, opts: ConvertOptions, writer, schema, pool, block_size: int, progress: bool) -> Manifest:
    from .libsvm import ParseOptions

    label_key, ids_key, values_key, on_error = opts.label_key, opts.ids_key, opts.values_key, opts.on_error
    if opts.index_base != "auto":
        base = opts.index_base
    elif pool is None:
        base = resolve_index_base(paths, block_size)
    else:
        base = _resolve_parallel(paths, block_size, pool)
    popts = ParseOptions(opts.field_size, base, opts.pad, opts.truncate, opts.allow_nonfinite, opts.max_index)
    stats = {p: InputStats(p) for p in paths}
    bar = _progress_bar(paths, progress)
    fallback = 0
    lines = 0
    results = _run(paths, popts, (label_key, ids_key, values_key), pool, block_size, on_error == "raise")
    try:
        for path, first_line, res in results:
            st = stats[path]
            if res.bad and on_error == "raise":
                b = res.bad[0]
                raise InputError(f"{b.reason}: {b.message} (use --on-error skip to skip bad lines)",
                                 path=path, line=b.line, reason=b.reason)
            writer.write(res.framed, res.lengths)
            st.records_written += res.written
            st.records_read += res.written + sum(res.skipped.values())
            st.blank_lines += res.blank
            for reason, count in res.skipped.items():
                st.skipped[reason] = st.skipped.get(reason, 0) + count
            for b in res.bad:
                if len(st.examples) < MAX_EXAMPLES:
                    st.examples.append(b.describe(path))
                    log.info("skipped %s", b.describe(path))
            fallback += res.fallback
            lines += res.lines
            if bar is not None:
                bar.update(res.nbytes)
                bar.set_postfix(lines=f"{lines:,}", records=f"{writer.records:,}", refresh=False)
    finally:
        results.close()  # stops the worker pool now, also when a bad line raised
        if bar is not None:
            bar.close()
    read = sum(s.records_read for s in stats.values())
    if writer.records == 0:
        blank = sum(s.blank_lines for s in stats.values())
        raise InputError(f"no records to write: the input holds no valid line ({blank} blank/comment "
                         f"line(s), {read} bad line(s) skipped)",
                         path=paths[0] if len(paths) == 1 else None, reason="empty_input")
    skipped = sum(s.records_skipped for s in stats.values())
    if skipped:
        by_reason: dict[str, int] = {}
        for s in stats.values():
            for k, v in s.skipped.items():
                by_reason[k] = by_reason.get(k, 0) + v
        log.info("skipped %d bad line(s) of %d: %s", skipped, read,
                    ", ".join(f"{k}={v}" for k, v in sorted(by_reason.items())))
    if fallback:
        log.info("%d line(s) needed the exact Python number parser", fallback)
    options = opts.to_json()
    options["index_base_used"] = base
    return writer.finish(schema=schema, inputs=[stats[p] for p in paths], options=options, kind="libsvm",
                         extra={"index_base": base,
                                "blank_lines": sum(s.blank_lines for s in stats.values())})


def _progress_bar(paths: list[str], enabled: bool):
    if not enabled:
        return None
    from tqdm import tqdm

    total = None
    if not any(compression_of(p) for p in paths):
        total = sum(os.path.getsize(p) for p in paths)
    return tqdm(total=total, unit="B", unit_scale=True, unit_divisor=1024, desc="convert libsvm",
                file=sys.stderr, dynamic_ncols=True)


def _line_start(f, pos: int, size: int) -> int:
    """Offset of the first line of ``f`` that starts at or after ``pos`` (``size`` if none)."""
    if pos <= 0:
        return 0
    if pos >= size:
        return size
    f.seek(pos - 1)
    at = pos - 1
    while True:
        chunk = f.read(1 << 16)
        if not chunk:
            return size
        i = chunk.find(b"\n")
        if i >= 0:
            return at + i + 1
        at += len(chunk)


def read_range(path: str, start: int, stop: int) -> bytes:
    """The whole lines of a plain file that *start* in ``[start, stop)``: consecutive ranges partition the
    file into whole lines, so a worker can read its own block and nothing is sent to it but numbers."""
    with open(path, "rb") as f:
        size = os.fstat(f.fileno()).st_size
        a = _line_start(f, start, size)
        b = _line_start(f, stop, size)
        if b <= a:
            return b""
        f.seek(a)
        return f.read(b - a)


def _work_range(path: str, start: int, stop: int, popts, keys, stop_on_bad: bool) -> _BlockResult:
    return _work(_read_range_or_fail(path, start, stop), 1, popts, keys, stop_on_bad)


def _zero_in_range(path: str, start: int, stop: int) -> bool:
    from .libsvm import has_zero_index

    return has_zero_index(_read_range_or_fail(path, start, stop))


def _read_range_or_fail(path: str, start: int, stop: int) -> bytes:
    try:
        return read_range(path, start, stop)
    except OSError as exc:
        raise InputError(f"cannot read: {exc}", path=path, offset=start) from None


def _ranges(path: str, block_size: int) -> list[tuple[int, int]]:
    size = os.path.getsize(path)
    return [(a, min(a + block_size, size)) for a in range(0, size, block_size)]


def _blocks(paths: list[str], block_size: int) -> Iterator[tuple[str, bytes, int]]:
    for path in paths:
        for block, first_line, _ in iter_blocks(path, block_size):
            yield path, block, first_line


def _tasks(paths: list[str], block_size: int):
    """Worker tasks in input order: byte ranges of plain files (the worker reads them), text blocks of
    compressed files (decompressed here, in order)."""
    for path in paths:
        if compression_of(path) is None:
            for a, b in _ranges(path, block_size):
                yield path, _work_range, (path, a, b)
        else:
            for block, _, _ in iter_blocks(path, block_size):
                yield path, _work, (block, 1)


def _start_method() -> str:
    """``fork`` (workers start warm, kernels already loaded) unless this process runs other threads (a trainer
    with TensorFlow loaded, say): forking a multi-threaded process can deadlock the child, so then
    ``forkserver`` (or ``spawn`` where there is no fork at all)."""
    import multiprocessing as mp
    import threading

    methods = mp.get_all_start_methods()
    if "fork" in methods and threading.active_count() == 1 and "tensorflow" not in sys.modules:
        return "fork"
    return "forkserver" if "forkserver" in methods else "spawn"


class _Pool:
    """Worker processes (forked after the kernels are loaded, so they start warm, where that is safe)."""

    def __init__(self, workers: int, popts, keys):
        import multiprocessing as mp
        from concurrent.futures import ProcessPoolExecutor

        warm = b"1" + b"".join(b" %d:1" % (i + 1) for i in range(popts.field_size)) + b"\n"
        _work(warm, 1, popts, keys, False)
        from .libsvm import has_zero_index

        has_zero_index(warm)
        ctx = mp.get_context(_start_method())
        self.workers = workers
        self.executor = ProcessPoolExecutor(max_workers=workers, mp_context=ctx)

    def close(self) -> None:
        self.executor.shutdown(wait=True, cancel_futures=True)


def _resolve_parallel(paths: list[str], block_size: int, pool: _Pool) -> int:
    """``resolve_index_base`` with the plain files scanned by the workers."""
    from .libsvm import has_zero_index

    futures = []
    try:
        for path in paths:
            if compression_of(path) is None:
                futures += [(path, pool.executor.submit(_zero_in_range, path, a, b))
                            for a, b in _ranges(path, block_size)]
            else:
                for block, _, _ in iter_blocks(path, block_size):
                    if has_zero_index(block):
                        log.info("index base auto: index 0 found in %s -> zero-based", path)
                        return 0
        for path, fut in futures:
            if fut.result():
                log.info("index base auto: index 0 found in %s -> zero-based", path)
                return 0
    finally:
        for _, fut in futures:
            fut.cancel()
    log.info("index base auto: no index 0 in %d input(s) -> one-based", len(paths))
    return 1


def _run(paths, popts, keys, pool: _Pool | None, block_size, stop_on_bad):
    """Yield (path, first_line, _BlockResult) in input order, bad-line numbers counted from the file start."""
    if pool is None:
        for path, block, first_line in _blocks(paths, block_size):
            yield path, first_line, _work(block, first_line, popts, keys, stop_on_bad)
        return
    from .libsvm import BadLine

    next_line = {p: 1 for p in paths}

    def submit(task):
        _, fn, args = task
        return pool.executor.submit(fn, *args, popts, keys, stop_on_bad)

    for (path, _, _), res in ordered_map(submit, _tasks(paths, block_size), 2 * pool.workers):
        first = next_line[path]
        next_line[path] = first + res.lines
        if first != 1:
            res.bad = [BadLine(b.line + first - 1, b.reason, b.token) for b in res.bad]
        yield path, first, res
