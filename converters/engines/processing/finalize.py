"""The finalizer's steps, shared by every way a Processing job splits a conversion: check the output
location, publish the parts' shards under their final names, write the manifest last, remove the work area.

Each step can be repeated: a finalize interrupted half-way is finished by a rerun of the job (a shard already
moved to its final name is recognised by its size; ``final.json`` in the work area, written just before the
manifest, recognises a manifest this run already wrote).
"""
from __future__ import annotations

import hashlib
import logging
import os
from typing import Sequence

from converters.shardset.manifest import MANIFEST_NAME, Manifest, manifest_bytes
from converters.shardset.naming import ShardName
from converters.storage import TMP_PREFIX, Storage
from converters.util.errors import OutputExistsError, TfpipeError
from converters.util.fs import fsync_dir

from .workarea import WorkArea

__all__ = ["check_output", "publish", "commit", "finished"]

log = logging.getLogger(__name__)


def _is_shard(name: str) -> bool:
    try:
        ShardName.parse(name)
        return True
    except ValueError:
        return False


def _size(storage: Storage, name: str) -> int | None:
    local = storage.local_path(name)
    try:
        return os.path.getsize(local) if local is not None else storage.size(name)
    except FileNotFoundError:
        return None


def check_output(storage: Storage, *, overwrite: bool, planned: Sequence[str] | None = None,
                 parts: Sequence[str] = ()) -> None:
    """Refuse an output location that holds anything but work areas, unless ``overwrite`` (then only tfpipe's
    own files may be there; they are replaced). ``planned``: the final shard names of this run (None before
    they are known: then shards without a manifest are left for the finalizer to judge), which an interrupted
    finalize of this run may already have published.

    With ``planned`` and ``overwrite``, the old manifest and the old shards not in ``planned`` are deleted
    (manifest first, so a half-deleted set never passes for a complete one). ``parts``: the part directories
    of a group this run writes (checked on their own)."""
    names = [n for n in storage.list() if not n.startswith(TMP_PREFIX) and n not in parts]
    where = storage.url
    foreign = sorted(n for n in names if n != MANIFEST_NAME and not _is_shard(n))
    if foreign:
        raise OutputExistsError(f"output {where} holds files tfpipe did not write ({', '.join(foreign[:5])}"
                                f"{', ...' if len(foreign) > 5 else ''}): choose an empty location")
    keep = set(planned or ())
    old = [n for n in names if n == MANIFEST_NAME or (planned is not None and n not in keep)]
    if not old:
        return
    if not overwrite:
        raise OutputExistsError(f"output {where} is not empty ({', '.join(sorted(old)[:3])}"
                                f"{', ...' if len(old) > 3 else ''}): pass --overwrite to replace its contents")
    if planned is not None:
        for n in sorted(old, key=lambda n: n != MANIFEST_NAME):
            storage.delete(n)


def publish(storage: Storage, moves: Sequence[tuple[str, str, int]]) -> None:
    """Move every ``(temporary name, final name, bytes)`` (names relative to ``storage``). A temporary that is
    gone while its final name holds the expected bytes was published by an earlier, interrupted finalize."""
    for tmp, final, nbytes in moves:
        if storage.exists(tmp):
            storage.publish(tmp, final)
            continue
        if _size(storage, final) == nbytes:
            log.info("%s already published", final)
            continue
        raise TfpipeError(f"{storage.url}/{tmp} is missing and {final} does not hold it: the part was damaged; "
                          "remove the work area and rerun the job")


def commit(storage: Storage, area: WorkArea, manifest: Manifest | None, data: bytes | None = None) -> None:
    """Write the manifest last (its checksum first, in the work area), then remove the work area; ``data``:
    the manifest's bytes when they are not ``manifest``'s (a group manifest)."""
    data = data if data is not None else manifest_bytes(manifest)
    area.put("", "final.json", {"sha256": hashlib.sha256(data).hexdigest()})
    local = storage.local_path(MANIFEST_NAME)
    if local is not None:
        fsync_dir(os.path.dirname(local))  # the shards' renames are durable before the manifest exists
    storage.write_bytes_atomic(MANIFEST_NAME, data)
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
