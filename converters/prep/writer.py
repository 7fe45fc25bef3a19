"""``PrepWriter``: what a converter writes its records to. Without preparation it is a ``ShardSetWriter``;
with it, records pass balance (drop), shuffle (reorder) and split (route by label), in that order, before they
reach the shard writer(s). Deterministic for the seeds, independent of the worker count.

A converter that balances reads its input twice: ``count(labels)`` for every record first, then ``start()``,
then ``write`` as usual. ``write`` returns how many of the given records balancing sampled out, so the caller
can account them to their input file (reason ``sampled_out``)."""
from __future__ import annotations

import logging
import os
import tempfile
import uuid
from typing import Any, Iterable

import numpy as np

from ..shardset.manifest import InputStats, Manifest
from ..shardset.options import ShardOutputOptions
from ..shardset.writer import ShardSetWriter
from ..storage import is_s3
from ..tfrecord.schema import Schema
from ..util.fs import make_dirs
from .balance import LabelCounts, Thresholds
from .options import PrepOptions
from .records import take_records
from .shuffle import ShuffleSink
from .split import LabelSplitWriter

__all__ = ["PrepWriter"]

log = logging.getLogger(__name__)


class _Labelled:
    """The shuffle's output goes to the split writer with labels, or to a shard writer without them."""

    def __init__(self, target, split: bool):
        self.target, self.split = target, split

    def write(self, framed, lengths, labels=None):
        if self.split:
            self.target.write(framed, lengths, labels)
        else:
            self.target.write(framed, lengths)

    def shard_records(self):
        return None if self.split else self.target.shard_records()


class PrepWriter:
    """Records in input order (``write``), shards out (``finish``). ``prep`` None or inactive: a plain
    ``ShardSetWriter``. ``expected_bytes`` (the input size, when known) sizes the shuffle's buckets."""

    def __init__(self, out: str, output: ShardOutputOptions, prep: PrepOptions | None = None, *,
                 overwrite: bool = False, expected_bytes: int | None = None, **storage_options):
        self.prep = prep if prep is not None and prep.active else PrepOptions()
        self.out = str(out)
        if self.prep.split_by_label:
            self.target = LabelSplitWriter(self.out, output, overwrite=overwrite, **storage_options)
        else:
            self.target = ShardSetWriter(self.out, output, overwrite=overwrite, **storage_options)
        self._counts: LabelCounts | None = None
        self._thresholds: Thresholds | None = None
        self._shuffle: ShuffleSink | None = None
        self._tmp_root = self._temp_root()
        try:
            if self.prep.balance is not None:
                self._made = make_dirs(self._tmp_root)  # removed again when the run ends (--tmp-dir in --out)
                self._counts = LabelCounts(self.prep.balance,
                                           os.path.join(self._tmp_root, f".tfpipe-tmp-labels-{uuid.uuid4().hex[:12]}"))
            if self.prep.shuffle is not None:
                self._shuffle = ShuffleSink(_Labelled(self.target, self.prep.split_by_label), self.prep.shuffle,
                                            tmp_root=self._tmp_root, expected_bytes=expected_bytes)
        except BaseException:
            self.abort()
            raise
        self._index = 0     # records offered so far (balance keys come from this index)
        self.records = 0    # records kept

    def _temp_root(self) -> str:
        if self.prep.shuffle is not None and self.prep.shuffle.tmp_dir:
            return self.prep.shuffle.tmp_dir
        if is_s3(self.out) or "://" in self.out:
            return tempfile.gettempdir()
        return self.out

    # -- the balance's first pass -----------------------------------------------------------------------
    @property
    def needs_counts(self) -> bool:
        """Whether the caller must ``count`` every record's label first (balancing) and then ``start``."""
        return self._counts is not None and self._thresholds is None

    def count(self, labels) -> None:
        self._counts.add(np.asarray(labels, dtype=np.float32))

    def start(self) -> None:
        """After the counting pass: the per-label thresholds (exact counts)."""
        self._thresholds = self._counts.thresholds()

    # -- records ----------------------------------------------------------------------------------------
    def write(self, framed, lengths, labels=None) -> int:
        """Take records in input order; returns how many balancing sampled out."""
        lengths = np.asarray(lengths, dtype=np.int64)
        n = int(lengths.shape[0])
        if n == 0:
            return 0
        if self.prep.needs_labels and labels is None:
            raise ValueError(f"{self.prep.describe()} needs every record's label")
        first, self._index = self._index, self._index + n
        dropped = 0
        if self._thresholds is not None:
            keep = self._thresholds.keep(labels, first)
            dropped = n - int(keep.sum())
            if dropped:
                sel = np.flatnonzero(keep)
                framed, lengths = take_records(framed, lengths, sel)
                labels = np.asarray(labels)[sel]
        if lengths.shape[0]:
            self.records += int(lengths.shape[0])
            if self._shuffle is not None:
                self._shuffle.write(framed, lengths, labels)
            elif self.prep.split_by_label:
                self.target.write(framed, lengths, labels)
            else:
                self.target.write(framed, lengths)
        return dropped

    def finish(self, *, schema: Schema, inputs: Iterable[InputStats] = (), options: dict[str, Any] | None = None,
               kind: str = "libsvm", extra: dict[str, Any] | None = None) -> Manifest:
        """Shuffle (gather), then finish the shard writer(s); the manifest records what preparation did."""
        options, extra = {**(options or {}), **self.prep.to_json()}, dict(extra or {})
        try:
            if self._shuffle is not None:
                extra["shuffle"] = self._shuffle.finish()
                self._shuffle.close()
            if self._thresholds is not None:
                extra["balance"] = self._thresholds.report()
            manifest = self.target.finish(schema=schema, inputs=inputs, options=options, kind=kind, extra=extra)
        except BaseException:
            self.abort()
            raise
        self._remove_made()
        return manifest

    def _remove_made(self) -> None:
        if getattr(self, "_counts", None) is not None:
            self._counts.close()
        for d in reversed(getattr(self, "_made", [])):
            try:
                os.rmdir(d)
            except OSError:
                pass
        self._made = []

    def abort(self) -> None:
        if getattr(self, "_shuffle", None) is not None:
            self._shuffle.close()
        self._remove_made()
        self.target.abort()

    def __enter__(self) -> "PrepWriter":
        return self

    def __exit__(self, exc_type, exc, tb) -> None:
        if exc_type is not None:
            self.abort()
