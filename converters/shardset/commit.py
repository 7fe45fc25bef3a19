"""The one commit path of every writer: publish shards under their final names, write the manifest last,
replace the set committed there before (``--overwrite``) only when the new manifest commits, roll back on
failure, and recover from a commit a kill interrupted.

Every writer (``ShardSetWriter``, the engines' finalize, per-label groups, both Processing distributions,
``upload``/``download``) stages its shards under temporary names beside their final places and calls
``commit_set`` once. The steps, for a location that already holds a committed set (its manifest lists
``OLD``) and a new set (shards ``NEW``, part manifests, and the top manifest ``index.json``):

0. A journal (``journal.Journal``: every move, the names to set aside and to retire, the new manifest's
   sha256) is written, atomically, before anything is touched.
1. If a new name is also an old one (same shard names, a group's part manifests), the old ``index.json`` is
   first moved aside (one rename: from then on no manifest claims a half-replaced set), then each colliding
   old file is moved aside to ``.tfpipe-tmp-old.<run>-<name>`` in its own directory. Names that do not
   collide are never touched before the commit, so the old manifest stays valid until step 3 replaces it.
2. Every new shard is moved from its temporary name to its final name; part manifests are written.
3. The directories are fsynced (local disk), then the new ``index.json`` is written atomically: the commit.
4. Only then: the files set aside and the old files the new set does not list are deleted, old part
   directories left empty are removed, and the journal last.

A failure in steps 1–3 rolls back (``_roll_back``, driven by the journal and by what is found at each name,
so the same function finishes the job after a kill): new shards go back to their temporary names, part
manifests this commit wrote are removed, the old files are moved back over whatever holds their names, and
``index.json`` last. A kill leaves the journal; ``recover`` (the next run's ``prepare_output``, and every
``commit_set`` before it starts) rolls back when the new manifest was not published, else finishes step 4.
No run deletes a file set aside before it was put back or the new set committed. ``release`` (the claim) is
called in every case. Errors of the clean-up in step 4 are logged: the new set is committed.

No commit writes, sets aside or deletes a name that passes through a symbolic link in any component (``links``:
a set's ``vocab/`` linked elsewhere is refused, touching nothing). Recovery acts only on what the journal proves
is its own (``ownership``): a journal written for another
location or another set is refused in one line, touching nothing; a roll-back checks, before it touches
anything, that every file it will move or delete holds what the journal recorded (size and sha256) or carries
its run's temporary name, and that nothing it puts an old file back over is a stranger's; a roll-forward
deletes an old file only if it holds what the journal recorded. A roll-back for another run also deletes that
run's new shards (nobody will publish them again); the same run (a Processing rerun) keeps them under their
temporary names and publishes them again.
"""
from __future__ import annotations

import hashlib
import logging
import os
import posixpath
from dataclasses import dataclass
from typing import Callable, Iterable, Sequence

from ..storage import Storage
from ..util.errors import IntegrityError, TfpipeError
from ..util.fs import fsync_dir
from .journal import ASIDE_PREFIX, MAX_JOURNAL_BYTES, Journal, aside_name, is_journal, journal_name
from .links import check_no_links
from .manifest import MANIFEST_NAME
from .ownership import digest, foreign_reason, holds, location_id, published, read_journal
from .reader import parse_manifest
from .setfiles import listed_names, set_files

__all__ = ["Move", "commit_set", "publish_moves", "committed_names", "recover", "aside_name", "ASIDE_PREFIX"]

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Move:
    """A staged file: ``tmp`` (relative to the location) becomes ``final``. ``nbytes``: its size, which lets
    a repeated commit (``resumable``) recognise a move an interrupted earlier attempt already made."""

    tmp: str
    final: str
    nbytes: int | None = None


