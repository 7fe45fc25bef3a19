"""Finalize a two-pass run that split its records by label: one shard set per label under ``OUT/label=<v>/``
and the group manifest ``OUT/index.json`` last, byte for byte as ``prep.split.LabelSplitWriter`` writes them
(``shardset.group``). ``finalize_outcome`` is what an engine calls: a plain set or a group, as the plan says.
"""
from __future__ import annotations

import hashlib
import logging
import os

from ..shardset.group import GroupManifest, PartInfo, group_bytes, part_path, union
from ..shardset.manifest import MANIFEST_NAME, Manifest, ShardInfo, manifest_bytes
from ..shardset.options import ShardOutputOptions
from ..shardset.writer import output_errors
from ..tfrecord.schema import Schema
from ..util.fs import fsync_dir
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
    """Raise the plan's error, or check the results; then per part (label order) give its shards their final
    names ``label=<v>/<prefix>-i-of-n`` and write its manifest; remove the temporary area; write the group
    manifest last. On failure nothing of the group stays under a final name."""
    got = outcome.checked(area.run_id)
    storage, names = area.output(), output.names
    written: list[str] = []
    done: list[tuple[PartInfo, Manifest]] = []
    try:
        with output_errors(area.out):
            at = 0
            for label, n in outcome.parts:
                part = part_path(label)
                local = storage.local_path(part)
                if local is not None:
                    os.makedirs(local, exist_ok=True)
                shards = []
                for i in range(n):
                    r, final = got[at + i], names.format(i, n)
                    storage.publish(r.tmp_name, f"{part}/{final}")
                    written.append(f"{part}/{final}")
                    shards.append(ShardInfo(final, r.records, r.bytes, r.sha256))
                at += n
                m = part_manifest(area.out, label, shards, schema, output, kind, outcome.options)
                data = manifest_bytes(m)
                if local is not None:
                    fsync_dir(local)
                storage.write_bytes_atomic(f"{part}/{MANIFEST_NAME}", data)
                written.append(f"{part}/{MANIFEST_NAME}")
                done.append((PartInfo(label, part, m.records, m.total_bytes, n, hashlib.sha256(data).hexdigest()), m))
            area.cleanup()
            group = GroupManifest(tuple(p for p, _ in done), outcome.records, outcome.inputs, dict(outcome.options),
                                  dict(outcome.extra))
            storage.write_bytes_atomic(MANIFEST_NAME, group_bytes(group))
    except BaseException:
        for name in reversed(written):  # no part without the group
            try:
                storage.delete(name)
            except Exception as exc:  # noqa: BLE001 - the run's own error is what the user sees
                log.warning("could not remove %s from %s: %s", name, area.out, exc)
        for p, _ in done:
            local = storage.local_path(p.path)
            if local is not None:
                try:
                    os.rmdir(local)
                except OSError:
                    pass
        area.cleanup()
        area.release()
        raise
    area.release()
    log.info("wrote %d records in %d per-label shard sets under %s", outcome.records, len(done), area.out)
    return union(group, [m for _, m in done], area.out.rstrip("/"))
