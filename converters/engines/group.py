"""Finalize a two-pass run that split its records by label: one shard set per label under ``OUT/label=<v>/``
and the group manifest ``OUT/index.json`` last, byte for byte as ``prep.split.LabelSplitWriter`` writes them
(``shardset.group``). ``finalize_outcome`` is what an engine calls: a plain set or a group, as the plan says.
"""
from __future__ import annotations

import hashlib
import logging

from ..shardset.commit import Move, commit_set
from ..shardset.group import GroupManifest, PartInfo, group_bytes, part_path, union
from ..shardset.manifest import MANIFEST_NAME, Manifest, ShardInfo, manifest_bytes
from ..shardset.options import ShardOutputOptions
from ..shardset.writer import output_errors
from ..tfrecord.schema import Schema
from .area import RunArea
from .core import Outcome, finalize

__all__ = ["finalize_outcome", "finalize_group", "part_manifest"]

log = logging.getLogger(__name__)


def finalize_outcome(area: RunArea, output: ShardOutputOptions, schema: Schema, kind: str, outcome: Outcome
                     ) -> Manifest:
    """``finalize_group`` when the run split by label, else ``core.finalize``."""
    if outcome.parts:
        return finalize_group(area, output, schema, kind, outcome)
    return finalize(area, output, schema, kind, outcome)


def part_manifest(out: str, label: str, shards: list[ShardInfo], schema: Schema, output: ShardOutputOptions,
                  kind: str, options: dict) -> Manifest:
    """A part's own manifest, as the split writer's part writer writes it."""
    return Manifest(records=sum(s.records for s in shards), shards=tuple(shards), schema=schema, inputs=(),
                    options={**options, "group_part": True}, compression=output.compression, kind=kind,
                    extra={"label": label}, location=f"{out.rstrip('/')}/{part_path(label)}")


def finalize_group(area: RunArea, output: ShardOutputOptions, schema: Schema, kind: str, outcome: Outcome
                   ) -> Manifest:
    """Raise the plan's error, or check the results; then the one commit path (``shardset.commit``): per part
    (label order) its shards under ``label=<v>/<prefix>-i-of-n`` and its manifest, the temporary area
    removed, the group manifest last. On failure nothing of the group stays under a final name and a group
    committed there before is as it was."""
    try:
        got = outcome.checked(area.run_id)
        names = output.names
        moves: list[Move] = []
        written: list[tuple[str, bytes]] = []
        done: list[tuple[PartInfo, Manifest]] = []
        at = 0
        for label, n in outcome.parts:
            part = part_path(label)
            shards = []
            for i in range(n):
                r, final = got[at + i], names.format(i, n)
                moves.append(Move(r.tmp_name, f"{part}/{final}", r.bytes))
                shards.append(ShardInfo(final, r.records, r.bytes, r.sha256))
            at += n
            m = part_manifest(area.out, label, shards, schema, output, kind, outcome.options)
            data = manifest_bytes(m)
            written.append((f"{part}/{MANIFEST_NAME}", data))
            done.append((PartInfo(label, part, m.records, m.total_bytes, n, hashlib.sha256(data).hexdigest()), m))
        group = GroupManifest(tuple(p for p, _ in done), outcome.records, outcome.inputs, dict(outcome.options),
                              dict(outcome.extra))
        with output_errors(area.out):
            commit_set(area.output(), moves, group_bytes(group), run_id=area.run_id, parts=written,
                       before_manifest=area.cleanup, where=area.out)
    finally:
        area.cleanup()
        area.release()
    log.info("wrote %d records in %d per-label shard sets under %s", outcome.records, len(done), area.out)
    return union(group, [m for _, m in done], area.out.rstrip("/"))