def _old_set(storage: Storage, where: str, read_part: Callable[[str], bytes] | None = None
             ) -> tuple[str | None, list[str], dict[str, tuple[int, str]]]:
    """The set committed at ``storage``: its manifest's sha256 (None without one), every name it lists (its
    shards, a group's part manifests, the files beside its shards, the manifest itself) and what each holds
    (size, sha256)."""
    try:
        raw = storage.read_bytes(MANIFEST_NAME)
    except FileNotFoundError:
        return None, [], {}
    sha = hashlib.sha256(raw).hexdigest()
    records = {MANIFEST_NAME: (len(raw), sha)}
    read = read_part or storage.read_bytes
    seen: dict[str, bytes] = {}

    def part(name: str) -> bytes:
        seen[name] = read(name)
        return seen[name]

    try:
        m = parse_manifest(raw, f"{where or storage.url}/{MANIFEST_NAME}", read_part=part)
    except (TfpipeError, OSError):
        return sha, [MANIFEST_NAME], records
    records.update({n: (len(b), hashlib.sha256(b).hexdigest()) for n, b in seen.items()})
    records.update({f.name: (f.bytes, f.sha256) for f in set_files(m)})
    return sha, listed_names(m), records


def committed_names(storage: Storage, where: str = "", read_part: Callable[[str], bytes] | None = None
                    ) -> list[str]:
    """Every name the manifest at ``storage`` lists (its shards, a group's part manifests, the files beside
    its shards, the manifest itself), relative to the location; [] when there is no manifest. A manifest
    tfpipe cannot read lists only itself (``prepare_output`` refuses to replace one; a commit then leaves
    everything else alone)."""
    return _old_set(storage, where, read_part)[1]


