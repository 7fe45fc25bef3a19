"""LibSVM worker processes: who parses which block, in input order.

With ``workers == 1`` everything runs inline on ``sources.iter_blocks`` blocks. With more, worker processes
read their own line-aligned byte ranges of plain files (``read_range``: nothing is sent to them but numbers;
compressed inputs are decompressed here and sent as blocks), parse and serialize them; results come back
strictly in input order with at most ``2 * workers`` tasks in flight (``util.ordered.ordered_map``), line
numbers renumbered from the running line count, so the output is byte-identical whatever ``workers`` is.
A block's records, lengths and labels come back through a ring of memory slots shared with the forked
workers (``util.shmring``: pages made once, not per block), or through files in ``/dev/shm`` where the
workers are not forked or a result does not fit its slot (``util.shmbytes``: one copy instead of the pipe's
pickling, and only a small message in the pipe, less likely to be cut by a kill), and each worker reuses its
heap for a task's arrays (``util.workerpool.steady_heap``).

Small plain files (many of them, as a day of click logs often arrives) are packed: consecutive files of less
than a block each are read by one task, parsed one by one (each keeps its own line numbers and accounting)
and serialized together, so the per-file cost is a read and a parse call, not a task, a serializer call and a
writer call each.

Workers never outlive the run (``util.workerpool``: they die with the main process, and leave Ctrl-C to it).
A worker that dies (killed, out of memory) ends the run with one line saying so.
"""
from __future__ import annotations

import logging
import mmap
from typing import Iterator

from ..sources import compression_of, input_size, is_url, iter_blocks, read_lines, read_range
from ..util.errors import InputError, TfpipeError
from ..util.ordered import ordered_map
from ..util.shmbytes import from_scratch, remove_scratch, scratch_dir, to_scratch
from ..util.shmring import SlotRing, ring_put, ring_take, slot_space
from ..util.workerpool import start_method, worker_pool
from .block import has_zero_index
from .reasons import BadLine
from .tasks import BlockResult, PackResult, read_whole, unpack, work_block, work_pack

__all__ = ["BlockResult", "Pool", "read_range", "run_blocks", "resolve_index_base", "resolve_parallel",
           "start_method", "byte_ranges", "work_block", "read_lines", "task_count"]

log = logging.getLogger(__name__)


def _pack_has_zero_index(paths: list[str]) -> bool:
    return has_zero_index(b"\n".join(read_whole(p) for p in paths))


def _items(paths: list[str], block_bytes: int) -> Iterator[tuple[str, object]]:
    """The inputs as they are read, in order: ``("pack", [small plain files])`` for runs of consecutive plain
    files of less than a block each (together at most a block), ``("file", path)`` for the others."""
    pack, size = [], 0
    for path in paths:
        n = input_size(path) if compression_of(path) is None else block_bytes
        if n < block_bytes:
            if pack and size + n > block_bytes:
                yield "pack", pack
                pack, size = [], 0
            pack.append(path)
            size += n
            continue
        if pack:
            yield "pack", pack
            pack, size = [], 0
        yield "file", path
    if pack:
        yield "pack", pack


def resolve_index_base(paths: list[str], block_bytes: int) -> int:
    """``--index-base auto`` over all inputs: 0 if any index 0 appears anywhere, else 1 (one pass over
    the inputs; stops at the first index 0)."""
    for kind, item in _items(paths, block_bytes):
        if _pack_has_zero_index(item) if kind == "pack" else _file_has_zero_index(item, block_bytes):
            log.info("index base auto: index 0 found in %s -> zero-based", item if kind == "file" else
                     f"one of {item[0]} .. {item[-1]}")
            return 0
    log.info("index base auto: no index 0 in %d input(s) -> one-based", len(paths))
    return 1


_SCAN_WINDOW = 64 << 20  # 64 MiB of a memory-mapped file scanned at a time


def _file_has_zero_index(path: str, block_bytes: int) -> bool:
    """A plain file is scanned in place (memory-mapped: no copies, no line counting; measured ~3x less CPU
    than block reads), a compressed one (or one that cannot be mapped) block by block."""
    if compression_of(path) is None and not is_url(path):
        try:
            with open(path, "rb") as f, mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as mm:
                return _mapped_has_zero_index(mm)
        except (OSError, ValueError):  # empty or special file: read it
            pass
    return any(has_zero_index(block) for block, _, _ in iter_blocks(path, block_bytes))


