"""A column's vocabulary from its merged counts, in bounded memory: the vocabulary file (values in id order) and
the lookup table pass 1 reads (keys in ascending order with their ids), without holding the vocabulary.

Ids are 1..V by descending count, ties by descending bytes: the order of Keras ``StringLookup.adapt`` and
tf.Transform's ``vocabulary``, so either gives the same ids over the same values. ``merge_runs`` yields the
counted values in ascending byte order, so a value's id is fixed by two numbers: how many kept values have a
higher count, and how many with its count come after it. ``write_vocabulary`` reads the merge twice:

1. a histogram of the kept values per count (how many, and their bytes in the file): at most one entry per
   distinct count, which is small (a count ``c`` needs ``c`` rows, so ``n`` rows have fewer than ``sqrt(2n)``);
2. each value's id (its count's last id less the values with that count seen so far) and its line's byte
   offset in the file (each count's lines filled from the end of its range backwards), so each run of values
   sharing a count is written, in descending order, with one ``pwrite``, and the
   ``(key, id)`` pairs appended in key order: the sorted table ``disklookup.DiskLookup`` reads. Its keys are
   uint64 when every kept value has at most 8 bytes, else the values at the width of the longest kept one
   (``vocab.table_keys``; the histogram's read finds that width). Values longer than ``vocablong.LONG`` bytes
   are not in it: they come in ``object`` chunks of the merge and go to their own table, handed to
   ``append_table`` as an ``object`` array (``vocablong.table_parts``).

Memory is the merge's chunks and the histogram."""
from __future__ import annotations

import hashlib
import os
from dataclasses import dataclass
from typing import Callable, Iterator

import numpy as np

from .vocab import table_keys
from .vocablong import LONG, table_parts, value_lengths

__all__ = ["VocabFile", "count_histogram", "write_vocabulary"]

Merged = Callable[[], Iterator[tuple[np.ndarray, np.ndarray]]]


@dataclass(frozen=True)
class VocabFile:
    """A written vocabulary: ``size`` values (V), ``nbytes`` and ``sha256`` of its file, ``distinct`` values
    counted, ``width``: the bytes of its longest value."""

    size: int
    nbytes: int
    sha256: str
    distinct: int
    width: int


def _lengths(values: np.ndarray) -> np.ndarray:
    """Each value's line length in the file (its bytes and a newline)."""
    return value_lengths(values) + 1


def _lines(values: np.ndarray, lens: np.ndarray) -> np.ndarray:
    """The values' lines joined (each value's bytes and a newline; ``lens``: their ``_lengths``) as one uint8
    array: no Python object per value."""
    from .joinkernel import join_lines

    if values.dtype == object:
        return np.frombuffer(b"".join(v + b"\n" for v in values.tolist()), np.uint8)
    n, w = values.size, values.dtype.itemsize
    return join_lines(np.ascontiguousarray(values).view(np.uint8).reshape(n, w), lens)


