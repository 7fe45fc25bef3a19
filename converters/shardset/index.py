"""``tfpipe index``: adopt TFRecord files tfpipe did not write as a shard set, by writing its manifest.

The set is a local directory, an ``s3://`` prefix, a glob over one folder (``data/*.tfrecords``,
``s3://bucket/data/train-*``) or one local file. Every file is read whole with CRC checks (gzip decided by the framing,
``tfrecord.reader.gzip_head``), its records counted, its bytes hashed (sha256) and its records tallied for the schema
(``infer.SchemaTally``: pure); ``--workers`` files are read at once, in worker processes. Files keep their names: a
name that is not a plain visible file name of the set's own folder is refused with the reason, as is damage (file
and byte offset), a mix of gzip and plain files, or an existing ``index.json`` (unless ``overwrite``).
``index.json`` is written last and atomically, so every command reads the set as one tfpipe wrote; the manifest's
``kind`` is ``adopted`` and ``options.source`` is ``index``.
"""
from __future__ import annotations

import fnmatch
import glob
import gzip
import io
import logging
import os
import tempfile
from dataclasses import dataclass

from ..storage import is_s3, open_storage
from ..tfrecord.reader import gzip_head, iter_record_chunks
from ..util.checks import as_int
from ..util.errors import InputError, IntegrityError, MissingInputError, OutputExistsError, OverlapError, TfpipeError
from ..util.fs import HashingReader
from ..util.progress import progress_bar
from ..util.workerpool import worker_pool
from .infer import SchemaTally
from .manifest import ADOPTED_KIND, MANIFEST_NAME, Manifest, ShardInfo, manifest_bytes
from .naming import check_adopted_name
from .overlap import group_of_part
from .reader import shard_file_problem

__all__ = ["index_set", "FileScan", "scan_records", "resolve_set"]

log = logging.getLogger(__name__)

_CHUNK = 16 << 20
_WILD = "*?["


@dataclass
class FileScan:
    """One file read whole: records, bytes on disk, sha256 of those bytes, whether gzip, the schema tally."""

    name: str
    records: int
    bytes: int
    sha256: str
    gzip: bool
    tally: SchemaTally


def scan_records(path: str, name: str, where: str | None = None) -> FileScan:
    """Read the file at ``path`` (the set's file ``name``, shown as ``where``) with CRC checks, hashing every byte
    and tallying every record; damage is an IntegrityError naming the file and the byte offset (of the
    uncompressed stream for a gzip file)."""
    where = where or name
    tally = SchemaTally()
    with open(path, "rb") as raw:
        gz = gzip_head(raw.read(12))
        raw.seek(0)
        hashed = HashingReader(raw)
        buffered = io.BufferedReader(hashed, buffer_size=_CHUNK)
        stream = gzip.GzipFile(fileobj=buffered, mode="rb") if gz else buffered
        records = 0
        total = None if gz else os.fstat(raw.fileno()).st_size
        try:
            for chunk in iter_record_chunks(iter(lambda: stream.read(_CHUNK), b""), name=where, total=total):
                for payload in chunk.payloads():
                    tally.add(payload)
                records += len(chunk.starts)
        except IntegrityError as exc:
            unc = " of the uncompressed stream" if gz else ""
            raise IntegrityError(f"{where}: {exc.reason} at byte {exc.offset}{unc} (after {records} good records): "
                                 "not a TFRecord file, or damaged") from None
        except (OSError, EOFError, gzip.BadGzipFile) as exc:
            raise IntegrityError(f"{where}: corrupt GZIP stream ({exc}) after {records} good records") from None
        while buffered.read(_CHUNK):  # hash the rest (a gzip trailer)
            pass
    return FileScan(name, records, hashed.nbytes, hashed.sha.hexdigest(), gz, tally)


_STORES: dict[tuple, object] = {}  # one storage (one S3 client and connection pool) per set, per process
if hasattr(os, "register_at_fork"):  # a forked worker must not share its parent's HTTP connections
    os.register_at_fork(after_in_child=_STORES.clear)


def _storage(base: str, storage_options: dict):
    """The set's storage, opened once per process: every file of a 2,000-object prefix is read through one
    client, not one each."""
    key = (base, tuple(sorted(storage_options.items())), os.environ.get("AWS_ENDPOINT_URL_S3"),
           os.environ.get("AWS_ENDPOINT_URL"))
    store = _STORES.get(key)
    if store is None:
        store = _STORES[key] = open_storage(base, **storage_options)
    return store


def _scan_one(base: str, name: str, storage_options: dict) -> FileScan:
    """``scan_records`` of the set's file ``name``, fetched to a temporary file first when remote."""
    storage = _storage(base, storage_options)
    where = f"{base.rstrip('/')}/{name}"
    local = storage.local_path(name)
    if local is not None:
        problem = shard_file_problem(local)
        if problem:
            raise InputError(f"{where}: {problem}", reason="not_a_file")
        return scan_records(local, name, where)
    with tempfile.TemporaryDirectory(prefix="tfpipe-index-") as tmp:
        path = os.path.join(tmp, "file")
        storage.fetch(name, path)
        return scan_records(path, name, where)


