"""The output location of a run: claim it (one writer per output), and for ``--overwrite`` check that
everything there is what tfpipe can prove it wrote — the files a valid tfpipe manifest lists (a plain set, or a
group of per-label sets), that manifest and tfpipe's temporary files; anything else makes it refuse, naming
the files. The old set itself is replaced only when the new one commits (``commit``)."""
from __future__ import annotations

import contextlib
import os
import secrets
from typing import Iterator

from ..storage import CLAIM_NAME, TMP_PREFIX, Storage, claim_output, open_storage
from ..util.errors import OutputError, OutputExistsError, TfpipeError
from .commit import recover
from .links import check_no_links
from .manifest import MANIFEST_NAME
from .reader import parse_manifest
from .setfiles import side_dirs, side_files_of

__all__ = ["prepare_output", "output_errors", "new_run_id", "check_run_id", "release_claim", "refuse_foreign_in_parts"]


def new_run_id() -> str:
    """A short id that makes this run's temporary names its own (the one run-id function of every engine)."""
    return secrets.token_hex(6)


def check_run_id(run_id: str) -> str:
    """``run_id`` if it can name a temporary file (letters, digits, ``-``, ``_``; at most 64 characters), else
    ``ValueError`` naming it — checked before anything is created."""
    if (not isinstance(run_id, str) or not run_id or len(run_id) > 64
            or not all(c.isascii() and (c.isalnum() or c in "-_") for c in run_id)):
        raise ValueError(f"run id (run_id, --run-id) must be 1 to 64 letters, digits, '-' or '_', got {run_id!r}")
    return run_id


@contextlib.contextmanager
def output_errors(where: str, action: str = "write") -> Iterator[None]:
    """Turn an operating-system error while writing output into one ``OutputError`` line naming the path and
    the system's reason (read-only file system, no space left, name too long, not a directory, ...)."""
    try:
        yield
    except OSError as exc:
        path = exc.filename if exc.filename is not None else where
        reason = exc.strerror or str(exc) or type(exc).__name__
        raise OutputError(f"cannot {action} {path}: {reason}") from exc


def prepare_output(out: str, *, overwrite: bool, claim: bool = True, run_id: str | None = None,
                   **storage_options) -> Storage:
    """Open the output location and claim it for this run (``storage.claim``; release it with
    ``storage.claim.release()``, or let the writer do it); refuse a non-empty one unless ``overwrite``, then
    check that everything there is tfpipe's (a committed set and temporary files; the set is replaced when the
    new one commits) and refuse if anything else is there."""
    storage = open_storage(out, **storage_options)
    with output_errors(out, "prepare the output"):
        storage.claim = claim_output(storage, check_run_id(run_id) if run_id else new_run_id()) if claim else None
        try:
            _clear(storage, out, overwrite)
        except BaseException:
            release_claim(storage)
            raise
    return storage


def release_claim(storage: Storage) -> None:
    """Give up the claim ``prepare_output`` took on ``storage`` (idempotent): the one place every writer, the
    engines' run area and transfers release it."""
    claim = getattr(storage, "claim", None)
    if claim is not None:
        claim.release()
        storage.claim = None


def _clear(storage: Storage, out: str, overwrite: bool) -> None:
    """Refuse a non-empty location unless ``overwrite``; then refuse it if anything there is not tfpipe's.
    The set committed there stays untouched until the new one commits (``commit.commit_set``); only
    temporary files of interrupted runs are removed (the location is claimed: no other run uses them)."""
    recover(storage, out)
    names = [n for n in storage.list() if n != CLAIM_NAME]
    if not names:
        return
    if not overwrite:
        leftovers = [n for n in names if n.startswith(TMP_PREFIX)]
        hint = (" (it holds temporary files of an interrupted run)" if leftovers and len(leftovers) == len(names)
                else "")
        raise OutputExistsError(f"output {out} is not empty{hint}: pass --overwrite to replace its contents")
    listed: set[str] = set()
    leftovers: list[str] = []  # temporary files of interrupted runs in a group's part directories
    nested: list[str] = []   # files of a group's parts (``label=<v>/...``)
    parts: list[str] = []
    if MANIFEST_NAME in names:
        try:
            manifest = parse_manifest(storage.read_bytes(MANIFEST_NAME), f"{out}/{MANIFEST_NAME}",
                                      read_part=storage.read_bytes)
        except (TfpipeError, OSError) as exc:
            raise OutputExistsError(
                f"output {out} holds an {MANIFEST_NAME} that is not a valid tfpipe manifest ({exc}); refusing to "
                "replace it or anything beside it: choose another location") from None
        listed = {MANIFEST_NAME} | {s.name for s in manifest.shards if "/" not in s.name}
        side = [f.name for f in side_files_of(manifest)]  # vocab/C1.txt: folders holding only those
        parts = list(dict.fromkeys([p.path for p in manifest.parts] + side_dirs(side)))
        listed |= set(parts)
        nested = ([f"{p.path}/{MANIFEST_NAME}" for p in manifest.parts] + side
                  + [s.name for s in manifest.shards if "/" in s.name])
        check_no_links(storage, sorted(listed | set(nested)), out)  # an old set's files through links: not its own
        leftovers = refuse_foreign_in_parts(storage, out, parts, nested)
    foreign = sorted(n for n in names if n not in listed and not n.startswith(TMP_PREFIX))
    if foreign:
        raise OutputExistsError(
            f"output {out} holds files tfpipe did not write or cannot prove it wrote ({', '.join(foreign[:5])}"
            f"{', ...' if len(foreign) > 5 else ''}{'' if listed else '; there is no tfpipe manifest'}); refusing "
            "to overwrite them: choose an empty location or remove them yourself")
    # tfpipe's temporary files, and the temporary areas interrupted engine runs left (LocalStorage.delete
    # removes such a directory)
    for n in names + leftovers:
        if n.rsplit("/", 1)[-1].startswith(TMP_PREFIX):
            storage.delete(n)


def _part_names(storage: Storage, part: str) -> list[str]:
    """Names under a group's part directory, relative to the location (``part/name``)."""
    local = storage.local_path("")
    if local is not None:
        path = os.path.join(local, part)
        return [f"{part}/{n}" for n in os.listdir(path)] if os.path.isdir(path) else []
    list_tree = getattr(storage, "list_tree", None)
    if list_tree is not None:
        return [name for name, _ in list_tree(f"{part}/")]
    return [f"{part}/{n}" for n in open_storage(f"{storage.url.rstrip('/')}/{part}").list()]


def refuse_foreign_in_parts(storage: Storage, out: str, parts: list[str], nested: list[str]) -> list[str]:
    """A group's part directories may hold only what the parts' manifests list (and tfpipe's own files), on
    a local disk and in an object store alike. Returns tfpipe's temporary files there (of interrupted runs)."""
    ours = set(nested)
    found = [n for p in parts for n in _part_names(storage, p) if n.rsplit("/", 1)[-1] != CLAIM_NAME]
    temporary = [n for n in found if n.rsplit("/", 1)[-1].startswith(TMP_PREFIX)]
    foreign = sorted(n for n in found if n not in ours and n not in temporary)
    if foreign:
        raise OutputExistsError(f"output {out} holds files tfpipe did not write ({', '.join(foreign[:5])}"
                                f"{', ...' if len(foreign) > 5 else ''}); refusing to overwrite them: choose an "
                                "empty location or remove them yourself")
    return temporary
