"""``tfpipe pipeline offsets SET``: compute and cache the record-offset index (``pipeline.resume.offsets``) of every
shard of a local set before a long run, so that the first resume deep into an epoch does not pay for it.

Shards are indexed in threads (the walk kernel releases the GIL); an index already in the cache is checked
(its checksum, count and shard size) and walked again if it does not pass. A shard is looked at before it is
opened or called cached: one that is missing, a link, a FIFO, a device or a directory, or whose size is not
its manifest's, and one whose records are damaged, is one warning line naming it and is not indexed (nothing
is opened that could block); the others are, and the run then fails saying how many were left out. GZIP
shards are not indexed: offsets into compressed data do not apply, and a resume reads through them
(``TFRecordDataset.skip``).
"""
from __future__ import annotations

import logging
import os
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass

from converters.util.checks import as_int
from converters.util.errors import IntegrityError, TfpipeError

from ..spec.blocks import file_blocks
from .offsets import OFFSET_BYTES, index_dir, ensure_index

__all__ = ["OffsetsReport", "index_offsets", "format_offsets_report"]

log = logging.getLogger(__name__)

GZIP_NOTE = "not indexed (gzip: a resume skips through them)"


@dataclass(frozen=True)
class OffsetsReport:
    """What ``index_offsets`` did for one set: shards newly indexed, found cached, computed but not cached
    (an unwritable cache directory), and GZIP shards left out."""

    set: str
    shards: int
    records: int
    indexed: int
    cached: int
    uncached: int
    gzip: int
    index_bytes: int
    seconds: float
    index_dir: str

    def to_json(self) -> dict:
        return {**asdict(self), "seconds": round(self.seconds, 3)}


def index_offsets(set_path: str, *, workers: int = 1, progress: bool = False,
                  directory: str | None = None) -> OffsetsReport:
    """Index every shard of the local shard set ``set_path`` (a directory or its ``index.json``) into the
    offsets cache (``directory``, default ``pipeline.resume.offsets.index_dir()``), ``workers`` shards at a time.
    A shard that is not a regular file of its manifest's size, is damaged or has another record count is one
    warning naming it; the others are indexed, then an ``IntegrityError`` says how many were left out."""
    from converters.shardset.reader import read_manifest
    from converters.storage import is_s3
    from converters.util.progress import progress_bar

    workers = as_int(workers, "workers", minimum=1, must="a positive number")
    if is_s3(str(set_path)) or "://" in str(set_path):
        raise TfpipeError(f"{set_path}: record offsets are indexed for the files of a local set: give the set's "
                          "local directory")
    directory = directory if directory is not None else index_dir()
    start = time.perf_counter()
    manifest = read_manifest(set_path)
    shards = list(zip(manifest.shards, manifest.shard_paths()))
    if manifest.compression:
        return OffsetsReport(str(set_path), len(shards), manifest.records, 0, 0, 0, len(shards), 0,
                             time.perf_counter() - start, directory)

    def records_of(info) -> int:    # TFRecord records of a shard: a columnar set's are blocks of rows
        return file_blocks(info.records, manifest.layout.block_rows) if manifest.layout.columnar else info.records

    def one(item):
        info, path = item
        problem = _shard_problem(path, info)
        if problem is None:
            try:
                res = ensure_index(path, records=records_of(info), sha256=info.sha256, directory=directory)
                # (another count than the manifest's: ensure_index warned, naming the file and both counts)
                return res.status if res.records == records_of(info) else "bad"   # (not the offsets: never all held)
            except IntegrityError as exc:   # damaged: the message names the file and the byte
                log.warning("%s: not indexed", exc)
                return "bad"
            except OSError as exc:
                problem = f"cannot index it ({exc.strerror or exc})"
        log.warning("%s: %s: not indexed", path, problem)
        return "bad"

    counts = {"indexed": 0, "cached": 0, "uncached": 0, "bad": 0}
    with progress_bar(progress, desc="record offsets", total=manifest.total_bytes) as bar, \
            ThreadPoolExecutor(max_workers=min(workers, max(1, len(shards)))) as pool:
        for (info, _), status in zip(shards, pool.map(one, shards)):
            counts[status] += 1
            bar.update(info.bytes)
    if counts["bad"]:
        raise IntegrityError(f"{set_path}: {counts['bad']} of {len(shards)} shard(s) not indexed (each named above; "
                             "tfpipe verify checks the set)")
    return OffsetsReport(str(set_path), len(shards), manifest.records, counts["indexed"], counts["cached"],
                         counts["uncached"], 0, OFFSET_BYTES * sum(records_of(i) for i, _ in shards),
                         time.perf_counter() - start,
                         directory)


def _shard_problem(path: str, info) -> str | None:
    """Why the file at ``path`` cannot be the manifest entry ``info``'s shard, from its metadata only (never
    opened: a FIFO or device is not read), or None."""
    from converters.shardset.reader import shard_file_problem

    problem = shard_file_problem(path)
    if problem is None:
        size = os.lstat(path).st_size
        if size != info.bytes:
            return f"{size} bytes, its manifest says {info.bytes}"
    return problem


def format_offsets_report(r: OffsetsReport) -> str:
    from converters.util.units import format_size

    lines = [f"{r.set}: {r.shards} shard(s), {r.records:,} records"]
    if r.gzip:
        lines.append(f"  {r.gzip} shard(s) {GZIP_NOTE}")
    else:
        lines.append(f"  {r.indexed} indexed, {r.cached} already cached"
                     + (f", {r.uncached} computed but not cached (the cache directory cannot be written)"
                        if r.uncached else "")
                     + f" in {r.seconds:.2f} s")
        lines.append(f"  cache {os.path.abspath(r.index_dir)} ({format_size(r.index_bytes)} of indexes for this set, "
                     "8 bytes a record)")
    return "\n".join(lines)
