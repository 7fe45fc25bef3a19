"""Verify a shard set against its manifest: every record read with CRC checks; counts, bytes, sha256; in a
columnar set also every block's structure (``tfrecord.columnar.decode_block``: the schema's columns, whole rows
of the stored types, equal row counts, ``block_rows`` rows in every block but a shard's last), rows counted."""
from __future__ import annotations

import logging
import os
import tempfile
from dataclasses import dataclass, field

from ..storage import open_storage
from ..tfrecord.columnar import BlockError, decode_block
from ..tfrecord.crc import FRAME_OVERHEAD
from ..tfrecord.reader import is_gzip, read_records, scan_file
from ..util.errors import IntegrityError
from ..util.progress import progress_bar
from .links import link_problem
from .manifest import Manifest, ShardInfo
from .reader import read_manifest, shard_file_problem
from .setfiles import SetFile, side_files_of

__all__ = ["VerifyReport", "verify"]

log = logging.getLogger(__name__)


@dataclass
class VerifyReport:
    location: str
    shards: int = 0
    records: int = 0
    bytes: int = 0
    problems: list[str] = field(default_factory=list)
    blocks: int = 0  # columnar blocks decoded and found well-formed

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
    for entry in side_files_of(manifest):  # files beside the shards (tabular vocabularies)
        _check_file(storage, manifest, entry, report, raise_on_error)
    if report.ok and report.records != manifest.records:
        problem = f"{report.records} records in shards, manifest total says {manifest.records}"
        report.problems.append(problem)
        if raise_on_error:
            raise IntegrityError(f"{manifest.location}: {problem}")
    return report


def _check_file(storage, manifest: Manifest, entry: SetFile, report: VerifyReport, raise_on_error: bool) -> None:
    """A file the manifest lists beside the shards (``extra.files``: name, bytes, sha256) is there, unchanged."""
    import hashlib

    name = entry.name
    try:
        problem = link_problem(storage, name)
        data = b"" if problem else storage.read_bytes(name)
    except FileNotFoundError:
        problem = f"{name}: missing"
    else:
        problem = problem or (f"{name}: {len(data)} bytes, manifest says {entry.bytes}" if len(data) != entry.bytes
                   else f"{name}: sha256 differs from the manifest's" if hashlib.sha256(data).hexdigest()
                   != entry.sha256 else None)
    if problem:
        report.problems.append(problem)
        if raise_on_error:
            raise IntegrityError(f"{manifest.location}: {problem}")


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


def _check_blocks(path: str, info: ShardInfo, manifest: Manifest) -> tuple[int, int, str | None]:
    """A columnar shard's rows, its well-formed blocks and the first block that is not a well-formed block of
    the set's layout (named by its index and byte offset in the uncompressed stream), or None."""
    layout, rows, offset, last = manifest.layout, 0, 0, None
    for k, record in enumerate(read_records(path)):
        if last is not None and last != layout.block_rows:
            return rows, k - 1, (f"{info.name}: block {k - 1} holds {last} rows, only a shard's last block may hold fewer "
                          f"than {layout.block_rows}")
        try:
            last = len(next(iter(decode_block(record, manifest.schema, layout).values())))
        except BlockError as exc:
            return rows, k, f"{info.name}: block {k} at byte {offset}: {exc}"
        if last > layout.block_rows:
            return rows, k, (f"{info.name}: block {k} at byte {offset} holds {last} rows, more than "
                             f"{layout.block_rows}")
        rows += last
        offset += len(record) + FRAME_OVERHEAD
    return rows, (0 if last is None else k + 1), None


def _scan_problem(res, count: int, info: ShardInfo, manifest: Manifest) -> str | None:
    """What a shard's scan (``count``: its records, or rows in a columnar set) says is wrong with it, or None."""
    if res.error:
        at = f" at byte {res.error_offset}" if res.error_offset is not None else ""
        unc = " of the uncompressed stream" if manifest.compression and at else ""
        return f"{info.name}: {res.error}{at}{unc} (after {res.records} good records)"
    if count != info.records:
        return (f"{info.name}: {count} {'rows' if manifest.layout.columnar else 'records'} read, manifest says "
                f"{info.records} (shard truncated or replaced; file ends at byte {res.bytes})")
    if res.bytes != info.bytes:
        return f"{info.name}: {res.bytes} bytes, manifest says {info.bytes}"
    if res.sha256 != info.sha256:
        return f"{info.name}: sha256 {res.sha256[:12]}... differs from the manifest's {info.sha256[:12]}..."
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
        problem = link_problem(storage, info.name) or _not_a_shard(local, info, manifest)
        if problem is None:
            res = scan_file(local)
            report.shards += 1
            report.bytes += res.bytes
            count, problem = res.records, None
            if manifest.layout.columnar and not res.error:
                count, blocks, problem = _check_blocks(local, info, manifest)
                report.blocks += blocks
            report.records += count
            problem = problem or _scan_problem(res, count, info, manifest)
    finally:
        if tmpdir is not None:
            tmpdir.cleanup()
    if problem:  # returned or raised, and reported once, by the caller: only the debug log repeats it here
        log.debug(problem)
        report.problems.append(problem)
        if raise_on_error:
            raise IntegrityError(f"{manifest.location}: {problem}")
