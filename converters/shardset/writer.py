"""ShardSetWriter: size-bounded, atomic TFRecord shards plus the manifest, written last.

Records arrive already framed (see ``examples.serialize_batch``). A shard is closed *before* the record
that would cross the target size (framing counted; with GZIP the target bounds the uncompressed stream).
Each shard is written under a temporary name unique to the run, fsynced, and renamed to
``{prefix}-{i:05d}-of-{n:05d}.tfrecord`` only when the whole set is complete; the manifest comes last
(``commit.commit_set``, which also replaces a set committed there before, for ``--overwrite``).
An interrupted run therefore leaves no file under a final name, and no manifest; a run whose manifest cannot
be written (disk full at the very end) takes its renamed shards back and leaves the old set as it was.

One writer per output: ``output.prepare_output`` claims the location before it looks at it (and checks that
``--overwrite`` would replace only tfpipe's files); the writer releases the claim when the run finishes or
aborts.
"""
from __future__ import annotations

import logging
import os
from typing import Any, Iterable

import numpy as np

from ..storage import TMP_PREFIX, Storage
from ..tfrecord.layout import EXAMPLE_LAYOUT, RecordLayout
from ..tfrecord.schema import Schema
from ..util.errors import TfpipeError
from ..util.fs import create_new
from .commit import Move, commit_set
from .cuts import plan_cuts
from .manifest import InputStats, Manifest, ShardInfo, manifest_bytes
from .options import ShardOutputOptions
from .output import new_run_id, output_errors, prepare_output, release_claim
from .reader import check_file
from .setfiles import SetFile
from .shardfile import ShardStream

__all__ = ["ShardSetWriter", "prepare_output", "output_errors", "new_run_id"]

log = logging.getLogger(__name__)


