"""A global shuffle of framed records with bounded memory, between a converter and its shard writer.

Every record gets a key from ``(seed, its global index in input order)`` (``keys.record_keys``, a bijection,
so keys are distinct) and the output is the records sorted by key: a pseudo-random permutation that depends
on the seed alone — not on the worker count, the block size or how records are bucketed.

Memory stays bounded whatever the input size (an external bucket sort):

1. *scatter*: records arrive in input order; each goes to bucket ``key >> (64 - bits)`` (the key's top bits, so
   buckets hold consecutive key ranges); buckets are buffered in memory up to a budget and appended to
   temporary files (record bytes, and per record its key, global index, length and label);
2. *gather*: bucket by bucket, in key order, the bucket's records are loaded, sorted by key and handed to the
   writer. A bucket larger than its share of the budget is split again by the next key bits first.

Temporary files live in one directory (under the output, or ``tmp_dir``) that is removed on success, on
failure and on interrupt (``close``). The report gives quality figures for the manifest: the rank correlation
between input and output position (about 0 for a good shuffle, summed exactly) and, for labelled records, the
largest deviation of any shard's label mix from the global mix — figures of the data and the seed alone, so the
two-pass engines (``converters.engines``), which sort the same keys their own way, report the same; how many
buckets were sorted, and the largest, go to the log.
"""
from __future__ import annotations

import contextlib
import logging
import math
import os
import shutil
import uuid
from dataclasses import dataclass, field
from typing import Iterator

import numpy as np

from ..util.checks import set_int
from ..util.errors import OutputError
from ..util.fs import make_dirs
from ..util.units import format_size
from .keys import record_keys
from .labels import label_bits
from .records import take_records

__all__ = ["WriteShuffleOptions", "ShuffleSink", "DEFAULT_SHUFFLE_MEMORY", "METHOD", "MIN_MIX_SHARD_RECORDS",
           "square_sum"]

log = logging.getLogger(__name__)

DEFAULT_SHUFFLE_MEMORY = 1 << 30     # 1 GiB held at most for buffers and the bucket being sorted
METHOD = "external-bucket-sort-by-keyed-hash"
MIN_MIX_SHARD_RECORDS = 1000         # shards smaller than this are left out of the label-mix figure
_MAX_BITS = 12                       # at most 4096 buckets per level
_META = np.dtype([("key", "<u8"), ("index", "<u8"), ("length", "<i8")])
_TMP_PREFIX = ".tfpipe-tmp-shuffle-"


@dataclass(frozen=True)
class WriteShuffleOptions:
    """``seed`` decides the order; ``memory`` bounds the bytes held (buffers and the bucket being sorted);
    ``tmp_dir`` holds the bucket files (default: under the output directory, or the system temp directory
    for ``s3://`` outputs)."""

    seed: int
    memory: int = DEFAULT_SHUFFLE_MEMORY
    tmp_dir: str | None = None

    def __post_init__(self):
        set_int(self, "seed", minimum=0, name="shuffle seed")
        set_int(self, "memory", minimum=1 << 20, name="shuffle memory", must="at least 1 MiB")

    def to_json(self) -> dict:
        return {"seed": self.seed, "method": METHOD}


@dataclass
class _Bucket:
    data: list = field(default_factory=list)    # uint8 arrays
    meta: list = field(default_factory=list)    # _META arrays
    labels: list = field(default_factory=list)  # float32 arrays
    nbytes: int = 0


