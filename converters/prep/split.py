"""One shard set per label: ``OUT/label=<v>/`` (each a complete set with its own manifest) and a group manifest
at ``OUT/index.json``, written last, that lists the parts and holds the whole conversion's accounting."""
from __future__ import annotations

import logging
import os
from collections import OrderedDict
from typing import Any, Iterable

import numpy as np

from ..shardset.commit import Move, commit_set
from ..shardset.group import GroupManifest, PartInfo, group_bytes, part_path, union
from ..shardset.manifest import MANIFEST_NAME, InputStats, Manifest, manifest_bytes
from ..shardset.options import ShardOutputOptions
from ..shardset.output import new_run_id, output_errors, prepare_output, release_claim
from ..storage import open_storage
from ..shardset.writer import ShardSetWriter
from ..tfrecord.schema import Schema
from .labels import bits_name, label_bits, label_order
from .records import take_records

__all__ = ["LabelSplitWriter", "max_open_parts"]

log = logging.getLogger(__name__)


def max_open_parts() -> int:
    """How many parts keep their open shard's file open at once: a quarter of the soft open-files limit,
    4..256 (the others are suspended: closed, reopened to append on their next record)."""
    try:
        import resource

        soft = resource.getrlimit(resource.RLIMIT_NOFILE)[0]
    except (ImportError, OSError, ValueError):
        return 64
    if soft == resource.RLIM_INFINITY or soft <= 0:
        return 256
    return max(4, min(256, soft // 4))


class LabelSplitWriter:
    """Route records to one ``ShardSetWriter`` per label (created on a label's first record), keeping each
    label's records in the order they come. ``finish`` finishes every part, then writes the group manifest.

    Open files stay bounded whatever the number of labels: the group's claim covers its parts (a part takes
    no claim of its own), and at most ``max_open_parts()`` parts hold their open shard's file descriptor (the
    least recently written ones are suspended)."""

    def __init__(self, out: str, output: ShardOutputOptions, *, overwrite: bool = False, **storage_options):
        self.out = str(out).rstrip("/")
        self.output = output
        self.storage_options = storage_options
        self.run_id = new_run_id()
        self.storage = prepare_output(self.out, overwrite=overwrite, run_id=self.run_id,
                                      **storage_options)  # claimed; checked
        self.writers: dict[int, ShardSetWriter] = {}
        self.records = 0
        self._done = False
        self._open: OrderedDict[int, None] = OrderedDict()  # parts holding a file descriptor, oldest first
        self._max_open = max_open_parts()
        self._made: list[str] = []  # part directories this run created (removed again on abort)

    def _writer(self, bits: int) -> ShardSetWriter:
        w = self.writers.get(bits)
        if w is None:
            part = f"{self.out}/{part_path(bits_name(bits))}"
            local = self.storage.local_path(part_path(bits_name(bits)))
            if local is not None and not os.path.exists(local):
                self._made.append(local)
            # the group's claim covers its parts; a part of the old group stays until the group commits
            w = ShardSetWriter(part, self.output, storage=open_storage(part, **self.storage_options),
                               run_id=self.run_id)
            self.writers[bits] = w
        self._open[bits] = None
        self._open.move_to_end(bits)
        while len(self._open) > self._max_open:
            old, _ = self._open.popitem(last=False)
            self.writers[old].suspend()
        return w

    def write(self, framed, lengths, labels) -> None:
        if labels is None:
            raise ValueError("splitting by label needs every record's label")
        lengths = np.asarray(lengths, dtype=np.int64)
        bits = label_bits(labels)
        for b in np.unique(bits):
            sel = np.flatnonzero(bits == b)
            data, lens = take_records(framed, lengths, sel) if sel.shape[0] != lengths.shape[0] else (framed,
                                                                                                     lengths)
            self._writer(int(b)).write(data, lens)
        self.records += int(lengths.shape[0])

    def finish(self, *, schema: Schema, inputs: Iterable[InputStats] = (), options: dict[str, Any] | None = None,
               kind: str = "libsvm", extra: dict[str, Any] | None = None) -> Manifest:
        """Finish every part (label order), then write the group manifest last; returns the group read as one
        set (``group.union``). On failure nothing of the group stays under a final name."""
        try:
            order = sorted(self.writers, key=label_order)
            part_options = {**(options or {}), "group_part": True}
            moves: list[Move] = []
            written: list[tuple[str, bytes]] = []
            done: list[tuple[str, Manifest]] = []
            infos = []
            for b in order:
                name = bits_name(b)
                path, w = part_path(name), self.writers[b]
                staged, shards = w.seal()
                m = w.manifest(shards, schema=schema, inputs=(), options=part_options, kind=kind,
                               extra={"label": name})
                data = manifest_bytes(m)
                moves += [Move(f"{path}/{mv.tmp}", f"{path}/{mv.final}", mv.nbytes) for mv in staged]
                written.append((f"{path}/{MANIFEST_NAME}", data))
                infos.append(PartInfo(name, path, m.records, m.total_bytes, len(m.shards), _sha256(data)))
                done.append((name, m))
            group = GroupManifest(tuple(infos), self.records, tuple(inputs), dict(options or {}), dict(extra or {}))
            with output_errors(self.out):
                commit_set(self.storage, moves, group_bytes(group), run_id=self.run_id, parts=written,
                           where=self.out)
        except BaseException:
            self.abort()
            raise
        for w in self.writers.values():
            w.committed()
        self._done = True
        self._release()
        log.info("wrote %d records in %d per-label shard sets under %s", self.records, len(done), self.out)
        return union(group, [m for _, m in done], self.out)

    def abort(self) -> None:
        for w in self.writers.values():
            w.abort()
        for path in self._made:  # a part directory this run created, also one whose writer never started
            try:
                os.rmdir(path)
            except OSError:
                pass
        self._release()

    def _release(self) -> None:
        release_claim(self.storage)

    def __enter__(self) -> "LabelSplitWriter":
        return self

    def __exit__(self, *exc) -> None:
        if not self._done:
            self.abort()


def _sha256(data: bytes) -> str:
    import hashlib

    return hashlib.sha256(data).hexdigest()
