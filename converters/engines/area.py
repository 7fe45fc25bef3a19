"""A run's place under the output location: the temporary area and the temporary shard names.

Layout for a run with id ``R`` writing to ``OUT`` (a local directory, ``s3://bucket/prefix`` or any scheme
``converters.storage`` opens):

* ``OUT/.tfpipe-tmp-R/`` — the temporary area (a directory, or a key prefix): what one step leaves for a
  later one, e.g. ``u0000012.len`` (pass 1: framed record lengths of unit 12) or ``u0000003-c000001.ids``
  (pass 1: token ids of chunk 1 of unit 3). Nothing is ever written in the current directory.
* ``OUT/.tfpipe-tmp-R-train-00003.tfrecord`` — shard 3 as pass 2 wrote it; finalize renames it to
  ``train-00003-of-00012.tfrecord``.

``RunArea`` is a small frozen value (picklable): every task of every engine opens the storages from it on its
own (once per process). ``cleanup`` removes the area and the run's temporary shards, on success and on failure,
so nothing of the run is left but the shard set and its manifest.
"""
from __future__ import annotations

import logging
import os
import shutil
from dataclasses import dataclass, field

import numpy as np

from ..shardset.output import check_run_id, new_run_id, prepare_output, release_claim
from ..storage import TMP_PREFIX, Storage, is_s3, open_storage
from ..storage.local import LocalStorage
from ..util.errors import TfpipeError
from ..util.fs import write_atomic
from ..util.workerpool import in_worker

__all__ = ["RunArea", "new_run_id", "prepare_run"]

log = logging.getLogger(__name__)

_STORAGES: dict[tuple, Storage] = {}  # per process: (run id, url, options) -> opened storage


def _join(base: str, name: str) -> str:
    return base.rstrip("/") + "/" + name


def _open(run_id: str, url: str, options: tuple, mark: str) -> Storage:
    key = (run_id, url, options)
    st = _STORAGES.get(key)
    if st is not None and in_worker() and type(st) is LocalStorage:  # the driver's, inherited by fork
        st = None
    if st is None:
        st = open_storage(url, **dict(options))
        if in_worker() and isinstance(st, LocalStorage):
            st = _WhileRunning(st.url, os.path.abspath(mark))
        st = _STORAGES[key] = st
    return st


class _WhileRunning(LocalStorage):
    """A run's local output or temporary area as a worker process opens it: it writes only while the run's
    temporary area (``mark``) exists and never re-creates it. The driver makes the area before any step and
    removes it when the run ends, as does a later run that takes the output over: a worker left behind (its
    parent killed) then writes nothing into that output, not even the area's directory."""

    def __init__(self, path: str, mark: str):
        super().__init__(path)
        self.mark = mark

    def _check(self) -> None:
        if not os.path.isdir(self.mark):
            raise TfpipeError(f"the temporary area {self.mark} is gone: its run has ended, this worker writes "
                              "nothing more")

    def write_bytes_atomic(self, name: str, data) -> None:
        self._check()
        write_atomic(self._p(name), data, tmp_prefix=TMP_PREFIX)  # no makedirs: a removed area stays removed

    def staging_dir(self) -> str:
        self._check()
        return self.path


