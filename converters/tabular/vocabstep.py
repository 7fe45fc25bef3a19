"""The vocabulary step's files, in the run's areas: a column's vocabulary file beside the shards under a temporary
name and its sorted lookup table in the temporary area (counted: ``vocabwrite``; ``--vocab-from``: ``vocabcopy``),
from which pass 1 opens its lookup (``lookups``). The table's keys are uint64 (``.skeys``) when every value has at
most 8 bytes, else the values at the width of the longest (``.svals``); values longer than ``vocablong.LONG``
bytes are in a table of their own (``.lv``, ``.le``, ``.lc``: ``vocablong``'s files, ids as int64), looked up by
``vocablong.LongLookup``."""
from __future__ import annotations

import os
from typing import Sequence

import numpy as np

from ..util.errors import IntegrityError
from .vocab import CountRun, SortedRun, merge_runs, table_keys
from .vocabcopy import copy_vocabulary
from .vocablong import table_parts
from .vocabwrite import write_vocabulary

__all__ = ["VocabFiles", "Entry"]

Entry = tuple[str, str, int, str, int]  # column, temporary name beside the shards, bytes, sha256, distinct (-1)


class VocabFiles:
    """The vocabulary files and lookup tables of one run (``area``): values seen at least ``min_count`` times
    kept; the merge's reads within ``budget`` (a ``budget.MemoryBudget``)."""

    def __init__(self, area, min_count: int, budget):
        self.area, self.min_count, self.budget = area, min_count, budget

    def counted(self, name: str, runs: Sequence[CountRun]) -> tuple[Entry, int]:
        """A counted vocabulary, streamed from the merge (``vocabwrite``): its file under a temporary name
        beside the shards, its sorted table in the temporary area."""
        out, tmp, path = self._text_file(name)
        with _TableWriter(self.area.temp(), f"vocab-{name}") as table:
            vf = write_vocabulary(lambda: merge_runs(self.area, runs, self._merge_chunk(runs)), self.min_count,
                                  path, table.append)
        out.stage(path, tmp)
        return (name, tmp, vf.nbytes, vf.sha256, vf.distinct), vf.size

    def counted_column(self, column: tuple[str, Sequence[CountRun]]) -> tuple[Entry, int]:
        """``counted(name, runs)`` of one ``(name, runs)`` pair: a column's task of the vocabulary step."""
        return self.counted(*column)

    def _text_file(self, name: str) -> tuple[object, str, str]:
        """The output storage, the temporary name of column ``name``'s vocabulary file beside the shards, and
        the local path it is written at before ``stage`` (on a local output, that name itself)."""
        out = self.area.output()
        tmp = f"{self.area.shard_tmp_prefix}vocab-{name}.txt"
        return out, tmp, os.path.join(out.staging_dir(), tmp)

    def _merge_chunk(self, runs: Sequence[SortedRun]) -> int:
        """Entries read from each run at a time (``budget.MemoryBudget.merge_entries``)."""
        return self.budget.merge_entries(len(runs), max([r.width for r in runs], default=8))

    def copied(self, src) -> Entry:
        """``--vocab-from``'s vocabulary of one column, streamed (``vocabcopy``): its file under a temporary name
        beside the shards, its sorted table in the temporary area."""
        name = src.column
        out, tmp, path = self._text_file(name)
        runs = copy_vocabulary(src, path, self.area, f"vocab-{name}-src")
        width = max([r.width for r in runs], default=0)
        distinct, repeated, last = 0, 0, None
        with _TableWriter(self.area.temp(), f"vocab-{name}") as table:
            for v, ids in merge_runs(self.area, runs, self._merge_chunk(runs)):
                distinct += v.size  # (the merge of two runs sums a value's ids; one run keeps it twice)
                repeated += int((v[1:] == v[:-1]).sum()) + int(last is not None and v.size and v[0] == last)
                last = v[-1] if v.size else last
                for keys, part in table_parts(v, ids.astype(np.uint32), width, table_keys):
                    table.append(keys, part)
        if repeated or distinct != src.values:
            raise IntegrityError(f"{src.label} lists {max(repeated, src.values - distinct):,} value(s) more than "
                                 "once: StringLookup cannot load it")
        out.stage(path, tmp)
        return (name, tmp, src.nbytes, src.sha256, -1)


class _TableWriter:
    """A column's sorted lookup table (``.skeys``: uint64 keys, or ``.svals``: fixed-width values; ``.sids``:
    uint32 ids; keys given as an ``object`` array: the long values' table, ``.lv``, ``.le``, ``.lc``) appended
    chunk by chunk to local files, then, fsynced, renamed into the temporary area (local) or staged there
    (uploaded). The first chunk's keys name the kind; a table of no values writes nothing."""

    def __init__(self, temp, stem: str):
        self.temp, self.stem = temp, stem
        self.names: list[str] = []
        self.finals: list = []
        self.paths: list[str] = []
        self.files: list = []
        self.short = self.long = None  # indexes of each table's first file
        self.end = 0  # the long values' bytes so far

    def _open(self, kinds: list[str]) -> int:
        names = [f"{self.stem}.{k}" for k in kinds]
        staging = self.temp.staging_dir()  # (a local area's directory, made if missing)
        finals = [self.temp.local_path(n) for n in names]  # None: a remote temporary area
        self.paths += [(f or os.path.join(staging, n)) + ".part" for f, n in zip(finals, names)]
        self.names += names
        self.finals += finals
        self.files += [open(p, "wb") for p in self.paths[len(self.files):]]
        return len(self.files) - len(kinds)

    def append(self, keys: np.ndarray, ids: np.ndarray) -> None:
        if not keys.size:
            return
        if keys.dtype == object:
            if self.long is None:
                self.long = self._open(["lv", "le", "lc"])
            ends = self.end + np.cumsum(np.fromiter(map(len, keys), np.int64, keys.size))
            self.end = int(ends[-1])
            for f, data in zip(self.files[self.long:self.long + 3],
                               (b"".join(keys.tolist()), ends.tobytes(), np.asarray(ids, np.int64).tobytes())):
                f.write(data)
            return
        if self.short is None:
            self.short = self._open(["skeys" if keys.dtype == np.uint64 else "svals", "sids"])
        self.files[self.short].write(memoryview(np.ascontiguousarray(keys).view(np.uint8)))
        self.files[self.short + 1].write(memoryview(np.ascontiguousarray(ids, np.uint32)).cast("B"))

    def __enter__(self) -> "_TableWriter":
        return self

    def __exit__(self, kind, exc, tb) -> None:
        for f in self.files:
            if kind is None:
                f.flush()
                os.fsync(f.fileno())
            f.close()
        if not self.files:
            return
        for path, final, name in zip(self.paths, self.finals, self.names):
            if kind is not None:
                os.unlink(path)
            elif final is not None:
                os.replace(path, final)
            else:
                self.temp.stage(path, name)