def _new_records(manifest: bytes, parts: list[tuple[str, bytes]], where: str) -> dict[str, tuple[int, str]]:
    """(size, sha256) of every shard and side file the new manifest lists ({} when it is not one tfpipe can
    read)."""
    written = dict(parts)

    def read_part(name: str) -> bytes:
        if name not in written:
            raise FileNotFoundError(name)
        return written[name]

    try:
        m = parse_manifest(manifest, f"{where}/{MANIFEST_NAME}", read_part=read_part)
    except Exception:  # noqa: BLE001 - a caller's manifest tfpipe cannot read: its shards are hashed instead
        return {}
    return {f.name: (f.bytes, f.sha256) for f in set_files(m)}


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
    ``index.json`` last, replacing the set committed there (see the module docstring). An interrupted
    earlier commit there is recovered first.

    ``obsolete``: more names to delete once the commit is done (shards of an interrupted earlier run that no
    manifest lists). ``resumable``: a move whose temporary is gone while its final name holds ``nbytes`` was
    made by an earlier, interrupted attempt of the same run (Processing reruns). ``before_manifest``: called
    just before the manifest is written. ``release``: called last, whatever happened."""
    where = where or storage.url
    try:
        recover(storage, where, run_id=run_id)
        _commit(storage, list(moves), manifest, run_id, list(parts), list(obsolete), resumable, before_manifest,
                where)
    finally:
        if release is not None:
            release()


def _journal_for(storage: Storage, moves: list[Move], manifest: bytes, run_id: str,
                 parts: list[tuple[str, bytes]], obsolete: list[str], where: str, resumable: bool = False
                 ) -> Journal:
    """The journal of a commit: what it moves, sets aside, writes and retires, and what each file holds."""
    old_sha, old, records = _old_set(storage, where)
    new = {m.final for m in moves} | {name for name, _ in parts}
    clashes = [n for n in old if n in new and n != MANIFEST_NAME]
    local = storage.local_path("")
    dirs = [d for d in _dirs(new) if local is not None and not os.path.isdir(os.path.join(local, d))]
    retire = []
    for name in dict.fromkeys(list(old) + list(obsolete)):
        if name not in new and name != MANIFEST_NAME:
            rec = records.get(name) or digest(storage, name)
            if rec is not None and rec[0] >= 0:  # a name that holds no regular file is nothing to retire
                retire.append((name, *rec))
    shards = _new_records(manifest, parts, where)
    rows = []
    for m in moves:
        rec = shards.get(m.final) or digest(storage, m.final if resumable and not storage.exists(m.tmp) else m.tmp)
        rows.append((m.tmp, m.final, *(rec if rec is not None and rec[0] >= 0 else (0, "0" * 64))))
    return Journal(run=run_id, manifest_sha256=hashlib.sha256(manifest).hexdigest(), location=location_id(storage),
                   old_manifest_sha256=old_sha, where=where, moves=tuple(rows),
                   parts=tuple((name, len(data), hashlib.sha256(data).hexdigest()) for name, data in parts),
                   aside=tuple([MANIFEST_NAME] + clashes) if clashes else (), retire=tuple(retire),
                   dirs=tuple(dirs))


def _commit(storage: Storage, moves: list[Move], manifest: bytes, run_id: str, parts: list[tuple[str, bytes]],
            obsolete: list[str], resumable: bool, before_manifest, where: str) -> None:
    journal = _journal_for(storage, moves, manifest, run_id, parts, obsolete, where, resumable)
    check_no_links(storage, [*journal.finals, *(r[0] for r in journal.retire), *journal.aside], where)
    data = journal.to_bytes()
    if len(data) > MAX_JOURNAL_BYTES:
        raise TfpipeError(f"{where}: a commit of {len(moves)} shards needs a journal of {len(data)} bytes, more "
                          f"than the {MAX_JOURNAL_BYTES} a recovery reads: write fewer, larger shards")
    local = storage.local_path("")
    storage.write_bytes_atomic(journal_name(run_id), data)
    try:
        for name in journal.aside:
            storage.publish(name, aside_name(name, run_id))
        for d in journal.dirs:
            os.makedirs(os.path.join(local, d), exist_ok=True)
        publish_moves(storage, moves, resumable=resumable, where=where)
        if local is not None:
            for d in _dirs(journal.finals):
                fsync_dir(os.path.join(local, d))
        for name, data in parts:
            storage.write_bytes_atomic(name, data)
        if local is not None:
            fsync_dir(local)  # the renames are durable before the manifest exists
        if before_manifest is not None:
            before_manifest()
        storage.write_bytes_atomic(MANIFEST_NAME, manifest)
    except BaseException:
        try:
            _roll_back(storage, journal, where)
        except Exception as exc:  # noqa: BLE001 - the commit's own error is what the user sees
            log.warning("%s: could not put the old set back (%s); the next run into it will (the journal %s "
                        "stays)", where, exc, journal_name(run_id))
        raise
    _roll_forward(storage, journal, where)


def publish_moves(storage: Storage, moves: Sequence[Move], *, resumable: bool = False, where: str | None = None,
                  placed: list | None = None) -> list[tuple[str, str | None]]:
    """Move every staged file to its final name; with ``resumable``, a temporary that is gone while its final
    name holds the expected bytes was moved by an earlier, interrupted attempt. Appends ``(final, tmp)`` to
    ``placed`` as it goes and returns it."""
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


def _size(storage: Storage, name: str) -> int | None:
    local = storage.local_path(name)
    try:
        if local is not None:
            return os.path.getsize(local)
        size = getattr(storage, "size", None)
        return size(name) if size is not None else None
    except FileNotFoundError:
        return None


def _may_put_back(storage: Storage, journal: Journal, name: str, held: str) -> bool:
    """Whether the old file set aside as ``held`` may go back over what holds ``name``: nothing, the commit's
    own new file, or the same bytes (a copy an object store made before the kill)."""
    found = digest(storage, name)
    return found is None or found == journal.new_record(name) or found == digest(storage, held)


def _roll_back_steps(storage: Storage, journal: Journal, discard: bool):
    """The storage calls that bring back the old set from the state found now, and what must hold before
    them: ``(steps, checks)``; ``checks`` are ``(name, predicate)``. Each step touches names no other step
    touches before it, so the whole list is decided from the state before the first one."""
    clashes = set(journal.aside)
    steps: list[tuple[str, ...]] = []
    checks: list[tuple[str, Callable[[], bool]]] = []
    for tmp, final, size, sha in reversed(journal.moves):
        held = final in clashes and storage.exists(aside_name(final, journal.run))
        has_tmp = storage.exists(tmp)
        if not (final in clashes and not held) and storage.exists(final):  # the commit's new bytes are there
            checks.append((final, lambda f=final, r=(size, sha), h=held: holds(storage, f, r) or (
                h and digest(storage, f) == digest(storage, aside_name(f, journal.run)))))  # or a copy set aside
            if discard or (has_tmp and not held):
                steps.append(("delete", final))  # (the second: an object store's copy made before the delete)
            elif not has_tmp:
                steps.append(("publish", final, tmp))  # the new bytes back to their temporary name
            # (else the old file set aside is put back over it below)
        if discard and has_tmp:
            steps.append(("delete", tmp))  # a temporary name of the journal's own run
    for name, size, sha in journal.parts:
        if name not in clashes and storage.exists(name):
            checks.append((name, lambda n=name, r=(size, sha): holds(storage, n, r)))
            steps.append(("delete", name))
    for name in reversed(journal.aside):
        held = aside_name(name, journal.run)
        if storage.exists(held):
            checks.append((name, lambda n=name, h=held: _may_put_back(storage, journal, n, h)))
            steps.append(("publish", held, name))
    return steps, checks


def _roll_back(storage: Storage, journal: Journal, where: str, *, check: bool = False, discard: bool = False) -> None:
    """Bring back the old set exactly, from whatever state the commit of ``journal`` reached (its own failure, or
    a kill found by the next run): each new shard goes back to its temporary name (the caller removes it, or a
    rerun of the same run publishes it again) or, with ``discard``, is deleted; a part manifest this commit
    wrote is removed, then every old file set aside is moved back over whatever holds its name, ``index.json``
    last; the journal goes only when all that is done. ``check`` (a journal read from storage): first check
    that every file it will touch is the commit's own, and touch nothing if one is not. Raises if a step
    fails (the journal stays: the next run tries again)."""
    steps, checks = _roll_back_steps(storage, journal, discard)
    if check:
        strange = [name for name, ok in checks if not ok()]
        if strange:
            raise IntegrityError(
                f"{where}: the interrupted commit of run {journal.run} cannot be rolled back: {', '.join(strange[:3])}"
                f"{', ...' if len(strange) > 3 else ''} do(es) not hold what its journal recorded; tfpipe touched "
                f"nothing: look at {journal_name(journal.run)} and the .tfpipe-tmp-old.{journal.run}-* files (the old "
                "set moved aside) before removing anything")
    for step in steps:
        if step[0] == "publish":
            storage.publish(step[1], step[2])
        else:
            storage.delete(step[1])
    local = storage.local_path("")
    if local is not None:
        for d in sorted(journal.dirs, key=lambda d: -d.count("/")):
            path = os.path.join(local, d)
            if os.path.isdir(path) and not os.listdir(path):
                os.rmdir(path)
        for d in _dirs(journal.aside):
            if os.path.isdir(os.path.join(local, d)):
                fsync_dir(os.path.join(local, d))
        fsync_dir(local)
    storage.delete(journal_name(journal.run))


def _roll_forward(storage: Storage, journal: Journal, where: str, *, check: bool = False) -> None:
    """After the commit of ``journal``: delete the files set aside, the old files the new set does not list, old
    part directories left empty, and the journal last. ``check`` (a journal read from storage): an old file
    that does not hold what the journal recorded is left in place (logged)."""
    names = [aside_name(n, journal.run) for n in journal.aside]
    for name, size, sha in journal.retire:
        if check and storage.exists(name) and not holds(storage, name, (size, sha)):
            log.warning("%s/%s: left in place: it does not hold the old file the commit of run %s recorded",
                        where, name, journal.run)
            continue
        names.append(name)
    for name in names:
        _quietly(lambda n=name: storage.delete(n), f"remove the old {where}/{name}")
    local = storage.local_path("")
    if local is not None:
        for d in _dirs(names):
            path = os.path.join(local, d)
            if os.path.isdir(path) and not os.listdir(path):
                _quietly(lambda p=path: os.rmdir(p), f"remove the empty directory {path}")
    _quietly(lambda: storage.delete(journal_name(journal.run)), f"remove {where}/{journal_name(journal.run)}")


def recover(storage: Storage, where: str = "", run_id: str | None = None) -> list[str]:
    """Finish what an interrupted commit left (called with the location claimed: by ``output.prepare_output``
    before it looks at the location, and by ``commit_set`` before it starts). Every commit journal there must
    belong to the set there (``ownership.foreign_reason``), else ``IntegrityError`` in one line and nothing is
    touched. Then for each: when the new manifest was published, finish its step 4 (the new set stays); else
    roll it back (the old set comes back byte for byte; the new shards are deleted unless the journal is
    ``run_id``'s own). Returns the runs recovered. A location without a journal but with an old manifest set
    aside (a commit of an earlier tfpipe version) gets its set-aside files moved back."""
    where = where or storage.url
    names = storage.list()
    journals = [read_journal(storage, name, where) for name in sorted(n for n in names if is_journal(n))]
    done: list[str] = []
    for journal in journals:
        why = foreign_reason(storage, journal)
        if why is not None:
            raise IntegrityError(f"{where}/{journal_name(journal.run)}: a commit journal that does not belong to the "
                                 f"set here ({why}); tfpipe touched nothing: if 'tfpipe verify {where}' passes, "
                                 "remove that file and rerun")
    for journal in journals:
        if published(storage, journal):
            log.warning("%s: finishing the commit of run %s (its new set was published)", where, journal.run)
            _roll_forward(storage, journal, where, check=True)
        else:
            log.warning("%s: restoring the set an interrupted commit (run %s) had moved aside", where, journal.run)
            _roll_back(storage, journal, where, check=True, discard=journal.run != run_id)
        done.append(journal.run)
    if not done and MANIFEST_NAME not in names:
        done += _recover_unjournaled(storage, names, where)
    return done


def _recover_unjournaled(storage: Storage, names: list[str], where: str) -> list[str]:
    """A commit of a tfpipe version without journals, killed with the old manifest moved aside: move every
    file of that run set aside back, over whatever holds its name."""
    tops = sorted(n for n in names if n.startswith(ASIDE_PREFIX) and n.endswith(f"-{MANIFEST_NAME}"))
    if not tops:
        return []
    run_id = tops[-1][len(ASIDE_PREFIX):-len(MANIFEST_NAME) - 1]
    top = aside_name(MANIFEST_NAME, run_id)

    def read_part(name: str) -> bytes:
        held = aside_name(name, run_id)
        return storage.read_bytes(held if storage.exists(held) else name)

    try:
        m = parse_manifest(storage.read_bytes(top), f"{where}/{top}", read_part=read_part)
    except (TfpipeError, OSError) as exc:
        raise TfpipeError(f"{where}: an interrupted commit left the old set aside under {top}, which cannot be "
                          f"read ({exc}): look at the .tfpipe-tmp-old.* files before removing anything") from None
    listed = [f"{p.path}/{MANIFEST_NAME}" for p in m.parts] + [s.name for s in m.shards] + [MANIFEST_NAME]
    for name in listed:
        if storage.exists(aside_name(name, run_id)):
            storage.publish(aside_name(name, run_id), name)
    log.warning("%s: restored the set an interrupted commit (run %s) had moved aside", where, run_id)
    return [run_id]
