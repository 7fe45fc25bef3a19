"""``tfpipe pipeline offsets SET``: compute and cache the record-offset index (``pipeline.resume.offsets``) of every
shard of a local set before a long run, so that the first resume deep into an epoch does not pay for it.

Shards are indexed in threads (the walk kernel releases the GIL); an index already in the cache is only
checked for its size. GZIP shards are not indexed: offsets into compressed data do not apply, and a resume
reads through them (``TFRecordDataset.skip``).
"""
from __future__ import annotations

import os
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass

from converters.util.errors import IntegrityError, TfpipeError

from .offsets import OFFSET_BYTES, index_dir, ensure_index

__all__ = ["OffsetsReport", "index_offsets", "format_offsets_report"]

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
    A shard whose record count differs from its manifest's is an ``IntegrityError``."""
    from converters.shardset.reader import read_manifest
    from converters.storage import is_s3
    from converters.util.progress import progress_bar

    if isinstance(workers, bool) or not isinstance(workers, int) or workers < 1:
        raise ValueError(f"workers must be a positive number, got {workers!r}")
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

    def one(item):
        info, path = item
        try:
            res = ensure_index(path, records=info.records, sha256=info.sha256, directory=directory)
        except OSError as exc:
            raise TfpipeError(f"{path}: cannot index it ({exc.strerror or exc})") from None
        if res.records != info.records:
            raise IntegrityError(f"{path}: {res.records} records, its manifest says {info.records} (tfpipe verify "
                                 "names what is wrong)")
        return res

    counts = {"indexed": 0, "cached": 0, "uncached": 0}
    with progress_bar(progress, desc="record offsets", total=manifest.total_bytes) as bar, \
            ThreadPoolExecutor(max_workers=min(workers, max(1, len(shards)))) as pool:
        for (info, _), res in zip(shards, pool.map(one, shards)):
            counts[res.status] += 1
            bar.update(info.bytes)
    return OffsetsReport(str(set_path), len(shards), manifest.records, counts["indexed"], counts["cached"],
                         counts["uncached"], 0, OFFSET_BYTES * manifest.records, time.perf_counter() - start,
                         directory)


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
