"""The one commit path of every writer: publish shards under their final names, write the manifest last,
replace the set committed there before (``--overwrite``) only when the new manifest commits, roll back on
failure.

Every writer (``ShardSetWriter``, the engines' finalize, per-label groups, both Processing distributions,
``upload``/``download``) stages its shards under temporary names beside their final places and calls
``commit_set`` once. The steps, for a location that already holds a committed set (its manifest lists
``OLD``) and a new set (shards ``NEW``, part manifests, and the top manifest ``index.json``):

1. If a new name is also an old one (same shard names, a group's part manifests), the old ``index.json`` is
   first moved aside (one rename: from then on no manifest claims a half-replaced set), then each colliding
   old file is moved aside to ``.tfpipe-tmp-old.<run>-<name>`` in its own directory. Names that do not
   collide are never touched before the commit, so the old manifest stays valid until step 3 replaces it.
2. Every new shard is moved from its temporary name to its final name; part manifests are written.
3. The directories are fsynced (local disk), then the new ``index.json`` is written atomically: the commit.
4. Only then: the files set aside and the old files the new set does not list are deleted, and old part
   directories left empty are removed.

A failure in steps 1–3 takes back what this commit placed (new shards, part manifests, part directories it
created) and moves the old files back: the old set is exactly as it was. ``release`` (the claim) is called
in every case. Errors of the clean-up in step 4 are logged: the new set is committed.
"""
from __future__ import annotations

import logging
import os
import posixpath
from dataclasses import dataclass
from typing import Callable, Iterable, Sequence

from ..storage import TMP_PREFIX, Storage
from ..util.errors import TfpipeError
from ..util.fs import fsync_dir
from .manifest import MANIFEST_NAME
from .reader import parse_manifest

__all__ = ["Move", "commit_set", "publish_moves", "committed_names", "recover", "aside_name", "ASIDE_PREFIX"]

log = logging.getLogger(__name__)

ASIDE_PREFIX = f"{TMP_PREFIX}old."  # old files moved aside during a commit (no run id has a ".")


@dataclass(frozen=True)
class Move:
    """A staged file: ``tmp`` (relative to the location) becomes ``final``. ``nbytes``: its size, which lets
    a repeated commit (``resumable``) recognise a move an interrupted earlier attempt already made."""

    tmp: str
    final: str
    nbytes: int | None = None


def aside_name(name: str, run_id: str) -> str:
    """Where the old file ``name`` waits during a commit: the same directory, a temporary name."""
    head, base = posixpath.split(name)
    return posixpath.join(head, f"{ASIDE_PREFIX}{run_id}-{base}") if head else f"{ASIDE_PREFIX}{run_id}-{base}"


def committed_names(storage: Storage, where: str = "", read_part: Callable[[str], bytes] | None = None
                    ) -> list[str]:
    """Every name the manifest at ``storage`` lists (its shards, a group's part manifests, the manifest
    itself), relative to the location; [] when there is no manifest. A manifest tfpipe cannot read lists only
    itself (``prepare_output`` refuses to replace one; a commit then leaves everything else alone)."""
    try:
        raw = storage.read_bytes(MANIFEST_NAME)
    except FileNotFoundError:
        return []
    try:
        m = parse_manifest(raw, f"{where or storage.url}/{MANIFEST_NAME}", read_part=read_part or storage.read_bytes)
    except (TfpipeError, OSError):
        return [MANIFEST_NAME]
    return [MANIFEST_NAME] + [f"{p.path}/{MANIFEST_NAME}" for p in m.parts] + [s.name for s in m.shards]


def _size(storage: Storage, name: str) -> int | None:
    local = storage.local_path(name)
    try:
        if local is not None:
            return os.path.getsize(local)
        size = getattr(storage, "size", None)
        return size(name) if size is not None else None
    except FileNotFoundError:
        return None


def _quietly(fn: Callable[[], object], what: str) -> None:
    try:
        fn()
    except FileNotFoundError:
        pass
    except Exception as exc:  # noqa: BLE001 - a clean-up error never hides the run's own result
        log.warning("could not %s: %s", what, exc)


def _dirs(names: Iterable[str]) -> list[str]:
    return sorted({posixpath.dirname(n) for n in names if posixpath.dirname(n)})


def commit_set(storage: Storage, moves: Sequence[Move], manifest: bytes, *, run_id: str,
               parts: Sequence[tuple[str, bytes]] = (), obsolete: Sequence[str] = (), resumable: bool = False,
               before_manifest: Callable[[], None] | None = None, release: Callable[[], None] | None = None,
               where: str | None = None) -> None:
    """Publish ``moves``, write ``parts`` (``(name, bytes)``: a group's part manifests), then ``manifest`` as
    ``index.json`` last, replacing the set committed there (see the module docstring).

    ``obsolete``: more names to delete once the commit is done (shards of an interrupted earlier run that no
    manifest lists). ``resumable``: a move whose temporary is gone while its final name holds ``nbytes`` was
    made by an earlier, interrupted attempt of the same run (Processing reruns). ``before_manifest``: called
    just before the manifest is written. ``release``: called last, whatever happened."""
    where = where or storage.url
    try:
        _commit(storage, list(moves), manifest, run_id, list(parts), list(obsolete), resumable, before_manifest,
                where)
    finally:
        if release is not None:
            release()