def _mapped_has_zero_index(mm: mmap.mmap, window: int = _SCAN_WINDOW) -> bool:
    """Windows of whole lines; each window's pages are dropped from this process once scanned, so the resident
    memory stays about one window whatever the file size."""
    size, start = len(mm), 0
    while start < size:
        end = min(size, start + window)
        if end < size:
            cut = mm.rfind(b"\n", start, end)
            end = cut + 1 if cut >= 0 else (mm.find(b"\n", end) + 1 or size)
        with memoryview(mm)[start:end] as view:
            hit = has_zero_index(view)
        if hasattr(mm, "madvise"):
            page = start - start % mmap.PAGESIZE
            mm.madvise(mmap.MADV_DONTNEED, page, end - page)
        if hit:
            return True
        start = end
    return False


def _work_range(path: str, start: int, stop: int, popts, keys, stop_on_bad: bool, space=None) -> BlockResult:
    return work_block(_read_range_or_fail(path, start, stop), 1, popts, keys, stop_on_bad, space)


def _zero_in_range(path: str, start: int, stop: int) -> bool:
    return has_zero_index(_read_range_or_fail(path, start, stop))


def _read_range_or_fail(path: str, start: int, stop: int) -> bytes:
    try:
        return read_range(path, start, stop)
    except OSError as exc:
        raise InputError(f"cannot read: {exc}", path=path, offset=start) from None


def byte_ranges(path: str, block_bytes: int) -> list[tuple[int, int]]:
    size = input_size(path)
    return [(a, min(a + block_bytes, size)) for a in range(0, size, block_bytes)]


def _tasks(paths: list[str], block_bytes: int):
    """Worker tasks in input order: packs of small plain files and byte ranges of larger ones (the worker reads
    them), text blocks of compressed files (decompressed here, in order)."""
    for kind, item in _items(paths, block_bytes):
        if kind == "pack":
            yield item, work_pack, (item,)
        elif compression_of(item) is None:
            for a, b in byte_ranges(item, block_bytes):
                yield item, _work_range, (item, a, b)
        else:
            for block, _, _ in iter_blocks(item, block_bytes):
                yield item, work_block, (block, 1)


def task_count(paths: list[str], block_bytes: int, at_most: int | None = None) -> int | None:
    """How many worker tasks ``paths`` make (packs of small files and byte ranges of larger ones), counted up
    to ``at_most`` (the inputs' sizes are looked up only that far); None when a compressed input's blocks are
    known only once it is decompressed."""
    if any(compression_of(p) is not None for p in paths):
        return None
    n = 0
    for kind, item in _items(paths, block_bytes):
        n += 1 if kind == "pack" else len(byte_ranges(item, block_bytes))
        if at_most is not None and n >= at_most:
            break
    return n


WORKER_HEAP_BYTES = 64 << 20  # a task's arrays (a block's parse and records) reused from the worker's heap
RING_SLOT_BYTES = 24 << 20    # a task's records, lengths and labels (a 4 MiB block's are about 4 MiB)


class Pool:
    """Workers start after a one-line parse here (a first run compiles here; forkserver workers load the cache).
    Their records come back through a ring of shared slots (forked workers, unless ``ring=False``:
    ``util.shmring``, one slot more than the tasks ``run_blocks`` keeps in flight) or a scratch directory in
    memory (``util.shmbytes``)."""

    def __init__(self, workers: int, popts, keys, ring: bool = True):
        warm = (b"1" + (b" qid:1" if popts.keep_qid else b"")
                + b"".join(b" %d:1" % (i + 1) for i in range(popts.field_size or 1)) + b"\n")
        work_block(warm, 1, popts, keys, False)
        has_zero_index(warm)
        self.workers = workers
        self.scratch = scratch_dir()
        method = start_method()
        self.ring = _shared_ring(workers) if ring and method == "fork" else None
        try:
            self.executor = worker_pool(workers, method, heap_bytes=WORKER_HEAP_BYTES)
        except BaseException:
            self._release()
            raise

    def submit(self, fn, *args):
        """``fn(*args, space)`` on a worker (``space``: the task's ring slot, to build the records in, or None):
        a future of its ``BlockResult`` or ``PackResult``, whose records, lengths and labels are passed through
        the slot or the scratch directory (``received`` turns them back into arrays). Tasks must be received in
        submit order, at most ``2 * workers`` in flight, as ``run_blocks`` does: a slot is reused by the task
        submitted ``2 * workers + 1`` later."""
        ring = (self.ring.id, self.ring.next_slot()) if self.ring is not None else (None, None)
        return self.executor.submit(_send_arrays, self.scratch, ring, fn, *args)

    def map(self, fn, items) -> list:
        """``fn`` over ``items`` on the workers, results in order (a two-pass job's steps: ``run_job``'s pmap)."""
        return [r for _, r in _worker_results(ordered_map(lambda it: self.executor.submit(fn, it), list(items),
                                                          2 * self.workers))]

    def close(self) -> None:
        try:
            self.executor.shutdown(wait=True, cancel_futures=True)
        finally:
            self._release()

    def _release(self) -> None:
        try:
            remove_scratch(self.scratch)
        finally:
            if self.ring is not None:
                self.ring.close()


