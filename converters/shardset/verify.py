"""Verify a shard set against its manifest: every record read with CRC checks; counts, bytes, sha256."""
from __future__ import annotations

import logging
import os
import tempfile
from dataclasses import dataclass, field

from ..storage import open_storage
from ..tfrecord.reader import is_gzip, scan_file
from ..util.errors import IntegrityError
from ..util.progress import progress_bar
from .manifest import Manifest, ShardInfo
from .reader import read_manifest, shard_file_problem

__all__ = ["VerifyReport", "verify"]

log = logging.getLogger(__name__)


@dataclass
class VerifyReport:
    location: str
    shards: int = 0
    records: int = 0
    bytes: int = 0
    problems: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.problems


def verify(path: str, *, progress: bool = False, raise_on_error: bool = True,
           manifest: Manifest | None = None) -> VerifyReport:
    """Read every record of every shard with CRC checks and compare with the manifest.

    Raises IntegrityError naming the shard and byte offset of the first problem (unless
    ``raise_on_error=False``, in which case all problems are listed in the report).
    """
    manifest = manifest or read_manifest(path)
    storage = open_storage(manifest.location)
    report = VerifyReport(location=manifest.location)
    with progress_bar(progress, desc="verify", total=len(manifest.shards), unit="shard") as bar:
        for info in manifest.shards:
            bar.update(1)
            _check_one(storage, manifest, info, report, raise_on_error)
    if report.ok and report.records != manifest.records:
        problem = f"{report.records} records in shards, manifest total says {manifest.records}"
        report.problems.append(problem)
        if raise_on_error:
            raise IntegrityError(f"{manifest.location}: {problem}")
    return report


def _not_a_shard(path: str, info: ShardInfo, manifest: Manifest) -> str | None:
    """Why ``path`` cannot be this shard before reading its records (missing, not a regular file of the set,
    compressed otherwise than the manifest says), or None."""
    problem = shard_file_problem(path)
    if problem:
        return f"{info.name}: {problem}"
    gz = is_gzip(path)
    if manifest.compression == "gzip" and not gz:
        return f"{info.name}: the manifest says gzip but the shard is not gzip-compressed"
    if manifest.compression is None and gz:
        return f"{info.name}: the shard is gzip-compressed but the manifest says uncompressed"
    return None


def _check_one(storage, manifest: Manifest, info: ShardInfo, report: VerifyReport, raise_on_error: bool) -> None:
    """Scan one shard (fetched to a temporary file when remote) and record its problem, if any."""
    local = storage.local_path(info.name)
    tmpdir = None
    if local is None:  # remote: fetch to a temporary file first
        tmpdir = tempfile.TemporaryDirectory(prefix="tfpipe-verify-")
        local = os.path.join(tmpdir.name, os.path.basename(info.name))
        try:
            storage.fetch(info.name, local)
        except FileNotFoundError:
            pass  # reported as missing below
    try:
        problem = _not_a_shard(local, info, manifest)
        if problem is None:
            res = scan_file(local)
            report.shards += 1
            report.records += res.records
            report.bytes += res.bytes
            problem = None
            if res.error:
                at = f" at byte {res.error_offset}" if res.error_offset is not None else ""
                unc = " of the uncompressed stream" if manifest.compression and at else ""
                problem = f"{info.name}: {res.error}{at}{unc} (after {res.records} good records)"
            elif res.records != info.records:
                problem = (f"{info.name}: {res.records} records read, manifest says {info.records} "
                           f"(shard truncated or replaced; file ends at byte {res.bytes})")
            elif res.bytes != info.bytes:
                problem = f"{info.name}: {res.bytes} bytes, manifest says {info.bytes}"
            elif res.sha256 != info.sha256:
                problem = (f"{info.name}: sha256 {res.sha256[:12]}... differs from the manifest's "
                           f"{info.sha256[:12]}...")
    finally:
        if tmpdir is not None:
            tmpdir.cleanup()
    if problem:  # returned or raised, and reported once, by the caller: only the debug log repeats it here
        log.debug(problem)
        report.problems.append(problem)
        if raise_on_error:
            raise IntegrityError(f"{manifest.location}: {problem}")