def resolve_set(target: str, **storage_options) -> tuple[str, list[str]]:
    """``(base, names)``: the set's folder (directory or ``s3://`` prefix) and the files it adopts, sorted.

    A folder adopts every visible file directly in it but ``index.json``; a glob only the matches of its last
    component (wildcards elsewhere are refused: the files of a set share one folder); a local file itself. Every
    name must pass ``naming.check_adopted_name``; refusals say why."""
    target = str(target)
    scheme, sep, rest = target.partition("://")
    path = rest if sep else target
    head, _, last = path.rstrip("/").rpartition("/") if any(c in path for c in _WILD) else (path, "", "")
    if not sep and not last and os.path.isfile(path):  # one file: the set of that file in its folder
        head, last = os.path.dirname(path), glob.escape(os.path.basename(path))
    if any(c in head for c in _WILD):
        raise InputError(f"{target}: wildcards only in the file name part: the files of a set share one folder "
                         "(index each folder on its own)", reason="bad_set")
    base = f"{scheme}{sep}{head}" if sep else (head or ".")
    if not is_s3(base) and not os.path.isdir(base):
        if not os.path.exists(base):
            raise MissingInputError(f"{base}: no such directory", reason="bad_set")
        raise InputError(f"{base}: not a directory: give the folder that holds the TFRecord files (or a glob)",
                         reason="bad_set")
    listed = _storage(base, storage_options).list()
    if last:
        names = [n for n in listed if fnmatch.fnmatchcase(n, last)]
    else:
        names = [n for n in listed if not n.startswith(".") and n != MANIFEST_NAME]
        if not is_s3(base):
            names = [n for n in names if not os.path.isdir(os.path.join(base, n))]
    if not names:
        raise InputError(f"{target}: no files to index", reason="empty_input")
    for n in names:
        try:
            check_adopted_name(n)
        except ValueError as exc:
            raise InputError(f"{base.rstrip('/')}/{n}: cannot be a file of the set: {exc}",
                             reason="bad_name") from None
    return base, sorted(names)


def index_set(target: str | os.PathLike, *, overwrite: bool = False, workers: int = 1, progress: bool = False,
              label: str | None = "label", **storage_options) -> Manifest:
    """Adopt the TFRecord files of ``target`` (folder, glob or ``s3://`` prefix) as a shard set: read them all
    (CRC, counts, sha256, schema), then write ``index.json`` beside them, last. Returns the Manifest.

    ``label``: the feature taken as the label when the records have it. Refused: an existing manifest (unless
    ``overwrite``), bad names, damaged files, gzip and plain files mixed."""
    workers = as_int(workers, "workers", minimum=1)
    try:
        return _index(str(target), overwrite, workers, progress, label, storage_options)
    finally:
        _STORES.clear()


def _index(target: str, overwrite: bool, workers: int, progress: bool, label: str | None,
           storage_options: dict) -> Manifest:
    base, names = resolve_set(target, **storage_options)
    group = group_of_part(base, **storage_options)
    if group is not None:
        raise OverlapError(f"{base} is a part of the group {group} (its index.json lists it): indexing the part "
                           "alone would leave the group disagreeing with it; the part is indexed already (verify "
                           f"or read the group: {group}), or copy it out first (tfpipe reshard {base} --out NEW)")
    storage = _storage(base, storage_options)
    where = f"{base.rstrip('/')}/{MANIFEST_NAME}"
    if storage.exists(MANIFEST_NAME) and not overwrite:
        raise OutputExistsError(f"{where} exists: this set is indexed already (pass --overwrite to index it again)")
    scans = _scan_all(base, names, workers, progress, storage_options)
    kinds = {s.gzip for s in scans}
    if len(kinds) > 1:
        gz = [s.name for s in scans if s.gzip][:3]
        plain = [s.name for s in scans if not s.gzip][:3]
        raise InputError(f"{target}: gzip files ({', '.join(gz)}) and plain ones ({', '.join(plain)}) mixed: a shard "
                         "set is one or the other (index them apart)", reason="mixed_compression")
    tally = SchemaTally()
    for s in scans:
        tally.merge(s.tally)
    inferred = tally.result(label)
    if inferred.raw_reason:
        log.info("%s: raw records (%s)", target, inferred.raw_reason)
    extra = {"source": "index", "indexed": target, "features": inferred.features}
    if inferred.raw_reason:
        extra["raw_records"] = inferred.raw_reason
    manifest = Manifest(records=sum(s.records for s in scans),
                        shards=tuple(ShardInfo(s.name, s.records, s.bytes, s.sha256) for s in scans),
                        schema=inferred.schema, options={"source": "index"},
                        compression="gzip" if kinds == {True} else None, kind=ADOPTED_KIND, extra=extra,
                        location=base)
    if storage.exists(MANIFEST_NAME) and not overwrite:  # written while we read: still refused
        raise OutputExistsError(f"{where} appeared while indexing (pass --overwrite to replace it)")
    try:
        storage.write_bytes_atomic(MANIFEST_NAME, manifest_bytes(manifest))
    except OSError as exc:
        raise TfpipeError(f"cannot write {where}: {exc.strerror or exc}") from None
    log.info("indexed %d file(s), %d records -> %s", len(scans), manifest.records, where)
    return manifest


def _scan_all(base: str, names: list[str], workers: int, progress: bool, storage_options: dict) -> list[FileScan]:
    """Every file scanned, in name order; with ``workers > 1`` that many files at once in worker processes."""
    out: list[FileScan] = []
    with progress_bar(progress, desc="index", total=len(names), unit="file") as bar:
        if workers == 1 or len(names) == 1:
            for n in names:
                out.append(_scan_one(base, n, storage_options))
                bar.update(1)
            return out
        with worker_pool(min(workers, len(names))) as pool:  # forked where safe; they die with this process
            futures = [pool.submit(_scan_one, base, n, storage_options) for n in names]
            try:
                for f in futures:
                    out.append(f.result())
                    bar.update(1)
            finally:
                for f in futures:
                    f.cancel()
    return out


