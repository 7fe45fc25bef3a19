"""The vocabulary step's files and pass 1's lookups, in the run's areas: a column's vocabulary file beside the
shards under a temporary name and its sorted lookup table in the temporary area (counted: ``vocabwrite``;
``--vocab-from``: ``vocabcopy``; values longer than 8 bytes: selected in memory), and the lookup pass 1 makes
of it (a hash table within the column's memory, else ``disklookup``)."""
from __future__ import annotations

import hashlib
import logging
import os
from typing import Sequence

import numpy as np

from ..util.units import format_size
from .disklookup import DiskLookup, table_bytes
from .vocab import CHUNK, Lookup, Run, merge_runs, parse_vocab, select, sort_key, vocab_bytes
from .vocabcopy import copy_vocabulary
from .vocabwrite import write_vocabulary

__all__ = ["VocabFiles", "Entry", "clear_lookups"]

log = logging.getLogger(__name__)

Entry = tuple[str, str, int, str, int]  # column, temporary name beside the shards, bytes, sha256, distinct (-1)
_LOOKUPS: dict[tuple, Lookup] = {}  # per process: (run id, output, column) -> its vocabulary's lookup


def clear_lookups() -> None:
    """Drop this process's lookups (pass 1 is over)."""
    _LOOKUPS.clear()


