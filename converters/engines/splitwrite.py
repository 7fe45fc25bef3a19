"""Pass 2 of one large shard by several processes at once: when a run has more processes than shards left to
write (a 750 MB input makes one 1 GiB shard and a small one), the shard's rows are cut into parts of about equal
bytes (``cut_parts``, pure, from each row's framed length), each part's framed records are written at its byte
offset of one file (``write_part``), and the file is then checked, hashed, fsynced and named as a shard written
whole is (``join_parts``). The first part is hashed as it is written, by the process that runs the join, so the
join reads only the other parts' bytes. The bytes are those one process writes: a record's framing does not
depend on the rows written beside it.

Only an uncompressed shard on local storage is cut (a gzip stream, or an upload, is one process's work), and
only a shard of at least ``SPLIT_MIN_BYTES`` (below that a process's fixed cost outweighs the half it saves)."""
from __future__ import annotations

import os
import uuid
from dataclasses import dataclass
from typing import Iterable

import numpy as np

from ..shardset.shardfile import WRITEBACK_BYTES
from ..util.checks import as_int
from ..util.digest import open_file_digest
from ..util.errors import TfpipeError
from ..util.fs import HashingWriter, start_writeback
from .area import RunArea
from .core import ShardResult, ShardSpec

__all__ = ["SPLIT_MIN_BYTES", "ShardPart", "cut_parts", "can_split", "open_parts", "write_part", "join_parts"]

SPLIT_MIN_BYTES = 64 << 20  # a smaller shard is written by one process

# The running hash of each first part this process wrote, by the shard file's path, until its join.
_HEADS: dict[str, tuple[int, object]] = {}


@dataclass(frozen=True)
class ShardPart:
    """Records ``[spec.first, spec.first + spec.records)`` of shard ``spec.index`` (``spec``: the part's rows),
    written at byte ``offset`` of ``path`` (the shard's file while it is written), ``nbytes`` bytes."""

    spec: ShardSpec
    path: str
    offset: int
    nbytes: int
    tmp_name: str

    def __post_init__(self):
        for name in ("offset", "nbytes"):
            object.__setattr__(self, name, as_int(getattr(self, name), f"a shard part's {name}", minimum=0))


def cut_parts(lengths: np.ndarray, parts: int) -> list[tuple[int, int, int, int]]:
    """Pure: ``(first row, rows, byte offset, bytes)`` of up to ``parts`` parts of about equal bytes, in order,
    from each row's framed length (every part at least one row)."""
    lengths = np.asarray(lengths, np.int64)
    n = int(lengths.size)
    if n == 0 or parts < 2:
        return [(0, n, 0, int(lengths.sum()))]
    ends = np.cumsum(lengths)
    total = int(ends[-1])
    targets = total * np.arange(1, parts, dtype=np.float64) / parts
    cuts = sorted({int(c) for c in np.searchsorted(ends, targets, side="left") + 1 if 0 < c < n})
    bounds = [0, *cuts, n]
    starts = [0] + [int(ends[b - 1]) for b in bounds[1:]]
    return [(a, b - a, starts[k], starts[k + 1] - starts[k]) for k, (a, b) in enumerate(zip(bounds, bounds[1:]))]


def can_split(area: RunArea, output) -> bool:
    """Whether this run's shards may be written in parts: uncompressed, on local storage."""
    return output.compression is None and area.output().local_path(area.shard_tmp_name(0, output.names)) is not None


def open_parts(area: RunArea, output, spec: ShardSpec, cuts: list[tuple[int, int, int, int]]) -> list[ShardPart]:
    """The parts of shard ``spec`` at ``cuts`` (``cut_parts`` of its rows), its file created empty under a name of
    this attempt (the run's temporary prefix: a failed run's clean-up removes it)."""
    tmp_name = area.shard_tmp_name(spec.index, output.names)
    path = os.path.join(area.output().staging_dir(), f"{tmp_name}.{uuid.uuid4().hex[:8]}.part")
    with open(path, "wb"):
        pass
    return [ShardPart(ShardSpec(spec.index, rows, spec.pieces, spec.first + first, spec.layout), path, offset,
                      nbytes, tmp_name) for first, rows, offset, nbytes in cuts]


def write_part(part: ShardPart, records: Iterable[tuple[np.ndarray, int]]) -> int:
    """Write ``(framed bytes, count)`` batches at the part's offset; the part's bytes and records are checked
    against its plan. Returns the records written. The first part is also hashed as it is written
    (``util.fs.HashingWriter``: a piece at a time, while the piece is in the CPU's cache); the hash is kept in
    this process for ``join_parts``."""
    count = 0
    with open(part.path, "r+b") as f:
        f.seek(part.offset)
        out = HashingWriter(f) if part.offset == 0 else f
        handed = part.offset
        for framed, n in records:
            out.write(memoryview(np.ascontiguousarray(framed)).cast("B"))
            count += n
            if f.tell() - handed >= WRITEBACK_BYTES:  # to the disk as it goes, as a shard written whole is
                f.flush()
                start_writeback(f.fileno(), handed, f.tell() - handed)
                handed = f.tell()
        f.flush()
        os.fsync(f.fileno())  # here, beside the other parts: the join's fsync has little left to do
        written = f.tell() - part.offset
    if written != part.nbytes or count != part.spec.records:
        raise TfpipeError(f"shard {part.spec.index}: a part of {part.spec.records} records and {part.nbytes} bytes "
                          f"came out as {count} records and {written} bytes (did an input change during the run?)")
    if isinstance(out, HashingWriter):
        _HEADS[part.path] = (part.nbytes, out.sha)
    return count


def join_parts(area: RunArea, parts: list[ShardPart]) -> ShardResult:
    """The shard the ``parts`` wrote (all of one shard, in order): its size checked, hashed, fsynced, then
    renamed to the shard's temporary name, as ``core.ShardFile`` leaves a shard written whole. Where this
    process wrote the first part, its hash is continued over the rest (the local pool runs a join here and gives
    this process the first parts: ``steps.write_step``); else the whole file is hashed."""
    first = parts[0]
    nbytes = sum(p.nbytes for p in parts)
    kept, head = _HEADS.pop(first.path, (0, None))
    if head is None or kept != first.nbytes:
        kept, head = 0, None
    with open(first.path, "rb+") as f:
        size = os.fstat(f.fileno()).st_size
        if size != nbytes:
            raise TfpipeError(f"shard {first.spec.index}: its parts wrote {size} bytes where the plan has {nbytes}")
        _, sha256 = open_file_digest(f, head, kept)
        os.fsync(f.fileno())
    os.replace(first.path, area.output().local_path(first.tmp_name))
    return ShardResult(first.spec.index, first.tmp_name, sum(p.spec.records for p in parts), nbytes, sha256)
