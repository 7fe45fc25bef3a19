"""What a LibSVM worker does with its task (picklable values in and out): ``work_block`` parses and serializes
one block, ``work_pack`` a pack of small whole files (each file keeping its own accounting), ``unpack`` hands a
pack's files on one by one. ``workers`` decides who runs them and in which order."""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from ..shardset.manifest import MAX_EXAMPLES
from ..sources import is_url, open_raw
from ..util.errors import InputError
from ..util.fs import read_regular
from .block import concat_records, parse, serialize_parsed
from .sparse import SparseBlock, row_stats

__all__ = ["BlockResult", "PackResult", "work_block", "work_pack", "unpack", "read_whole"]


@dataclass
class BlockResult:
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
    sparse: dict | None = None  # sparse layout: sparse.row_stats of the written rows
    labels: np.ndarray | None = None  # float32, one per written record (None: multi-label lists)
    unordered: int = 0  # written rows whose positional ids repeat or do not increase


def work_block(block: bytes, first_line: int, popts, schema_keys: tuple[str, ...], stop_on_bad: bool,
               space: np.ndarray | None = None) -> BlockResult:
    """Parse + serialize one block (runs in a worker process, or inline with workers=1); the records are built
    in ``space`` if they fit (``block.serialize_parsed``)."""
    pb = parse(block, popts, first_line, MAX_EXAMPLES)
    if stop_on_bad and pb.bad:  # the run stops here: no need to serialize
        framed, lengths = np.zeros(0, np.uint8), np.zeros(0, np.int64)
    else:
        framed, lengths = serialize_parsed(pb, schema_keys, space)
    return BlockResult(framed, lengths, pb.n, pb.blank, pb.skipped, pb.bad, len(block), pb.lines,
                       pb.fallback_lines, row_stats(pb) if isinstance(pb, SparseBlock) else None, _labels(pb),
                       _unordered(pb))


def _unordered(pb) -> int:
    return getattr(pb, "unordered", 0)


def _labels(pb) -> np.ndarray | None:
    """One float32 label per record, or None for multi-label lists."""
    return None if getattr(pb, "label_splits", None) is not None else pb.label


@dataclass
class PackResult:
    """What a worker sends back for a pack of small files: all their records serialized together, and each
    file's own accounting (``BlockResult`` with no bytes)."""

    framed: np.ndarray
    lengths: np.ndarray
    parts: list
    labels: np.ndarray | None = None


def read_whole(path: str) -> bytes:
    try:
        if is_url(path):
            with open_raw(path) as f:
                return f.read()
        return read_regular(path)
    except OSError as exc:
        raise InputError(f"cannot read: {exc}", path=path, offset=0) from None


def work_pack(paths: list[str], popts, schema_keys: tuple[str, ...], stop_on_bad: bool,
              space: np.ndarray | None = None) -> PackResult:
    """Parse small whole files and serialize their records in one call each. Fast path: the files joined and
    parsed at once, when that shows every line is a record (no bad, blank or comment line), so each file's
    accounting is its line count; otherwise each file is parsed on its own (its own line numbers and counts)."""
    blocks = [read_whole(path) for path in paths]
    joined = b"".join(b if not b or b.endswith(b"\n") else b + b"\n" for b in blocks)
    pb = parse(joined, popts, 1, MAX_EXAMPLES)
    lines = [b.count(b"\n") + (1 if b and not b.endswith(b"\n") else 0) for b in blocks]
    unordered = _unordered_per_file(pb, popts, lines)
    if not pb.skipped and not pb.blank and pb.n == sum(lines) and unordered is not None:
        framed, lengths = serialize_parsed(pb, schema_keys, space)
        labels = _labels(pb)
        last = len(blocks) - 1
        parts = [BlockResult(_NONE, _NO_LENGTHS, n, 0, {}, [], len(b), n, pb.fallback_lines if k == last else 0,
                             row_stats(pb) if k == last and isinstance(pb, SparseBlock) else None, None, u)
                 for k, (b, n, u) in enumerate(zip(blocks, lines, unordered))]
        return PackResult(framed, lengths, parts, labels)
    parsed, parts = [], []
    for block in blocks:
        pb = parse(block, popts, 1, MAX_EXAMPLES)
        parsed.append(pb)
        parts.append(BlockResult(_NONE, _NO_LENGTHS, pb.n, pb.blank, pb.skipped, pb.bad, len(block), pb.lines,
                                 pb.fallback_lines, row_stats(pb) if isinstance(pb, SparseBlock) else None, None,
                                 _unordered(pb)))
        if stop_on_bad and pb.bad:  # the run stops here
            return PackResult(_NONE, _NO_LENGTHS, parts)
    whole = concat_records(parsed)
    framed, lengths = serialize_parsed(whole, schema_keys, space)
    return PackResult(framed, lengths, parts, _labels(whole))


_NONE, _NO_LENGTHS = np.zeros(0, np.uint8), np.zeros(0, np.int64)


def _unordered_per_file(pb, popts, lines: list[int]) -> list[int] | None:
    """Each file's rows with positional ids that do not increase, from the joined parse whose rows are the
    files' lines in order; None when only a parse per file can tell (``--pad``/``--truncate`` rows hold fewer
    or more pairs than their ids show)."""
    n = _unordered(pb)
    if len(lines) == 1:
        return [n]
    if not n:
        return [0] * len(lines)
    if popts.pad or popts.truncate or pb.n != sum(lines):
        return None
    flags = np.any(pb.ids[:, 1:] <= pb.ids[:, :-1], axis=1)
    cuts = np.cumsum([0, *lines])
    return [int(flags[a:b].sum()) for a, b in zip(cuts[:-1], cuts[1:])]


def unpack(paths: list[str], pack: PackResult, split: bool):
    """A pack's files one by one, in order: the last carries all the pack's records (their order is the files'
    order either way), or, with ``split``, each file its own."""
    parts = pack.parts
    if split and pack.lengths.shape[0] == sum(p.written for p in parts):  # (not a pack that stopped at a bad line)
        at = 0
        offsets = np.concatenate([[0], np.cumsum(pack.lengths)])
        for path, part in zip(paths, parts):
            lo, hi = at, at + part.written
            at = hi
            part.framed, part.lengths = pack.framed[int(offsets[lo]):int(offsets[hi])], pack.lengths[lo:hi]
            part.labels = None if pack.labels is None else pack.labels[lo:hi]
            yield path, 1, part
        return
    for k, (path, part) in enumerate(zip(paths, parts)):
        if k == len(parts) - 1:
            part.framed, part.lengths, part.labels = pack.framed, pack.lengths, pack.labels
        yield path, 1, part