class VocabFiles:
    """The vocabulary files and lookups of one run (``area``) under ``options`` (``--min-count``, ``--memory``);
    ``lookup_memory``: bytes of one column's lookup in pass 1 (None: half of ``--memory`` over the columns)."""

    def __init__(self, area, options, lookup_memory: int | None = None):
        self.area, self.options, self.lookup_memory = area, options, lookup_memory

    def counted(self, name: str, runs: Sequence[Run]) -> tuple[Entry, int]:
        """A vocabulary of values of at most 8 bytes, streamed from the merge (``vocabwrite``): its file under
        a temporary name beside the shards, its sorted table in the temporary area."""
        out, tmp, path = self._text_file(name)
        with _TableWriter(self.area.temp(), f"vocab-{name}") as table:
            vf = write_vocabulary(lambda: merge_runs(self.area, runs, self._merge_chunk(runs)), self.options.min_count,
                                  path, table.append)
        out.stage(path, tmp)
        return (name, tmp, vf.nbytes, vf.sha256, vf.distinct), vf.size

    def _text_file(self, name: str) -> tuple[object, str, str]:
        """The output storage, the temporary name of column ``name``'s vocabulary file beside the shards, and
        the local path it is written at before ``stage`` (on a local output, that name itself)."""
        out = self.area.output()
        tmp = f"{self.area.shard_tmp_prefix}vocab-{name}.txt"
        return out, tmp, os.path.join(out.staging_dir(), tmp)

    def _merge_chunk(self, runs: Sequence[Run]) -> int:
        """Entries read from each run at a time: the merge holds half of ``--memory`` however many runs there are
        (at least 1,024 entries a run, at most ``vocab.CHUNK``)."""
        entry = max([r.width for r in runs], default=8) + 8
        return int(min(CHUNK, max(1024, self.options.memory // 2 // max(len(runs), 1) // entry)))

    def selected(self, name: str, runs: Sequence[Run]) -> tuple[Entry, int]:
        """A vocabulary with values longer than 8 bytes, selected in memory."""
        distinct = 0

        def merged():
            nonlocal distinct
            for v, c in merge_runs(self.area, runs, self._merge_chunk(runs)):
                distinct += int(v.size)
                yield v, c

        values, _ = select(merged(), self.options.min_count)
        return self._put_vocab(name, vocab_bytes(values), distinct, values), int(values.size)

    def _put_vocab(self, name: str, data: bytes, distinct: int, values: np.ndarray
                   ) -> Entry:
        """The vocabulary file under a temporary name beside the shards, and for pass 1 in the temporary area:
        its sorted lookup table when each value has at most 8 bytes (as a counted one's), else the file."""
        tmp = f"{self.area.shard_tmp_prefix}vocab-{name}.txt"
        self.area.output().write_bytes_atomic(tmp, data)
        key = sort_key(values)
        if key.dtype == np.uint64:
            order = np.argsort(key, kind="stable")
            with _TableWriter(self.area.temp(), f"vocab-{name}") as table:
                table.append(key[order], (order + 1).astype(np.uint32))
        else:
            self.area.temp().write_bytes_atomic(f"vocab-{name}.txt", data)
        return (name, tmp, len(data), hashlib.sha256(data).hexdigest(), distinct)

    def copied(self, src) -> Entry:
        """``--vocab-from``'s vocabulary of one column, streamed (``vocabcopy``): its file under a temporary name
        beside the shards, its sorted table in the temporary area (values longer than 8 bytes: its file)."""
        name = src.column
        out, tmp, path = self._text_file(name)
        runs = copy_vocabulary(src, path, self.area, f"vocab-{name}-src")
        if runs is None:
            with open(path, "rb") as f:
                self.area.temp().write_bytes_atomic(f"vocab-{name}.txt", f.read())
        else:
            with _TableWriter(self.area.temp(), f"vocab-{name}") as table:
                for v, ids in merge_runs(self.area, runs, self._merge_chunk(runs)):
                    table.append(sort_key(v), ids.astype(np.uint32))
        out.stage(path, tmp)
        return (name, tmp, src.nbytes, src.sha256, -1)

    @property
    def lookup_budget(self) -> int:
        """Bytes one column's lookup may hold in pass 1: half of ``--memory`` over the categorical columns."""
        if self.lookup_memory is not None:
            return self.lookup_memory
        return self.options.memory // 2 // max(len(self.options.schema.categorical), 1)

    def lookup(self, name: str, size: int) -> Lookup:
        """Column ``name``'s lookup (``size`` values): a hash table in memory when it fits the column's budget,
        else its sorted table read from the temporary area block by block (``disklookup``)."""
        key = (self.area.run_id, self.area.out, name)
        lk = _LOOKUPS.get(key)
        if lk is None:
            if len(_LOOKUPS) > 256:
                _LOOKUPS.clear()
            temp, stem = self.area.temp(), f"vocab-{name}"
            if not temp.exists(f"{stem}.skeys"):  # values longer than 8 bytes
                lk = Lookup(parse_vocab(temp.read_bytes(f"{stem}.txt")))
            elif table_bytes(size) <= self.lookup_budget:
                lk = Lookup.of_table(self.area.get_array(f"{stem}.skeys", np.uint64),
                                     self.area.get_array(f"{stem}.sids", np.uint32))
            else:
                log.debug("%s: %d values, a %s hash table past its %s: looked up in its sorted table on disk",
                          name, size, format_size(table_bytes(size)), format_size(self.lookup_budget))
                lk = Lookup.of_disk(DiskLookup(_local(temp, f"{stem}.skeys"), _local(temp, f"{stem}.sids"),
                                               self.lookup_budget))
            _LOOKUPS[key] = lk
        return lk


class _TableWriter:
    """A column's sorted lookup table (``.skeys`` uint64, ``.sids`` uint32) appended chunk by chunk to local
    files, then, fsynced, renamed into the temporary area (local) or staged there (uploaded)."""

    def __init__(self, temp, stem: str):
        self.temp, self.names = temp, (f"{stem}.skeys", f"{stem}.sids")
        staging = temp.staging_dir()  # (a local area's directory, made if missing)
        self.finals = [temp.local_path(n) for n in self.names]  # None: a remote temporary area
        self.paths = [(f or os.path.join(staging, n)) + ".part" for f, n in zip(self.finals, self.names)]
        self.files = [open(p, "wb") for p in self.paths]

    def append(self, keys: np.ndarray, ids: np.ndarray) -> None:
        self.files[0].write(memoryview(np.ascontiguousarray(keys, np.uint64)).cast("B"))
        self.files[1].write(memoryview(np.ascontiguousarray(ids, np.uint32)).cast("B"))

    def __enter__(self) -> "_TableWriter":
        return self

    def __exit__(self, kind, exc, tb) -> None:
        for f in self.files:
            if kind is None:
                f.flush()
                os.fsync(f.fileno())
            f.close()
        for path, final, name in zip(self.paths, self.finals, self.names):
            if kind is not None:
                os.unlink(path)
            elif final is not None:
                os.replace(path, final)
            else:
                self.temp.stage(path, name)


_FETCHED: dict[str, str] = {}  # temporary-area URL -> a local copy (a temporary area on S3), per process


def _local(temp, name: str) -> str:
    """A local path of a temporary file: in place on a local disk, else fetched once per process."""
    path = temp.local_path(name)
    if path is not None:
        return path
    url = f"{temp.url}/{name}"
    if url not in _FETCHED:
        import atexit
        import shutil
        import tempfile

        d = tempfile.mkdtemp(prefix="tfpipe-lookup-")
        atexit.register(shutil.rmtree, d, True)
        temp.fetch(name, os.path.join(d, name))
        _FETCHED[url] = os.path.join(d, name)
    return _FETCHED[url]
