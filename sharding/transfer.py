"""Move a whole shard set between a local directory and S3 (either direction; local to local works too).

A set is all its files (``shardset.setfiles``): its shards and the files its manifest keeps beside them (a
tabular set's vocabularies) travel together, each checked against the manifest's size and sha256.

Upload: every file to a temporary name, then the one commit path (``shardset.commit``: final names, the
manifest last); an existing set (or any other content) at the destination is never replaced without
``overwrite=True``, and then only when the new manifest commits. Download: every file to a temporary name,
checked against the manifest's byte count and sha256, then the same commit.
"""
from __future__ import annotations

import contextlib
import dataclasses
import logging
import os
import posixpath
import shutil
import tempfile
from typing import Callable

from converters.shardset.commit import Move, commit_set
from converters.shardset.links import check_no_links
from converters.shardset.manifest import MANIFEST_NAME, Manifest
from converters.shardset.output import new_run_id, output_errors, prepare_output, release_claim
from converters.shardset.overlap import check_disjoint
from converters.shardset.reader import check_file, read_manifest_raw
from converters.shardset.setfiles import set_files
from converters.storage import TMP_PREFIX, is_s3, open_storage
from converters.util.errors import IntegrityError, TfpipeError
from converters.util.fs import create_new
from converters.util.progress import progress_bar

__all__ = ["upload", "download", "copy_set"]

log = logging.getLogger(__name__)

_COPY_CHUNK = 8 << 20  # 8 MiB


def _options(url: str, endpoint_url: str | None) -> dict:
    return {"endpoint_url": endpoint_url} if is_s3(url) and endpoint_url else {}


def copy_set(src: str, dest: str, *, overwrite: bool = False, progress: bool = False, check: bool = True,
             endpoint_url: str | None = None) -> Manifest:
    """Copy a shard set from ``src`` to ``dest`` (local dir or s3://): its files first (shards and
    the files beside them), manifest last.

    Each file is checked against the manifest (size and sha256) before it is staged at the destination, so a
    damaged source or a corrupted transfer never ends under a final name with a manifest; a set already at
    ``dest`` (``overwrite``) is replaced only when the new manifest commits (``shardset.commit``)."""
    check_disjoint(str(dest), [str(src)], what="source set", **_options(str(dest), endpoint_url))
    manifest, raw = read_manifest_raw(src, **_options(src, endpoint_url))
    source = open_storage(manifest.location, **_options(src, endpoint_url))
    check_no_links(source, [f.name for f in set_files(manifest)], manifest.location)  # the set's own files only
    run_id = new_run_id()
    target = prepare_output(dest, overwrite=overwrite, run_id=run_id,
                            **_options(dest, endpoint_url))  # claimed for this copy
    try:
        with output_errors(str(dest)):
            _copy(manifest, raw, source, target, dest, run_id, progress, check)
    finally:
        release_claim(target)
    log.info("copied %d shards (%d records) from %s to %s", len(manifest.shards), manifest.records,
             manifest.location, dest)
    return dataclasses.replace(manifest, location=str(dest).rstrip("/"))


def _tmp_name(name: str, run_id: str) -> str:
    """The temporary name of ``name`` (a shard, maybe ``label=<v>/<shard>``) in its own directory."""
    head, base = posixpath.split(name)
    tmp = f"{TMP_PREFIX}{run_id}-{base}"
    return f"{head}/{tmp}" if head else tmp