class ShardSetWriter:
    """Write framed records into size-bounded shards; ``finish`` renames them and writes the manifest.

    Use as a context manager: leaving it without ``finish`` (an exception) removes the temporary shards and
    releases the claim.
    Operating-system errors become ``OutputError`` naming the path and the reason.
    """

    def __init__(self, out: str, output: ShardOutputOptions | None = None, *, overwrite: bool = False,
                 storage: Storage | None = None, run_id: str | None = None, **storage_options):
        output = output if output is not None else ShardOutputOptions()
        if not isinstance(output, ShardOutputOptions):
            raise TypeError(f"output must be a ShardOutputOptions, got {type(output).__name__}")
        self.out = str(out)
        self.output = output
        self.compression = output.compression
        self.names = output.names
        self.shard_bytes = output.shard_size
        self.run_id = run_id or new_run_id()  # a group's parts: the group's run (its commit journal names them)
        owned = storage is None
        self.storage = storage or prepare_output(self.out, overwrite=overwrite, run_id=self.run_id,
                                                 **storage_options)
        self._owned = owned  # the claim is this writer's to release
        try:
            with output_errors(self.out):
                self._staging = self.storage.staging_dir()
        except BaseException:
            self._release()
            raise
        self._done: list[tuple[str, int, int, str]] = []  # (tmp_name, records, bytes, sha256)
        self._side: list[tuple[str, SetFile]] = []  # (tmp_name, file): files carried beside the shards (``carry``)
        self._file = None
        self._used = 0
        self._records = 0
        self._tmp_name = None
        self.records = 0
        self._finished = False

    # -- shard file handling -------------------------------------------------------------------------
    def _open(self) -> None:
        idx = len(self._done)
        self._tmp_name = f"{TMP_PREFIX}{self.run_id}-{self.names.prefix}-{idx:05d}{self.names.suffix}"
        self._file = ShardStream(create_new(os.path.join(self._staging, self._tmp_name)), self.compression)
        self._used = 0
        self._records = 0

    def suspend(self) -> None:
        """Close the open shard's file descriptor but keep the shard open: the next ``write`` (or ``finish``)
        reopens it and appends (a writer of many parts keeps its open files bounded so; same bytes)."""
        if self._file is not None:
            self._file.suspend()

    def _resume(self) -> None:
        if self._file is not None:
            self._file.resume(self._tmp_path())

    def _close(self) -> None:
        if self._file is None:
            return
        self._resume()
        f = self._file
        f.close()
        path = os.path.join(self._staging, self._tmp_name)
        self.storage.stage(path, self._tmp_name)
        self._done.append((self._tmp_name, self._records, f.nbytes, f.sha256))
        log.debug("closed shard %s: %d records, %d bytes", self._tmp_name, self._records, f.nbytes)
        self._file = None

    def _tmp_path(self) -> str:
        return os.path.join(self._staging, self._tmp_name or "")

    # -- public API ----------------------------------------------------------------------------------
    def write(self, framed: np.ndarray | bytes, lengths: np.ndarray | Iterable[int],
              rows: np.ndarray | Iterable[int] | None = None) -> None:
        """Append framed records (concatenated bytes) with their framed lengths. ``rows``: the rows each record
        holds (columnar blocks, ``tfrecord.layout``; default one each), which the shards' counts add up."""
        if self._finished:
            raise TfpipeError("ShardSetWriter.write after finish")
        lengths = np.asarray(lengths, dtype=np.int64)
        if lengths.size == 0:
            return
        rows = np.asarray(rows, dtype=np.int64) if rows is not None else None
        if rows is not None and rows.shape != lengths.shape:
            raise ValueError(f"rows ({rows.size}) do not match the records ({lengths.size})")
        mv = memoryview(framed).cast("B") if not isinstance(framed, np.ndarray) else memoryview(framed)
        if int(lengths.sum()) != mv.nbytes:
            raise ValueError(f"framed bytes ({mv.nbytes}) do not match the sum of lengths ({int(lengths.sum())})")
        with output_errors(self._tmp_path() if self._file is not None else self.out):
            if self._file is None:
                self._open()
            self._resume()
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
                count = stop - start if rows is None else int(rows[start:stop].sum())
                self._records += count
                self.records += count

    def shard_records(self) -> list[int]:
        """Records in each shard so far, in order (the open shard last); a record stays in the shard it was
        written to."""
        done = [records for _, records, _, _ in self._done]
        return done + [self._records] if self._file is not None else done

    def close_shard(self) -> None:
        """Close the open shard now, whatever its size: the next ``write`` starts a new one (exact counts)."""
        with output_errors(self._tmp_path()):
            self._close()

    def seal(self) -> tuple[list[Move], list[ShardInfo]]:
        """Close the open shard; the moves that give every shard its final name (names relative to this
        writer's location) and the shards as the manifest lists them. A group commits its parts' shards with
        its own manifest (``prep.split``); then it calls ``committed``."""
        with output_errors(self._tmp_path()):
            self._close()
        n = len(self._done)
        moves, shards = [], []
        for i, (tmp, records, nbytes, sha) in enumerate(self._done):
            final = self.names.format(i, n)
            moves.append(Move(tmp, final, nbytes))
            shards.append(ShardInfo(final, records, nbytes, sha))
        return moves, shards

    def carry(self, source: Storage, files: Iterable[SetFile], where: str) -> None:
        """Stage a copy of each of ``files`` (a set's side files, ``setfiles.side_files_of``: its vocabularies)
        from the set at ``source`` (``where`` names it), checked against its manifest entry (size, sha256);
        ``finish`` publishes them under their names with the shards. The manifest's ``extra.files`` is the
        caller's to pass on."""
        for f in files:
            tmp = f"{TMP_PREFIX}{self.run_id}-side{len(self._side):05d}-{os.path.basename(f.name)}"
            path = os.path.join(self._staging, tmp)
            self._side.append((tmp, f))  # before the copy: ``abort`` removes whatever it left
            local = source.local_path(f.name)
            if local is not None:
                check_file(local, f, where)  # a regular file (never a FIFO or a link) holding what it should
            with output_errors(path):
                source.fetch(f.name, path)
                with open(path, "rb+") as fh:
                    os.fsync(fh.fileno())
            check_file(path, f, where)
            with output_errors(path):
                self.storage.stage(path, tmp)

    def manifest(self, shards, *, schema: Schema, inputs: Iterable[InputStats] = (),
                 options: dict[str, Any] | None = None, kind: str = "libsvm",
                 extra: dict[str, Any] | None = None, layout: RecordLayout = EXAMPLE_LAYOUT) -> Manifest:
        return Manifest(records=self.records, shards=tuple(shards), schema=schema, inputs=tuple(inputs),
                        options=dict(options or {}), compression=self.compression, kind=kind,
                        extra=dict(extra or {}), location=self.out, layout=layout)

    def committed(self) -> None:
        """The shards were published by a commit of the caller's (a group's): nothing left to take back."""
        self._done.clear()
        self._finished = True
        self._release()

    def finish(self, *, schema: Schema, inputs: Iterable[InputStats] = (), options: dict[str, Any] | None = None,
               kind: str = "libsvm", extra: dict[str, Any] | None = None,
               layout: RecordLayout = EXAMPLE_LAYOUT) -> Manifest:
        """Close the open shard, give every shard its final name, and write the manifest last, replacing the
        set committed there before (``commit.commit_set``). If any of it fails, the shards already renamed
        are removed again and the old set is put back (``abort``): no final name without a manifest.
        ``layout``: the set's record layout (``tfrecord.layout``; records then count rows)."""
        try:
            moves, shards = self.seal()
            moves += [Move(tmp, f.name, f.bytes) for tmp, f in self._side]  # carried beside the shards
            manifest = self.manifest(shards, schema=schema, inputs=inputs, options=options, kind=kind,
                                     extra=extra, layout=layout)
            with output_errors(self.out):
                commit_set(self.storage, moves, manifest_bytes(manifest), run_id=self.run_id, where=self.out)
        except BaseException:
            self.abort()
            raise
        self._finished = True
        self._done.clear()
        self._side.clear()
        self._release()
        log.info("wrote %d records in %d shards to %s", self.records, len(manifest.shards), self.out)
        return manifest

    def abort(self) -> None:
        """Remove every temporary file of this run (a failed commit has already taken back what it renamed),
        then release the claim."""
        if self._file is not None:
            self._file.discard()
            self._done.append((self._tmp_name, 0, 0, ""))
            self._file = None
        try:
            for tmp in [t for t, *_ in self._done] + [t for t, _ in self._side]:
                try:
                    os.unlink(os.path.join(self._staging, tmp))
                except FileNotFoundError:
                    pass
                except OSError as exc:
                    log.warning("could not remove %s: %s", tmp, exc)
                if self.storage.local_path(tmp) is None:
                    self._quietly(self.storage.delete, tmp)
            self._sweep()
        finally:
            self._done.clear()
            self._side.clear()
            self._release()

    def _sweep(self) -> None:
        """Remove whatever else carries this run's temporary prefix: a signal can land between creating a
        temporary shard and recording it (the run id makes the prefix this run's alone)."""
        mine = f"{TMP_PREFIX}{self.run_id}-"
        try:
            local = [n for n in os.listdir(self._staging) if n.startswith(mine)]
        except OSError:
            local = []
        for name in local:
            try:
                os.unlink(os.path.join(self._staging, name))
            except OSError as exc:
                log.warning("could not remove %s: %s", name, exc)
        if self.storage.local_path("") is None:  # an object store: temporary keys of this run
            try:
                remote = [n for n in self.storage.list() if n.startswith(mine)]
            except Exception as exc:  # noqa: BLE001 - cleanup goes on; the run's own error is what the user sees
                log.warning("could not list %s to clean up: %s", self.out, exc)
                remote = []
            for name in remote:
                self._quietly(self.storage.delete, name)

    def _quietly(self, fn, name: str) -> None:
        try:
            fn(name)
        except Exception as exc:  # noqa: BLE001 - cleanup goes on; the run's own error is what the user sees
            log.warning("could not remove %s from %s: %s", name, self.out, exc)

    def _release(self) -> None:
        if self._owned:
            release_claim(self.storage)

    def __enter__(self) -> "ShardSetWriter":
        return self

    def __exit__(self, exc_type, exc, tb) -> None:
        if not self._finished:  # an error, or a block that ended without finish(): nothing was published
            self.abort()