@dataclass(frozen=True)
class RunArea:
    """Where run ``run_id`` writes under ``out``; ``storage_options`` go to ``open_storage`` (e.g. an S3
    ``endpoint_url``)."""

    out: str
    run_id: str
    storage_options: tuple[tuple[str, object], ...] = field(default=())

    def __post_init__(self):
        check_run_id(self.run_id)
        object.__setattr__(self, "out", str(self.out))
        object.__setattr__(self, "storage_options", tuple(sorted(dict(self.storage_options).items())))

    # -- where -------------------------------------------------------------------------------------
    @property
    def temp_url(self) -> str:
        return _join(self.out, f"{TMP_PREFIX}{self.run_id}")

    @property
    def shard_tmp_prefix(self) -> str:
        """Temporary shard names of this run start with this (in ``out`` itself)."""
        return f"{TMP_PREFIX}{self.run_id}-"

    def shard_tmp_name(self, index: int, names) -> str:
        """The temporary name of shard ``index`` (``names``: the output's ``ShardName``)."""
        return f"{self.shard_tmp_prefix}{names.prefix}-{index:05d}{names.suffix}"

    def output(self) -> Storage:
        """The output location's storage (opened once per process)."""
        return _open(self.run_id, self.out, self.storage_options, self.temp_url)

    def temp(self) -> Storage:
        """The temporary area's storage (opened once per process)."""
        return _open(self.run_id, self.temp_url, self.storage_options, self.temp_url)

    # -- temporary arrays ----------------------------------------------------------------------------
    def put_array(self, name: str, array: np.ndarray) -> None:
        """Write an array's raw bytes under ``name`` in the temporary area (atomically)."""
        self.put_arrays(name, [array])

    def put_arrays(self, name: str, arrays) -> None:
        """Write the raw bytes of several arrays one after another under ``name`` in the temporary area
        (atomically): on a local disk straight from the arrays' memory, with no joined copy."""
        temp = self.temp()
        if isinstance(temp, LocalStorage):  # its writer takes a list of buffers
            temp.write_bytes_atomic(name, [memoryview(np.ascontiguousarray(a)).cast("B") for a in arrays])
        else:
            temp.write_bytes_atomic(name, b"".join(np.ascontiguousarray(a).tobytes() for a in arrays))

    def get_array(self, name: str, dtype) -> np.ndarray:
        """Read back an array written by ``put_array``."""
        return np.frombuffer(self.temp().read_bytes(name), dtype=dtype)

    def get_range(self, name: str, start: int, stop: int) -> bytes:
        """Bytes ``[start, stop)`` of a temporary file (a ranged read: a task reads only its part)."""
        if stop <= start:
            return b""
        data = self.temp().read_range(name, start, stop)
        if len(data) != stop - start:
            raise TfpipeError(f"temporary file {name} of run {self.run_id} is shorter than {stop} bytes: damaged")
        return data

    # -- cleanup -------------------------------------------------------------------------------------
    def release(self) -> None:
        """Give up this process's claim on the output, if it holds one (the driver that prepared the run)."""
        st = _STORAGES.get((self.run_id, self.out, self.storage_options))
        if st is not None:
            release_claim(st)

    def remove_temp(self, *, strict: bool = False) -> None:
        """Delete the whole temporary area (every file, every folder); ``strict``: raise a ``TfpipeError``
        naming it when that fails (else the failure is logged)."""
        try:
            temp = self.temp()
            path = temp.local_path("")
            if path is not None:
                shutil.rmtree(path, ignore_errors=True)
            elif is_s3(self.temp_url):
                client, bucket, prefix = temp.client, temp.bucket, temp.prefix
                for page in client.get_paginator("list_objects_v2").paginate(Bucket=bucket, Prefix=prefix):
                    keys = [{"Key": o["Key"]} for o in page.get("Contents", [])]
                    for i in range(0, len(keys), 1000):  # at most 1000 keys per DeleteObjects
                        client.delete_objects(Bucket=bucket, Delete={"Objects": keys[i:i + 1000], "Quiet": True})
            else:
                for name in temp.list():
                    temp.delete(name)
                temp.delete("")  # a Beam file system with real directories: the area's own directory
        except Exception as exc:  # noqa: BLE001 - botocore errors, after its retries
            if strict:
                raise TfpipeError(f"cannot remove the work area {self.temp_url}: {exc}") from exc
            log.warning("could not remove the temporary area %s: %s", self.temp_url, exc)

    def cleanup(self) -> None:
        """Remove the temporary area and this run's temporary shards (idempotent; errors are logged). The
        claim on the output stays (see ``release``)."""
        self.remove_temp()
        try:
            out = self.output()
            for name in out.list():
                if name.startswith(self.shard_tmp_prefix):
                    out.delete(name)
        except Exception as exc:  # noqa: BLE001
            log.warning("could not remove temporary shards of run %s in %s: %s", self.run_id, self.out, exc)
        for key in [k for k in _STORAGES if k[0] == self.run_id and k[1] != self.out]:
            del _STORAGES[key]


def prepare_run(out: str, *, overwrite: bool, run_id: str | None = None, **storage_options) -> RunArea:
    """Check the output location as the local converter does (refuse a non-empty one unless ``overwrite``,
    then clear tfpipe's files only — on a local disk, temporary areas of interrupted runs included) and
    return the run's area."""
    out = str(out)
    run_id = check_run_id(run_id) if run_id is not None else new_run_id()  # before anything is created
    storage = prepare_output(out, overwrite=overwrite, run_id=run_id, **storage_options)
    area = RunArea(out, run_id, tuple(storage_options.items()))
    if storage.local_path("") is not None:
        storage.staging_dir()  # the local converter creates the output directory up front too
        os.makedirs(area.temp().local_path(""), exist_ok=True)  # and the area: workers never create it
    _STORAGES[(area.run_id, area.out, area.storage_options)] = storage
    return area
