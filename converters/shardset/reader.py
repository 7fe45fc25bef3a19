"""Read a shard set's manifest (``index.json``) from a local directory or ``s3://``, and check a shard file
against its manifest entry."""
from __future__ import annotations

import json
import os

from ..storage import open_storage
from ..util.digest import file_digest
from ..util.errors import IntegrityError, TfpipeError
from .manifest import MANIFEST_NAME, Manifest, ShardInfo

__all__ = ["read_manifest", "read_manifest_raw", "split_manifest_path", "check_file"]


def split_manifest_path(path: str) -> tuple[str, str]:
    """'dir' or 'dir/index.json' -> ('dir', 'index.json')."""
    path = str(path)
    if path.endswith(".json"):
        base, _, name = path.rstrip("/").rpartition("/")
        return (base or "."), name
    return path.rstrip("/") or "/", MANIFEST_NAME


def read_manifest_raw(path: str | os.PathLike, **storage_options) -> tuple[Manifest, bytes]:
    """Read ``index.json`` (and its raw bytes) from a shard-set directory or the file itself, local or ``s3://``
    (``storage_options`` such as ``endpoint_url`` go to the S3 client)."""
    base, name = split_manifest_path(str(path))
    storage = open_storage(base, **storage_options)
    try:
        raw = storage.read_bytes(name)
    except FileNotFoundError:
        raise TfpipeError(f"no manifest at {base.rstrip('/')}/{name}: not a tfpipe shard set "
                          "(or its conversion did not finish)") from None
    try:
        data = json.loads(raw)
    except json.JSONDecodeError as exc:
        raise TfpipeError(f"manifest {base}/{name} is not valid JSON: {exc}") from exc
    return Manifest.from_json(data, location=base), raw


def read_manifest(path: str | os.PathLike, **storage_options) -> Manifest:
    """Read ``index.json`` from a shard-set directory (or the file itself), local or ``s3://``."""
    return read_manifest_raw(path, **storage_options)[0]


def check_file(path: str, info: ShardInfo, where: str) -> None:
    """Raise IntegrityError unless the file at ``path`` has the size and sha256 its manifest entry ``info``
    records (``where`` names the shard set in the message)."""
    size = os.path.getsize(path)
    if size != info.bytes:
        raise IntegrityError(f"{where}/{info.name}: {size} bytes, manifest says {info.bytes}")
    digest = file_digest(path)[1]
    if digest != info.sha256:
        raise IntegrityError(f"{where}/{info.name}: sha256 {digest[:12]}... differs from the manifest's "
                             f"{info.sha256[:12]}... (damaged in storage or in transfer)")
