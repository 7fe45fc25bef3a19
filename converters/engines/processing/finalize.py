"""The finalizer's steps, shared by every way a Processing job splits a conversion: check the output
location, then the one commit path (``shardset.commit``: the shards under their final names, the manifest
last, a set committed there before replaced only then), then remove the work area.

Each step can be repeated: a finalize interrupted half-way is finished by a rerun of the job (a shard already
moved to its final name is recognised by its size; ``final.json`` in the work area, written just before the
manifest, recognises a manifest this run already wrote).
"""
from __future__ import annotations

import hashlib
import logging
from typing import Sequence

from converters.shardset.commit import Move, commit_set, committed_names, publish_moves
from converters.shardset.manifest import MANIFEST_NAME
from converters.shardset.naming import ShardName
from converters.shardset.output import refuse_foreign_in_parts
from converters.shardset.setfiles import side_dirs
from converters.storage import TMP_PREFIX, Storage
from converters.util.errors import OutputExistsError

from .workarea import WorkArea

__all__ = ["check_output", "publish", "commit", "finished"]

log = logging.getLogger(__name__)


def _is_shard(name: str) -> bool:
    try:
        ShardName.parse(name)
        return True
    except ValueError:
        return False


def check_output(storage: Storage, *, overwrite: bool, planned: Sequence[str] | None = None,
                 parts: Sequence[str] = (), side: Sequence[str] = ()) -> list[str]:
    """Refuse an output location that holds anything but work areas, unless ``overwrite`` (then only tfpipe's
    own files may be there; the set committed there is replaced when the new one commits). ``planned``: the
    final shard names of this run (None before they are known: then shards without a manifest are left for
    the finalizer to judge), which an interrupted finalize of this run may already have published.
    The folders of the files a set keeps beside its shards (``shardset.setfiles``: ``vocab/``) are tfpipe's
    when they hold only files the set committed there lists or ``side`` (this run's, which an interrupted
    finalize may have published); the commit replaces or retires those files itself.

    Returns the names to remove once the new set is committed: with ``planned``, shards no manifest lists and
    this run does not write (left by an interrupted run). ``parts``: the part directories of a group this run
    writes (checked on their own)."""
    names = [n for n in storage.list() if not n.startswith(TMP_PREFIX) and n not in parts]
    where = storage.url
    ours = [n for n in committed_names(storage) if "/" in n] + list(side)
    beside = [d for d in side_dirs(ours) if d in names and d not in parts]
    refuse_foreign_in_parts(storage, where, beside, ours)
    foreign = sorted(n for n in names if n != MANIFEST_NAME and not _is_shard(n) and n not in beside)
    if foreign:
        raise OutputExistsError(f"output {where} holds files tfpipe did not write ({', '.join(foreign[:5])}"
                                f"{', ...' if len(foreign) > 5 else ''}): choose an empty location")
    keep = set(planned or ())
    old = [n for n in names if n not in beside and (n == MANIFEST_NAME or (planned is not None and n not in keep))]
    if not old:
        return []
    if not overwrite:
        raise OutputExistsError(f"output {where} is not empty ({', '.join(sorted(old)[:3])}"
                                f"{', ...' if len(old) > 3 else ''}): pass --overwrite to replace its contents")
    return [n for n in old if n != MANIFEST_NAME]


def publish(storage: Storage, moves: Sequence[tuple[str, str, int]]) -> None:
    """Move every ``(temporary name, final name, bytes)`` (names relative to ``storage``), repeatably
    (``commit.publish_moves``)."""
    publish_moves(storage, [Move(t, f, b) for t, f, b in moves], resumable=True)


def commit(storage: Storage, area: WorkArea, moves: Sequence[tuple[str, str, int]], data: bytes, *,
           parts: Sequence[tuple[str, bytes]] = (), obsolete: Sequence[str] = ()) -> None:
    """The one commit path (``shardset.commit``), repeatable: every ``(temporary name, final name, bytes)``
    moved (a temporary that is gone while its final name holds the expected bytes was moved by an earlier,
    interrupted finalize), ``parts`` (a group's part manifests) written, then the manifest's checksum in the
    work area (``final.json``), the manifest last; then the work area is removed."""
    sha = hashlib.sha256(data).hexdigest()
    commit_set(storage, [Move(t, f, b) for t, f, b in moves], data, run_id=area.run, parts=parts,
               obsolete=obsolete, resumable=True, before_manifest=lambda: area.put("", "final.json", {"sha256": sha}),
               where=storage.url)
    area.remove()


def finished(storage: Storage, area: WorkArea) -> bool:
    """True when this run's finalize already wrote the manifest (only the work area's removal may be left)."""
    final = area.get("", "final.json")
    if not final:
        return False
    try:
        raw = storage.read_bytes(MANIFEST_NAME)
    except FileNotFoundError:
        return False
    return hashlib.sha256(raw).hexdigest() == final.get("sha256")