class ShuffleSink:
    """``write`` records in input order (framed bytes, framed lengths, optional float32 labels), then
    ``finish`` hands them to ``writer`` (anything with ``write(framed, lengths[, labels])`` — labels when the
    records have them — and ``shard_records()``) in key order and returns the quality report. Use as a context manager (temporary files removed on exit)."""

    def __init__(self, writer, options: WriteShuffleOptions, *, tmp_root: str, expected_bytes: int | None = None):
        self.writer = writer
        self.options = options
        base = options.tmp_dir or tmp_root
        self._made: list[str] = []  # directories made for ``base``: removed again on close (nothing left behind)
        self.dir = os.path.join(base, f"{_TMP_PREFIX}{uuid.uuid4().hex[:12]}")
        with _named(base):
            make_dirs(base, self._made)
            os.mkdir(self.dir)
        self.bits = _bits_for(expected_bytes, options.memory)
        self._buckets: dict[int, _Bucket] = {}
        self._buffered = 0
        self._flush_at = max(1 << 20, options.memory // 4)
        self.records = 0
        self.labelled: bool | None = None
        log.debug("shuffle: %d bucket(s) in %s", 1 << self.bits, self.dir)

    # -- scatter ------------------------------------------------------------------------------------
    def write(self, framed, lengths, labels=None) -> None:
        lengths = np.asarray(lengths, dtype=np.int64)
        n = int(lengths.shape[0])
        if n == 0:
            return
        if self.labelled is None:
            self.labelled = labels is not None
        elif self.labelled != (labels is not None):
            raise ValueError("labels must be given for every batch or for none")
        index = np.arange(self.records, self.records + n, dtype=np.uint64)
        keys = record_keys(self.options.seed, index, "shuffle")
        self.records += n
        self._scatter(np.frombuffer(framed, np.uint8) if not isinstance(framed, np.ndarray) else framed,
                      lengths, keys, index, None if labels is None else np.asarray(labels, np.float32),
                      self.bits, 0, self._buckets)
        if self._buffered >= self._flush_at:
            self._flush(self._buckets, self.dir)

    def _scatter(self, data, lengths, keys, index, labels, bits: int, shift: int, buckets: dict) -> None:
        bucket = _bucket_of(keys, bits, shift)
        order = np.argsort(bucket, kind="stable")
        sorted_b = bucket[order]
        cuts = np.flatnonzero(np.diff(sorted_b)) + 1
        for part in np.split(order, cuts):
            b = int(bucket[part[0]])
            framed, lens = take_records(data, lengths, part)
            meta = np.empty(part.shape[0], _META)
            meta["key"], meta["index"], meta["length"] = keys[part], index[part], lens
            slot = buckets.setdefault(b, _Bucket())
            slot.data.append(framed)
            slot.meta.append(meta)
            if labels is not None:
                slot.labels.append(labels[part])
            slot.nbytes += framed.nbytes + meta.nbytes
            self._buffered += framed.nbytes + meta.nbytes

    def _flush(self, buckets: dict, directory: str) -> None:
        with _named(directory):
            self._flush_to(buckets, directory)

    def _flush_to(self, buckets: dict, directory: str) -> None:
        for b, slot in buckets.items():
            if not slot.meta:
                continue
            stem = os.path.join(directory, f"{b:05d}")
            for suffix, parts in ((".data", slot.data), (".meta", slot.meta), (".label", slot.labels)):
                if parts:
                    with open(stem + suffix, "ab") as f:
                        for p in parts:
                            f.write(memoryview(p).cast("B"))
            slot.data, slot.meta, slot.labels = [], [], []
        self._buffered = 0

    # -- gather -------------------------------------------------------------------------------------
    def finish(self) -> dict:
        """Write every record to the writer in key order; return the shuffle's manifest entry."""
        self._flush(self._buckets, self.dir)
        self._written = 0
        self._buckets_read = 0
        self._largest = 0
        self._sq = 0  # sum of squared position differences, exact (an int): the same whatever the bucketing
        self._mix: dict[tuple[int, int], int] = {}
        self._label_ids: dict[int, int] = {}
        self._gather_dir(self.dir, self.bits, 0)  # the writer's own errors name its output
        if self._written != self.records:
            raise RuntimeError(f"shuffle lost records: {self.records} in, {self._written} out")
        log.info("shuffle: %d record(s) sorted in %d bucket(s), the largest %d bytes", self._written,
                 self._buckets_read, self._largest)
        return self._report()

    def _gather_dir(self, directory: str, bits: int, shift: int) -> None:
        share = max(1 << 20, self.options.memory // 3)
        for b in range(1 << bits):
            stem = os.path.join(directory, f"{b:05d}")
            if not os.path.exists(stem + ".meta"):
                continue
            size = os.path.getsize(stem + ".data") + os.path.getsize(stem + ".meta")
            if size > share and shift + bits < 64 and os.path.getsize(stem + ".meta") > _META.itemsize:
                self._resplit(stem, shift + bits)
            else:
                self._emit(stem)
            for suffix in (".data", ".meta", ".label"):
                if os.path.exists(stem + suffix):
                    os.unlink(stem + suffix)

    def _resplit(self, stem: str, shift: int) -> None:
        """A bucket over its share of memory: scatter it again by the next key bits, chunk by chunk."""
        sub = stem + ".split"
        with _named(sub):
            os.makedirs(sub)
        bits = min(_MAX_BITS, 64 - shift, max(1, math.ceil(math.log2(max(2, os.path.getsize(stem + ".data")
                                                                              / max(1, self.options.memory // 4))))))
        log.debug("shuffle: bucket %s is %s, splitting it %d ways", stem, format_size(os.path.getsize(stem + ".data")),
                  1 << bits)
        buckets: dict[int, _Bucket] = {}
        chunk = max(1, (self.options.memory // 8) // _META.itemsize)
        with open(stem + ".meta", "rb") as fm, open(stem + ".data", "rb") as fd:
            fl = open(stem + ".label", "rb") if os.path.exists(stem + ".label") else None
            try:
                while True:
                    meta = np.fromfile(fm, dtype=_META, count=chunk)
                    if meta.shape[0] == 0:
                        break
                    data = np.frombuffer(fd.read(int(meta["length"].sum())), np.uint8)
                    labels = np.fromfile(fl, np.float32, count=meta.shape[0]) if fl else None
                    self._scatter(data, meta["length"], meta["key"], meta["index"], labels, bits, shift, buckets)
                    if self._buffered >= self._flush_at:
                        self._flush(buckets, sub)
            finally:
                if fl:
                    fl.close()
        self._flush(buckets, sub)
        self._gather_dir(sub, bits, shift)
        os.rmdir(sub)

    def _emit(self, stem: str) -> None:
        meta = np.fromfile(stem + ".meta", dtype=_META)
        data = np.fromfile(stem + ".data", dtype=np.uint8)
        self._buckets_read += 1
        self._largest = max(self._largest, data.nbytes + meta.nbytes)
        order = np.argsort(meta["key"], kind="stable")
        framed, lengths = take_records(data, meta["length"], order)
        labels = np.fromfile(stem + ".label", np.float32)[order] if os.path.exists(stem + ".label") else None
        start = self._written
        if labels is None:
            self.writer.write(framed, lengths)
        else:  # the writer gets the labels too (to split by label)
            self.writer.write(framed, lengths, labels)
        m = order.shape[0]
        self._written += m
        self._sq += square_sum(np.arange(start, start + m, dtype=np.int64) - meta["index"][order].astype(np.int64))
        if labels is not None:
            self._count_mix(labels, start)

    def _count_mix(self, labels: np.ndarray, start: int) -> None:
        """Label counts per output shard (a record written to the open shard stays in it); nothing when the
        writer has no single sequence of shards (records split by label)."""
        records = self.writer.shard_records()
        if records is None:
            return
        bounds = np.cumsum(records)
        shard = np.searchsorted(bounds, np.arange(start, start + labels.shape[0]), side="right")
        keys = label_bits(labels)
        for k in np.unique(keys):
            lid = self._label_ids.setdefault(int(k), len(self._label_ids))
            for s, c in zip(*np.unique(shard[keys == k], return_counts=True)):
                self._mix[(int(s), lid)] = self._mix.get((int(s), lid), 0) + int(c)

    def _report(self) -> dict:
        n = self._written
        rho = 1.0 - 6 * self._sq / (n * (n * n - 1)) if n > 1 else 0.0  # integers: exactly rounded division
        report = {"seed": self.options.seed, "method": METHOD, "records": n, "rank_correlation": round(rho, 6)}
        if self._mix:
            shards = np.asarray(self.writer.shard_records(), dtype=np.int64)
            counts = np.zeros((shards.shape[0], len(self._label_ids)), dtype=np.int64)
            for (s, lid), c in self._mix.items():
                counts[s, lid] += c
            overall = counts.sum(axis=0) / max(1, n)
            big = shards >= MIN_MIX_SHARD_RECORDS
            dev = (np.abs(counts[big] / shards[big, None] - overall).max() if big.any() else 0.0)
            report["label_mix_max_deviation"] = round(float(dev), 6)
            report["label_mix_shards"] = int(big.sum())
            report["label_mix_min_shard_records"] = MIN_MIX_SHARD_RECORDS
        return report

    # -- cleanup ------------------------------------------------------------------------------------
    def close(self) -> None:
        shutil.rmtree(self.dir, ignore_errors=True)
        for d in reversed(self._made):
            try:
                os.rmdir(d)
            except OSError:
                pass
        self._made = []

    def __enter__(self) -> "ShuffleSink":
        return self

    def __exit__(self, *exc) -> None:
        self.close()


@contextlib.contextmanager
def _named(where: str) -> Iterator[None]:
    """An OS error with the shuffle's temporary files (no space left, a file where a directory should be)
    names the path (``--tmp-dir``) in its one line."""
    try:
        yield
    except OSError as exc:
        path = exc.filename if exc.filename is not None else where
        raise OutputError(f"cannot write the shuffle's temporary files in {path}: "
                          f"{exc.strerror or exc} (choose another --tmp-dir)") from exc


def square_sum(d: np.ndarray) -> int:
    """The exact sum of squares of int64 differences (|d| < 2**32), as a Python int: the squares split into
    32-bit halves summed apart, so no rounding and no overflow, whatever the order the terms come in."""
    a = np.abs(np.asarray(d, dtype=np.int64)).astype(np.uint64)
    sq = a * a
    hi, lo = int((sq >> np.uint64(32)).sum()), int((sq & np.uint64(0xFFFFFFFF)).sum())
    return (hi << 32) + lo


def _bits_for(expected_bytes: int | None, memory: int) -> int:
    """Top key bits for the first bucket level: buckets of about a quarter of the memory budget."""
    if not expected_bytes:
        return 8
    want = expected_bytes / max(1, memory // 4)
    return int(min(_MAX_BITS, max(0, math.ceil(math.log2(want)) if want > 1 else 0)))


def _bucket_of(keys: np.ndarray, bits: int, shift: int) -> np.ndarray:
    if bits == 0:
        return np.zeros(keys.shape[0], dtype=np.int64)
    return ((keys << np.uint64(shift)) >> np.uint64(64 - bits)).astype(np.int64) if shift else \
        (keys >> np.uint64(64 - bits)).astype(np.int64)