def _commit(storage: Storage, moves: list[Move], manifest: bytes, run_id: str, parts: list[tuple[str, bytes]],
            obsolete: list[str], resumable: bool, before_manifest, where: str) -> None:
    old = committed_names(storage, where)
    new = {m.final for m in moves} | {name for name, _ in parts}
    clashes = [n for n in old if n in new and n != MANIFEST_NAME]
    local = storage.local_path("")
    aside: list[tuple[str, str]] = []      # (old name, where it waits)
    placed: list[tuple[str, str | None]] = []  # (final name this commit put in place, its temporary name)
    made_dirs: list[str] = []              # directories this commit created
    try:
        if clashes:
            for name in [MANIFEST_NAME] + clashes:
                tmp = aside_name(name, run_id)
                storage.publish(name, tmp)
                aside.append((name, tmp))
        if local is not None:
            for d in _dirs(new):
                path = os.path.join(local, d)
                if not os.path.isdir(path):
                    os.makedirs(path)
                    made_dirs.append(path)
        publish_moves(storage, moves, resumable=resumable, where=where, placed=placed)
        if local is not None:
            for d in _dirs(new):
                fsync_dir(os.path.join(local, d))
        for name, data in parts:
            storage.write_bytes_atomic(name, data)
            placed.append((name, None))
        if local is not None:
            fsync_dir(local)  # the renames are durable before the manifest exists
        if before_manifest is not None:
            before_manifest()
        storage.write_bytes_atomic(MANIFEST_NAME, manifest)
    except BaseException:
        _roll_back(storage, placed, aside, made_dirs, where)
        raise
    leftovers = _earlier_asides(storage, run_id, new) if resumable else []
    _retire(storage, [tmp for _, tmp in aside] + leftovers + [n for n in list(old) + list(obsolete)
                                                              if n not in new and n != MANIFEST_NAME], local, where)


def publish_moves(storage: Storage, moves: Sequence[Move], *, resumable: bool = False, where: str | None = None,
                  placed: list | None = None) -> list[tuple[str, str | None]]:
    """Move every staged file to its final name; with ``resumable``, a temporary that is gone while its final
    name holds the expected bytes was moved by an earlier, interrupted attempt. Appends ``(final, tmp)`` to
    ``placed`` as it goes (what a roll-back takes back) and returns it."""
    placed = [] if placed is None else placed
    where = where or storage.url
    for m in moves:
        if resumable and not storage.exists(m.tmp):
            if m.nbytes is None or _size(storage, m.final) != m.nbytes:
                raise TfpipeError(f"{where}/{m.tmp} is missing and {m.final} does not hold it: the part was "
                                  "damaged; remove the work area and rerun the job")
            log.info("%s already published", m.final)
        else:
            storage.publish(m.tmp, m.final)
        placed.append((m.final, m.tmp))
    return placed


def _earlier_asides(storage: Storage, run_id: str, new: set[str]) -> list[str]:
    """Old files an interrupted earlier attempt of this run set aside (top level and the new set's
    directories)."""
    mine = f"{ASIDE_PREFIX}{run_id}-"
    found = [n for n in storage.list() if n.startswith(mine)]
    local = storage.local_path("")
    for d in _dirs(new) if local is not None else ():
        path = os.path.join(local, d)
        found += [f"{d}/{n}" for n in (os.listdir(path) if os.path.isdir(path) else ()) if n.startswith(mine)]
    return found


def _roll_back(storage: Storage, placed: list[tuple[str, str | None]], aside: list[tuple[str, str]],
               made_dirs: list[str], where: str) -> None:
    """Take back what the commit placed (a shard goes back to its temporary name, so the caller can remove
    it, or a rerun of the same run can publish it again), then put the old files back where they were."""
    for name, tmp in reversed(placed):
        if tmp is None:
            _quietly(lambda n=name: storage.delete(n), f"remove {where}/{name}")
        else:
            _quietly(lambda n=name, t=tmp: storage.publish(n, t), f"move {where}/{name} back to {tmp}")
    for name, tmp in reversed(aside):
        _quietly(lambda n=name, t=tmp: storage.publish(t, n), f"restore {where}/{name} from {tmp}")
    for path in reversed(made_dirs):
        _quietly(lambda p=path: os.rmdir(p), f"remove the directory {path}")


def _retire(storage: Storage, names: list[str], local: str | None, where: str) -> None:
    """After the commit: delete the old files the new set does not list, and old part directories left
    empty."""
    for name in names:
        _quietly(lambda n=name: storage.delete(n), f"remove the old {where}/{name}")
    if local is not None:
        for d in _dirs(names):
            path = os.path.join(local, d)
            if os.path.isdir(path) and not os.listdir(path):
                _quietly(lambda p=path: os.rmdir(p), f"remove the empty directory {path}")


def recover(storage: Storage, where: str = "") -> list[str]:
    """Put back an old set a commit had moved aside when it was interrupted before its manifest (a kill in
    the commit's few renames): with no ``index.json`` there and a ``.tfpipe-tmp-old.<run>-index.json``, every
    file of that run set aside is moved back (the new shards that took their names were never committed).
    Returns the names restored. Called by ``output.prepare_output`` with the location claimed."""
    names = storage.list()
    if MANIFEST_NAME in names:
        return []
    tops = sorted(n for n in names if n.startswith(ASIDE_PREFIX) and n.endswith(f"-{MANIFEST_NAME}"))
    if not tops:
        return []
    run_id = tops[-1][len(ASIDE_PREFIX):-len(MANIFEST_NAME) - 1]
    restored: list[str] = []

    def back(name: str) -> None:
        tmp = aside_name(name, run_id)
        if not storage.exists(name) and storage.exists(tmp):
            storage.publish(tmp, name)
            restored.append(name)

    def read_part(name: str) -> bytes:
        back(name)
        return storage.read_bytes(name)

    back(MANIFEST_NAME)
    for name in committed_names(storage, where, read_part)[1:]:
        back(name)
    log.warning("%s: restored the set an interrupted commit (run %s) had moved aside (%d file(s))",
                where or storage.url, run_id, len(restored))
    return restored
