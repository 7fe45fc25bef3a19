"""Move a whole shard set between a local directory and S3 (either direction; local to local works too).

Upload: every shard, then the manifest last (the commit marker); an existing manifest (or any other content)
at the destination is never replaced without ``overwrite=True``. Download: every shard to a temporary name,
checked against the manifest's byte count and sha256, renamed, then the manifest last.
"""
from __future__ import annotations

import contextlib
import dataclasses
import logging
import os
import shutil
import tempfile
from typing import Callable

from converters.shardset.manifest import MANIFEST_NAME, Manifest
from converters.shardset.reader import check_file, read_manifest_raw
from converters.shardset.writer import output_errors, prepare_output
from converters.storage import TMP_PREFIX, is_s3, open_storage
from converters.util.errors import IntegrityError, TfpipeError
from converters.util.fs import create_new, fsync_dir
from converters.util.progress import progress_bar

__all__ = ["upload", "download", "copy_set"]

log = logging.getLogger(__name__)

_COPY_CHUNK = 8 << 20  # 8 MiB


def _options(url: str, endpoint_url: str | None) -> dict:
    return {"endpoint_url": endpoint_url} if is_s3(url) and endpoint_url else {}


def copy_set(src: str, dest: str, *, overwrite: bool = False, progress: bool = False, check: bool = True,
             endpoint_url: str | None = None) -> Manifest:
    """Copy a shard set from ``src`` to ``dest`` (local dir or s3://): shards first, manifest last.

    Each shard is checked against the manifest (size and sha256) before it is published at the destination,
    so a damaged source or a corrupted transfer never ends under a final name with a manifest."""
    manifest, raw = read_manifest_raw(src, **_options(src, endpoint_url))
    source = open_storage(manifest.location, **_options(src, endpoint_url))
    target = prepare_output(dest, overwrite=overwrite, **_options(dest, endpoint_url))  # claimed for this copy
    try:
        with output_errors(str(dest)):
            _copy(manifest, raw, source, target, dest, progress, check)
    finally:
        target.claim.release()
    log.info("copied %d shards (%d records) from %s to %s", len(manifest.shards), manifest.records,
             manifest.location, dest)
    return dataclasses.replace(manifest, location=str(dest).rstrip("/"))


def _copy(manifest: Manifest, raw: bytes, source, target, dest: str, progress: bool, check: bool) -> None:
    """Shards first (each checked against the manifest before it gets its final name), manifest last; on a
    failure the shards this copy already placed are removed again."""
    bar = progress_bar(progress, desc="upload" if is_s3(dest) else "download", total=manifest.total_bytes,
                       leave=False)
    tick: Callable[[int], None] = bar.update
    local_target = target.local_path(MANIFEST_NAME) is not None
    if local_target:
        os.makedirs(target.local_path(""), exist_ok=True)
    staging = None if local_target else tempfile.mkdtemp(prefix="tfpipe-transfer-")
    placed: list[str] = []
    try:
        for info in manifest.shards:
            local = source.local_path(info.name)
            fetched = None
            if local is None:  # remote source: fetch to a temporary name (in the target dir when it is local)
                fetched = (_tmp_beside(target.local_path(info.name)) if local_target
                           else os.path.join(staging, info.name.replace("/", "__")))
                source.fetch(info.name, fetched, callback=tick)
                local = fetched
            elif not os.path.exists(local):
                raise IntegrityError(f"{manifest.location}: {info.name} listed in the manifest is missing")
            try:
                if check:
                    check_file(local, info, source.url)
                placed.append(info.name)
                if fetched is not None and local_target:
                    with open(fetched, "rb+") as f:
                        os.fsync(f.fileno())
                    os.replace(fetched, target.local_path(info.name))
                else:
                    _put(target, local, info.name, info.sha256, None if fetched else tick)
            finally:
                if fetched is not None and os.path.exists(fetched):
                    os.unlink(fetched)
        for part in manifest.parts:  # a group: each part's manifest, then the group's
            name = f"{part.path}/{MANIFEST_NAME}"
            placed.append(name)
            target.write_bytes_atomic(name, source.read_bytes(name))
        if local_target:
            fsync_dir(target.local_path(""))
        target.write_bytes_atomic(MANIFEST_NAME, raw)
    except BaseException:
        for name in placed:  # no shard under its final name without the manifest
            try:
                target.delete(name)
            except Exception as exc:  # noqa: BLE001 - the copy's own error is what the user sees
                log.warning("could not remove %s from %s: %s", name, dest, exc)
        for part in manifest.parts if local_target else ():
            with contextlib.suppress(OSError):
                os.rmdir(target.local_path(part.path))
        raise
    finally:
        if staging is not None:
            shutil.rmtree(staging, ignore_errors=True)
        bar.close()


def _tmp_beside(final: str) -> str:
    """A temporary name in the directory of ``final`` (created: a group's shards sit in part directories)."""
    os.makedirs(os.path.dirname(final), exist_ok=True)
    return os.path.join(os.path.dirname(final), f"{TMP_PREFIX}{os.getpid()}-{os.path.basename(final)}")


def _put(target, local: str, name: str, sha256: str, tick) -> None:
    """Place a local file under ``name`` at the target: S3 upload, or copy + fsync + rename locally."""
    upload_file = getattr(target, "upload_file", None)
    if upload_file is not None:
        upload_file(local, name, callback=tick, sha256=sha256)
        return
    final = target.local_path(name)
    tmp = _tmp_beside(final)
    try:
        with open(local, "rb") as fin, create_new(tmp) as fout:
            while chunk := fin.read(_COPY_CHUNK):
                fout.write(chunk)
                if tick is not None:
                    tick(len(chunk))
            fout.flush()
            os.fsync(fout.fileno())
        os.replace(tmp, final)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise
    fsync_dir(os.path.dirname(final))


def upload(src_dir: str, dest_url: str, *, overwrite: bool = False, progress: bool = False,
           endpoint_url: str | None = None) -> Manifest:
    """Upload a local shard set to ``s3://bucket/prefix``: shards (checked against the manifest), then the
    manifest; refuses a non-empty destination unless ``overwrite``."""
    if not is_s3(dest_url):
        raise TfpipeError(f"upload destination must be an s3:// URL, got {dest_url!r}")
    return copy_set(src_dir, dest_url, overwrite=overwrite, progress=progress, endpoint_url=endpoint_url)


def download(src_url: str, dest_dir: str, *, overwrite: bool = False, progress: bool = False,
             endpoint_url: str | None = None) -> Manifest:
    """Download a shard set from ``s3://bucket/prefix`` into a local directory, checking every shard's size
    and sha256 against the manifest; the manifest is written last."""
    if not is_s3(src_url):
        raise TfpipeError(f"download source must be an s3:// URL, got {src_url!r}")
    if is_s3(dest_dir):
        raise TfpipeError(f"download destination must be a local directory, got {dest_dir!r}")
    return copy_set(src_url, dest_dir, overwrite=overwrite, progress=progress, endpoint_url=endpoint_url)