def _copy(manifest: Manifest, raw: bytes, source, target, dest: str, run_id: str, progress: bool,
          check: bool) -> None:
    """The set's files (``shardset.setfiles``: shards, then the files beside them), each checked against the
    manifest and staged under a temporary name; then the one commit
    path (``shardset.commit``). On a failure the staged shards are removed again and a set already at the
    destination stays as it was."""
    files = set_files(manifest)
    bar = progress_bar(progress, desc="upload" if is_s3(dest) else "download", total=sum(f.bytes for f in files),
                       leave=False)
    tick: Callable[[int], None] = bar.update
    local_target = target.local_path(MANIFEST_NAME) is not None
    made: list[str] = []  # directories this copy created
    if local_target and not os.path.isdir(target.local_path("")):
        os.makedirs(target.local_path(""))
        made.append(target.local_path(""))
    staging = None if local_target else tempfile.mkdtemp(prefix="tfpipe-transfer-")
    moves: list[Move] = []
    try:
        for info in files:  # the shards and the files beside them (vocabularies)
            tmp = _tmp_name(info.name, run_id)
            local = source.local_path(info.name)
            fetched = None
            if local is None:  # remote source: fetch to a temporary name (in the target dir when it is local)
                fetched = (_beside(target.local_path(tmp), made) if local_target
                           else os.path.join(staging, info.name.replace("/", "__")))
                if local_target:
                    moves.append(Move(tmp, info.name, info.bytes))
                source.fetch(info.name, fetched, callback=tick)
                local = fetched
            elif not os.path.exists(local):
                raise IntegrityError(f"{manifest.location}: {info.name} listed in the manifest is missing")
            try:
                if check:
                    check_file(local, info, source.url)
                if fetched is not None and local_target:
                    with open(fetched, "rb+") as f:
                        os.fsync(f.fileno())
                else:
                    moves.append(Move(tmp, info.name, info.bytes))
                    _put(target, local, tmp, info.sha256, None if fetched else tick, made)
            finally:
                if fetched is not None and not local_target and os.path.exists(fetched):
                    os.unlink(fetched)
        parts = [(f"{p.path}/{MANIFEST_NAME}", source.read_bytes(f"{p.path}/{MANIFEST_NAME}"))
                 for p in manifest.parts]  # a group: each part's manifest, then the group's
        commit_set(target, moves, raw, run_id=run_id, parts=parts, where=str(dest))
    except BaseException:
        for m in moves:  # staged, never committed (a failed commit moved its shards back)
            try:
                target.delete(m.tmp)
            except Exception as exc:  # noqa: BLE001 - the copy's own error is what the user sees
                log.warning("could not remove %s from %s: %s", m.tmp, dest, exc)
        for path in reversed(made):
            with contextlib.suppress(OSError):
                os.rmdir(path)
        raise
    finally:
        if staging is not None:
            shutil.rmtree(staging, ignore_errors=True)
        bar.close()


def _beside(path: str, made: list[str]) -> str:
    """``path``, its directory created if need be (a group's shards sit in part directories)."""
    parent = os.path.dirname(path)
    if not os.path.isdir(parent):
        os.makedirs(parent)
        made.append(parent)
    return path


def _put(target, local: str, name: str, sha256: str, tick, made: list[str]) -> None:
    """Place a local file under the temporary ``name`` at the target: S3 upload, or copy + fsync locally."""
    upload_file = getattr(target, "upload_file", None)
    if upload_file is not None:
        upload_file(local, name, callback=tick, sha256=sha256)
        return
    tmp = _beside(target.local_path(name), made)
    with open(local, "rb") as fin, create_new(tmp) as fout:
        while chunk := fin.read(_COPY_CHUNK):
            fout.write(chunk)
            if tick is not None:
                tick(len(chunk))
        fout.flush()
        os.fsync(fout.fileno())


def upload(src_dir: str, dest_url: str, *, overwrite: bool = False, progress: bool = False,
           endpoint_url: str | None = None) -> Manifest:
    """Upload a local shard set to ``s3://bucket/prefix``: shards (checked against the manifest), then the
    manifest; refuses a non-empty destination unless ``overwrite``."""
    if not is_s3(dest_url):
        raise TfpipeError(f"upload destination must be an s3:// URL, got {dest_url!r}")
    return copy_set(src_dir, dest_url, overwrite=overwrite, progress=progress, endpoint_url=endpoint_url)


def download(src_url: str, dest_dir: str, *, overwrite: bool = False, progress: bool = False,
             endpoint_url: str | None = None) -> Manifest:
    """Download a shard set from ``s3://bucket/prefix`` into a local directory, checking every file's size
    and sha256 against the manifest; the manifest is written last."""
    if not is_s3(src_url):
        raise TfpipeError(f"download source must be an s3:// URL, got {src_url!r}")
    if is_s3(dest_dir):
        raise TfpipeError(f"download destination must be a local directory, got {dest_dir!r}")
    return copy_set(src_url, dest_dir, overwrite=overwrite, progress=progress, endpoint_url=endpoint_url)
