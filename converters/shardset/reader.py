"""Read a shard set's manifest (``index.json``) from a local directory or ``s3://``, and check a shard file
against its manifest entry."""
from __future__ import annotations

import hashlib
import json
import os
import stat
from typing import Callable

from ..storage import is_s3, open_storage
from ..storage.download import read_object
from ..util.digest import file_digest
from ..util.errors import IntegrityError, MissingInputError, TfpipeError
from ..util.fs import file_kind
from .group import GroupManifest, is_group, union
from .manifest import MANIFEST_NAME, Manifest, ShardInfo

__all__ = ["read_manifest", "read_manifest_raw", "parse_manifest", "split_manifest_path", "check_file",
           "shard_file_problem"]


def split_manifest_path(path: str) -> tuple[str, str]:
    """'dir' or 'dir/index.json' -> ('dir', 'index.json')."""
    path = str(path)
    if path.endswith(".json"):
        base, _, name = path.rstrip("/").rpartition("/")
        return (base or "."), name
    return path.rstrip("/") or "/", MANIFEST_NAME


def _json(raw: bytes, where: str):
    try:
        return json.loads(raw)
    except (ValueError, UnicodeDecodeError) as exc:
        raise TfpipeError(f"manifest {where} is not valid JSON: {exc}") from None
    except RecursionError:
        raise TfpipeError(f"manifest {where} is not a tfpipe manifest: its JSON is nested too deeply") from None


def parse_manifest(raw: bytes, where: str, location: str | None = None,
                   read_part: Callable[[str], bytes] | None = None) -> Manifest:
    """A ``Manifest`` from the bytes of ``index.json`` (``where`` names it in errors): TfpipeError for
    anything that is not one, IntegrityError for an entry naming a file outside the set. A group manifest
    (per-label parts) becomes the group read as one set (``group.union``); its parts' manifests are read with
    ``read_part(relative path)`` and checked against the sha256 the group records."""
    data = _json(raw, where)
    if not is_group(data):
        return Manifest.from_json(data, location=location)
    group = GroupManifest.from_json(data, location=where)
    if read_part is None:
        raise TfpipeError(f"{where} is a group of shard sets (one per label): read it with read_manifest")
    parts = []
    for info in group.parts:
        rel = f"{info.path}/{MANIFEST_NAME}"
        try:
            part_raw = read_part(rel)
        except FileNotFoundError:
            raise IntegrityError(f"group {where}: part {info.path} has no manifest (incomplete group)") from None
        if hashlib.sha256(part_raw).hexdigest() != info.manifest_sha256:
            raise IntegrityError(f"group {where}: {rel} differs from the manifest the group records (sha256)")
        part_loc = None if location is None else f"{location.rstrip('/')}/{info.path}"
        parts.append(Manifest.from_json(_json(part_raw, f"{where}: {rel}"), location=part_loc))
    return union(group, parts, location)


def read_manifest_raw(path: str | os.PathLike, **storage_options) -> tuple[Manifest, bytes]:
    """Read ``index.json`` (and its raw bytes) from a shard-set directory or the file itself, local or ``s3://``
    (``storage_options`` such as ``endpoint_url`` go to the S3 client)."""
    path = str(path)
    if not is_s3(path) and os.path.exists(path) and not os.path.isdir(path) and not path.endswith(".json"):
        raise TfpipeError(f"{path} is {_kind(path)}, not a shard set: give the directory that holds "
                          f"{MANIFEST_NAME} (or the {MANIFEST_NAME} itself)")
    base, name = split_manifest_path(path)
    where = f"{base.rstrip('/')}/{name}"
    storage = open_storage(base, **storage_options)
    try:
        raw = read_object(storage, name)
    except FileNotFoundError:
        raise MissingInputError(f"no manifest at {where}: not a tfpipe shard set "
                                "(or its conversion did not finish)") from None
    except OSError as exc:
        raise TfpipeError(f"cannot read the manifest {where}: {exc.strerror or exc}") from None
    return parse_manifest(raw, where, location=base, read_part=lambda n: read_object(storage, n)), raw


def read_manifest(path: str | os.PathLike, **storage_options) -> Manifest:
    """Read ``index.json`` from a shard-set directory (or the file itself), local or ``s3://``."""
    return read_manifest_raw(path, **storage_options)[0]


def _kind(path: str) -> str:
    try:
        return file_kind(os.stat(path).st_mode)
    except OSError:
        return "not a directory"


def shard_file_problem(path: str) -> str | None:
    """Why the file at ``path`` cannot be a shard of a set, or None: missing, a symbolic link (it could lead
    out of the set), a FIFO or device (reading it could hang or never end)."""
    try:
        mode = os.lstat(path).st_mode
    except FileNotFoundError:
        return "missing (listed in the manifest)"
    if stat.S_ISLNK(mode):
        return "is a symbolic link; a shard set holds its own files"
    if not stat.S_ISREG(mode):
        return f"is {file_kind(mode)}, not a regular file"
    return None


def check_file(path: str, info: ShardInfo, where: str) -> None:
    """Raise IntegrityError unless the file at ``path`` is a regular file with the size and sha256 its
    manifest entry ``info`` records (``where`` names the shard set in the message)."""
    problem = shard_file_problem(path)
    if problem:
        raise IntegrityError(f"{where}/{info.name}: {problem}")
    size = os.path.getsize(path)
    if size != info.bytes:
        raise IntegrityError(f"{where}/{info.name}: {size} bytes, manifest says {info.bytes}")
    digest = file_digest(path)[1]
    if digest != info.sha256:
        raise IntegrityError(f"{where}/{info.name}: sha256 {digest[:12]}... differs from the manifest's "
                             f"{info.sha256[:12]}... (damaged in storage or in transfer)")