def _shared_ring(workers: int) -> SlotRing | None:
    """The ring of ``2 * workers + 1`` slots, or None where the memory cannot be mapped (results then go
    through the scratch directory)."""
    try:
        return SlotRing(2 * workers + 1, RING_SLOT_BYTES)
    except (OSError, OverflowError, ValueError) as exc:
        log.debug("no shared ring of %d x %d bytes (%s): worker results go through the scratch directory",
                  2 * workers + 1, RING_SLOT_BYTES, exc)
        return None


_ARRAYS = ("framed", "lengths", "labels")   # what a BlockResult or PackResult sends through the ring or scratch


def _send_arrays(scratch: str | None, ring: tuple[int | None, int | None], fn, *args):
    """In a worker: ``fn(*args, space)``, its records built in the task's ring slot where they fit (no copy
    to make there), its arrays sent through the slot or the scratch directory."""
    res = fn(*args, slot_space(*ring))
    placed = ring_put(*ring, [getattr(res, name) for name in _ARRAYS])
    for name, value in zip(_ARRAYS, placed):
        setattr(res, name, to_scratch(value, scratch))
    return res


def received(res):
    """A worker's result with its records, lengths and labels arrays again (``Pool.submit``): read-only views
    of the ring's slot, valid until the task that reuses the slot is submitted, or read from the scratch
    directory."""
    for name in _ARRAYS:
        setattr(res, name, from_scratch(ring_take(getattr(res, name), copy=False)))
    return res


def _worker_results(results):
    """``results`` with a dead worker process turned into one clear error."""
    from concurrent.futures.process import BrokenProcessPool

    try:
        yield from results
    except BrokenProcessPool:
        raise _died() from None


def _died() -> TfpipeError:
    return TfpipeError("a parser worker process died (killed by a signal, or out of memory); nothing was "
                       "written: rerun, with fewer --workers if memory is short")


def resolve_parallel(paths: list[str], block_bytes: int, pool: Pool) -> int:
    """``resolve_index_base`` with the plain files scanned by the workers."""
    from concurrent.futures.process import BrokenProcessPool

    futures = []
    try:
        for kind, path in _items(paths, block_bytes):
            if kind == "pack":
                futures.append((f"one of {path[0]} .. {path[-1]}", pool.executor.submit(_pack_has_zero_index, path)))
            elif compression_of(path) is None:
                futures += [(path, pool.executor.submit(_zero_in_range, path, a, b))
                            for a, b in byte_ranges(path, block_bytes)]
            else:
                for block, _, _ in iter_blocks(path, block_bytes):
                    if has_zero_index(block):
                        log.info("index base auto: index 0 found in %s -> zero-based", path)
                        return 0
        for path, fut in futures:
            if fut.result():
                log.info("index base auto: index 0 found in %s -> zero-based", path)
                return 0
    except BrokenProcessPool:  # a worker died, while tasks were submitted or while they ran
        raise _died() from None
    finally:
        for _, fut in futures:
            fut.cancel()
    log.info("index base auto: no index 0 in %d input(s) -> one-based", len(paths))
    return 1


def run_blocks(paths, popts, keys, pool: Pool | None, block_bytes, stop_on_bad, split_packs: bool = False):
    """Yield (path, first_line, BlockResult) in input order, bad-line numbers counted from the file start.
    A pack's records come with its last file, unless ``split_packs`` (each file with its own records).
    A worker's records, lengths and labels may be read-only views of its ring slot, valid until the result
    after the next one is asked for: the consumer writes or copies them before it asks on (copies would cost
    the main process a copy and fresh pages for every byte of records)."""
    if pool is None:
        for kind, item in _items(paths, block_bytes):
            if kind == "pack":
                yield from unpack(item, work_pack(item, popts, keys, stop_on_bad), split_packs)
                continue
            first_line = 1  # counted by the parser (res.lines), not by a separate scan of each block
            for block, _, _ in iter_blocks(item, block_bytes, count_lines=False):
                res = work_block(block, first_line, popts, keys, stop_on_bad)
                yield item, first_line, res
                first_line += res.lines
        return
    next_line = {p: 1 for p in paths}

    def submit(task):
        _, fn, args = task
        return pool.submit(fn, *args, popts, keys, stop_on_bad)

    for (path, _, _), res in _worker_results(ordered_map(submit, _tasks(paths, block_bytes), 2 * pool.workers)):
        res = received(res)
        if isinstance(res, PackResult):
            yield from unpack(path, res, split_packs)
            continue
        first = next_line[path]
        next_line[path] = first + res.lines
        if first != 1:
            res.bad = [BadLine(b.line + first - 1, b.reason, b.token) for b in res.bad]
        yield path, first, res
