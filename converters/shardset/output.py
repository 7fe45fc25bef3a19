"""The output location of a run: claim it (one writer per output), and for ``--overwrite`` clear what tfpipe
can prove it wrote there — the files a valid tfpipe manifest lists (a plain set, or a group of per-label sets),
that manifest and tfpipe's temporary files; anything else makes it refuse, naming the files."""
from __future__ import annotations

import contextlib
import os
import secrets
from typing import Iterator

from ..storage import CLAIM_NAME, TMP_PREFIX, Storage, claim_output, open_storage
from ..util.errors import OutputError, OutputExistsError, TfpipeError
from .manifest import MANIFEST_NAME
from .reader import parse_manifest

__all__ = ["prepare_output", "output_errors", "new_run_id"]


def new_run_id() -> str:
    """A short id that makes this run's temporary names its own."""
    return secrets.token_hex(6)


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
    delete what a tfpipe manifest there lists, the manifest and tfpipe's temporary files, and refuse if
    anything else is there."""
    storage = open_storage(out, **storage_options)
    with output_errors(out, "prepare the output"):
        storage.claim = claim_output(storage, run_id or new_run_id()) if claim else None
        try:
            _clear(storage, out, overwrite)
        except BaseException:
            if storage.claim is not None:
                storage.claim.release()
            raise
    return storage


def _clear(storage: Storage, out: str, overwrite: bool) -> None:
    names = [n for n in storage.list() if n != CLAIM_NAME]
    if not names:
        return
    if not overwrite:
        leftovers = [n for n in names if n.startswith(TMP_PREFIX)]
        hint = (" (it holds temporary files of an interrupted run)" if leftovers and len(leftovers) == len(names)
                else "")
        raise OutputExistsError(f"output {out} is not empty{hint}: pass --overwrite to replace its contents")
    listed: set[str] = set()
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
        parts = [p.path for p in manifest.parts]
        listed |= set(parts)
        nested = [f"{p}/{MANIFEST_NAME}" for p in parts] + [s.name for s in manifest.shards if "/" in s.name]
        _refuse_foreign_in_parts(storage, out, parts, nested)
    # tfpipe's temporary files, and the temporary areas interrupted engine runs left (LocalStorage.delete
    # removes such a directory): with the output claimed, no other run can be using them
    temps = [n for n in names if n.startswith(TMP_PREFIX)]
    foreign = sorted(n for n in names if n not in listed and not n.startswith(TMP_PREFIX))
    if foreign:
        raise OutputExistsError(
            f"output {out} holds files tfpipe did not write or cannot prove it wrote ({', '.join(foreign[:5])}"
            f"{', ...' if len(foreign) > 5 else ''}{'' if listed else '; there is no tfpipe manifest'}); refusing "
            "to overwrite them: choose an empty location or remove them yourself")
    # manifest first, so a half-deleted set is never taken for a complete one
    top = sorted(set(names) & listed - set(parts), key=lambda n: n != MANIFEST_NAME)
    for n in top[:1] + nested + top[1:] + temps:
        storage.delete(n)
    local = storage.local_path("")
    for p in parts:
        if local is not None and os.path.isdir(os.path.join(local, p)):
            os.rmdir(os.path.join(local, p))


def _refuse_foreign_in_parts(storage: Storage, out: str, parts: list[str], nested: list[str]) -> None:
    """A group's part directories may hold only what the parts' manifests list (and tfpipe's own files)."""
    local = storage.local_path("")
    if local is None:
        return  # an object store has no directories: the listed keys are deleted one by one
    ours = set(nested)
    foreign = sorted(f"{p}/{n}" for p in parts if os.path.isdir(os.path.join(local, p))
                     for n in os.listdir(os.path.join(local, p))
                     if f"{p}/{n}" not in ours and not n.startswith(TMP_PREFIX))
    if foreign:
        raise OutputExistsError(f"output {out} holds files tfpipe did not write ({', '.join(foreign[:5])}"
                                f"{', ...' if len(foreign) > 5 else ''}); refusing to overwrite them: choose an "
                                "empty location or remove them yourself")