def _per_count(counts: np.ndarray, lens: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The distinct ``counts`` ascending, how many values have each, and their lines' bytes: one ``bincount``
    over the counts when the largest is small beside the values (a few rows' counts, the usual case), else
    through a sort."""
    top = int(counts.max())
    if top <= max(4 * counts.size, 1 << 16):
        n = np.bincount(counts, minlength=top + 1)
        b = np.bincount(counts, weights=lens, minlength=top + 1)
        u = np.flatnonzero(n)
        return u, n[u], b[u].astype(np.int64)   # exact: < 2**53
    u, inv = np.unique(counts, return_inverse=True)
    return (u, np.bincount(inv, minlength=u.size),
            np.bincount(inv, weights=lens, minlength=u.size).astype(np.int64))


def count_histogram(merged: Merged, min_count: int) -> tuple[np.ndarray, np.ndarray, np.ndarray, int, int]:
    """``(counts, values, bytes, distinct, width)``: the counts of kept values in descending order, how many
    values have each and their lines' bytes, the distinct values counted, and the longest kept value's bytes."""
    return _histogram(merged, min_count)[:5]


def _histogram(merged: Merged, min_count: int) -> tuple[np.ndarray, np.ndarray, np.ndarray, int, int, int]:
    """``count_histogram``'s, and the longest kept value of at most ``vocablong.LONG`` bytes."""
    hist: dict[int, list[int]] = {}
    distinct = width = short = 0
    for v, c in merged():
        distinct += int(v.size)
        keep = c >= min_count
        if not keep.any():
            continue
        lens = _lengths(v[keep])
        width = max(width, int(lens.max()) - 1)
        short = max(short, int(lens[lens <= LONG + 1].max(initial=0)) - 1)
        u, n, b = _per_count(c[keep], lens)
        for cnt, k, nb in zip(u.tolist(), n.tolist(), b.tolist()):
            e = hist.setdefault(cnt, [0, 0])
            e[0] += k
            e[1] += nb
    counts = np.array(sorted(hist, reverse=True), np.int64)
    return (counts, np.array([hist[c][0] for c in counts.tolist()], np.int64),
            np.array([hist[c][1] for c in counts.tolist()], np.int64), distinct, width, short)


def write_vocabulary(merged: Merged, min_count: int, text_path: str,
                     append_table: Callable[[np.ndarray, np.ndarray], None]) -> VocabFile:
    """Write the vocabulary file at ``text_path`` (local) and hand the table's ``(keys, ids)`` to
    ``append_table`` chunk by chunk in ascending key order; ``merged`` gives a fresh merge each call."""
    counts, nvals, nbytes, distinct, width, short = _histogram(merged, min_count)
    if nvals.sum() >= 1 << 32:
        raise ValueError(f"a vocabulary of {int(nvals.sum()):,} values: at most 2**32 - 1 per column")
    first_id = 1 + np.concatenate([[0], np.cumsum(nvals)[:-1]]).astype(np.int64)
    first_byte = np.concatenate([[0], np.cumsum(nbytes)[:-1]]).astype(np.int64)
    ascending = counts[::-1]  # for searchsorted
    seen = np.zeros(counts.size, np.int64)
    written = np.zeros(counts.size, np.int64)
    total = int(nbytes.sum())
    fd = os.open(text_path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | getattr(os, "O_CLOEXEC", 0), 0o644)
    try:
        os.ftruncate(fd, total)
        for v, c in merged():
            keep = c >= min_count
            if not keep.any():
                continue
            v, c = v[keep], c[keep]
            slot = counts.size - 1 - np.searchsorted(ascending, c)  # index of each value's count, descending
            if counts.size <= 1 << 16:   # numpy sorts 16-bit integers stably by radix: linear
                slot = slot.astype(np.uint16)
            back = np.ascontiguousarray(slot[::-1])                # keys descending: a stable sort by count
            order = v.size - 1 - np.argsort(back, kind="stable")   # keeps them so within a count
            s = slot[order].astype(np.int64)
            lens = _lengths(v)[order]
            starts = np.flatnonzero(np.diff(s, prepend=-1))       # where each count's group begins
            groups = s[starts]
            sizes = np.diff(np.append(starts, s.size))
            # a group's ids end where the ids of its values in earlier chunks (higher keys) begin
            base = first_id[groups] + nvals[groups] - seen[groups] - (starts + sizes)
            ids = np.empty(v.size, np.int64)
            ids[order] = np.repeat(base, sizes) + np.arange(s.size)
            group_bytes = np.add.reduceat(lens, starts)
            begin = np.cumsum(group_bytes) - group_bytes           # each group's place in the chunk's lines
            blob = memoryview(_lines(v[order], lens))
            offsets = first_byte[groups] + nbytes[groups] - written[groups] - group_bytes  # and in the file
            for a, n, off in zip(begin.tolist(), group_bytes.tolist(), offsets.tolist()):
                os.pwrite(fd, blob[a:a + n], off)
            seen[groups] += sizes
            written[groups] += group_bytes
            for keys, part in table_parts(v, ids.astype(np.uint32), short, table_keys):
                append_table(keys, part)
        os.fsync(fd)
    finally:
        os.close(fd)
    if not np.array_equal(seen, nvals) or not np.array_equal(written, nbytes):
        raise RuntimeError(f"the vocabulary's second read of the counts differs from its first ({text_path})")
    h = hashlib.sha256()
    with open(text_path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return VocabFile(int(nvals.sum()), total, h.hexdigest(), distinct, width)
