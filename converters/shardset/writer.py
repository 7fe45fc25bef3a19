"""ShardSetWriter: size-bounded, atomic TFRecord shards plus the manifest, written last.

Records arrive already framed (see ``examples.serialize_batch``). A shard is closed *before* the record
that would cross the target size (framing counted; with GZIP the target bounds the uncompressed stream).
Each shard is written under a temporary name, fsynced, and renamed to
``{prefix}-{i:05d}-of-{n:05d}.tfrecord`` only when the whole set is complete; the manifest comes last.
An interrupted run therefore leaves no file under a final name, and no manifest.
"""
from __future__ import annotations

import gzip
import logging
import os
from typing import Any, Iterable

import numpy as np

from ..storage import TMP_PREFIX, Storage, open_storage
from ..tfrecord.schema import Schema
from ..util.errors import OutputExistsError, TfpipeError
from ..util.fs import HashingWriter, fsync_dir
from .cuts import plan_cuts
from .manifest import MANIFEST_NAME, InputStats, Manifest, ShardInfo, manifest_bytes
from .naming import ShardName
from .options import ShardOutputOptions

__all__ = ["ShardSetWriter", "prepare_output"]

log = logging.getLogger(__name__)


def prepare_output(out: str, *, overwrite: bool, **storage_options) -> Storage:
    """Open the output location; refuse a non-empty one unless ``overwrite`` (then clear tfpipe's files)."""
    storage = open_storage(out, **storage_options)
    names = storage.list()
    if names:
        if not overwrite:
            leftovers = [n for n in names if n.startswith(TMP_PREFIX)]
            hint = (" (it holds temporary files of an interrupted run)" if leftovers and len(leftovers) == len(names)
                    else "")
            raise OutputExistsError(f"output {out} is not empty{hint}: pass --overwrite to replace its contents")
        ours = [n for n in names if n == MANIFEST_NAME or n.startswith(TMP_PREFIX) or _is_shard(n)]
        others = sorted(set(names) - set(ours))
        if others:
            raise OutputExistsError(
                f"output {out} holds files tfpipe did not write ({', '.join(others[:5])}"
                f"{', ...' if len(others) > 5 else ''}); refusing to overwrite them: choose an empty location")
        # manifest first, so a half-deleted set is never taken for a complete one
        for n in sorted(ours, key=lambda n: n != MANIFEST_NAME):
            storage.delete(n)
    return storage


def _is_shard(name: str) -> bool:
    try:
        ShardName.parse(name)
        return True
    except ValueError:
        return False


class ShardSetWriter:
    """Write framed records into size-bounded shards; ``finish`` renames them and writes the manifest.

    Use as a context manager: on an exception the temporary shards are removed.
    """

    def __init__(self, out: str, output: ShardOutputOptions | None = None, *, overwrite: bool = False,
                 storage: Storage | None = None, **storage_options):
        output = output if output is not None else ShardOutputOptions()
        if not isinstance(output, ShardOutputOptions):
            raise TypeError(f"output must be a ShardOutputOptions, got {type(output).__name__}")
        self.out = str(out)
        self.output = output
        self.compression = output.compression
        self.names = output.names
        self.shard_bytes = output.shard_size
        self.storage = storage or prepare_output(self.out, overwrite=overwrite, **storage_options)
        self._staging = self.storage.staging_dir()
        self._done: list[tuple[str, int, int, str]] = []  # (tmp_name, records, bytes, sha256)
        self._file = None
        self._used = 0
        self._records = 0
        self._tmp_name = None
        self.records = 0
        self._finished = False

    # -- shard file handling -------------------------------------------------------------------------
    def _open(self) -> None:
        idx = len(self._done)
        self._tmp_name = f"{TMP_PREFIX}{self.names.prefix}-{idx:05d}{self.names.suffix}"
        raw = open(os.path.join(self._staging, self._tmp_name), "wb")
        self._raw = raw
        self._hash = HashingWriter(raw)
        if self.compression:
            self._file = gzip.GzipFile(filename="", mode="wb", fileobj=self._hash, mtime=0, compresslevel=6)
        else:
            self._file = self._hash
        self._used = 0
        self._records = 0

    def _close(self) -> None:
        if self._file is None:
            return
        if self.compression:
            self._file.close()
        self._raw.flush()
        os.fsync(self._raw.fileno())
        self._raw.close()
        path = os.path.join(self._staging, self._tmp_name)
        self.storage.stage(path, self._tmp_name)
        self._done.append((self._tmp_name, self._records, self._hash.nbytes, self._hash.sha.hexdigest()))
        log.debug("closed shard %s: %d records, %d bytes", self._tmp_name, self._records, self._hash.nbytes)
        self._file = None

    # -- public API ----------------------------------------------------------------------------------
    def write(self, framed: np.ndarray | bytes, lengths: np.ndarray | Iterable[int]) -> None:
        """Append framed records (concatenated bytes) with their framed lengths."""
        if self._finished:
            raise TfpipeError("ShardSetWriter.write after finish")
        lengths = np.asarray(lengths, dtype=np.int64)
        if lengths.size == 0:
            return
        mv = memoryview(framed).cast("B") if not isinstance(framed, np.ndarray) else memoryview(framed)
        if int(lengths.sum()) != mv.nbytes:
            raise ValueError(f"framed bytes ({mv.nbytes}) do not match the sum of lengths ({int(lengths.sum())})")
        if self._file is None:
            self._open()
        offsets = np.concatenate([[0], np.cumsum(lengths)])
        cuts = plan_cuts(lengths, self._used, self.shard_bytes)
        bounds = [0] + [c for c in cuts if c > 0] + [len(lengths)]
        for k in range(len(bounds) - 1):
            start, stop = bounds[k], bounds[k + 1]
            if k > 0 or (cuts and cuts[0] == 0):  # this segment starts a new shard
                self._close()
                self._open()
            a, b = int(offsets[start]), int(offsets[stop])
            self._file.write(mv[a:b])
            self._used += b - a
            self._records += stop - start
            self.records += stop - start

    def shard_records(self) -> list[int]:
        """Records in each shard so far, in order (the open shard last); a record stays in the shard it was
        written to."""
        done = [records for _, records, _, _ in self._done]
        return done + [self._records] if self._file is not None else done

    def close_shard(self) -> None:
        """Close the open shard now, whatever its size: the next ``write`` starts a new one (exact counts)."""
        self._close()

    def finish(self, *, schema: Schema, inputs: Iterable[InputStats] = (), options: dict[str, Any] | None = None,
               kind: str = "libsvm", extra: dict[str, Any] | None = None) -> Manifest:
        """Close the open shard, give every shard its final name, and write the manifest last."""
        self._close()
        n = len(self._done)
        shards = []
        for i, (tmp, records, nbytes, sha) in enumerate(self._done):
            final = self.names.format(i, n)
            self.storage.publish(tmp, final)
            shards.append(ShardInfo(final, records, nbytes, sha))
        if self.storage.local_path(MANIFEST_NAME):
            fsync_dir(self._staging)
        manifest = Manifest(
            records=self.records, shards=tuple(shards), schema=schema, inputs=tuple(inputs),
            options=dict(options or {}), compression=self.compression, kind=kind, extra=dict(extra or {}),
            location=self.out,
        )
        self.storage.write_bytes_atomic(MANIFEST_NAME, manifest_bytes(manifest))
        self._finished = True
        log.info("wrote %d records in %d shards to %s", self.records, n, self.out)
        return manifest

    def abort(self) -> None:
        """Remove every temporary shard of this run (nothing under a final name exists yet)."""
        if self._file is not None:
            try:
                if self.compression:
                    self._file.close()
                self._raw.close()
            except OSError:
                pass
            self._done.append((self._tmp_name, 0, 0, ""))
            self._file = None
        for tmp, *_ in self._done:
            try:
                os.unlink(os.path.join(self._staging, tmp))
            except FileNotFoundError:
                pass
            if self.storage.local_path(tmp) is None:
                self.storage.delete(tmp)
        self._done.clear()

    def __enter__(self) -> "ShardSetWriter":
        return self

    def __exit__(self, exc_type, exc, tb) -> None:
        if exc_type is not None and not self._finished:
            self.abort()
