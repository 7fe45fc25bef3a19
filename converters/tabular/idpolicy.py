"""How a categorical value becomes an id, as data: one small class per id policy, chosen once from the options
(``id_policy``), asked by the job at each step.

* ``Vocabulary(min_count)``: the pre-pass (counting) counts every value; the vocabulary step keeps the values
  seen at least ``min_count`` times (ids 1..V, 0 for everything else) and writes ``vocab/<column>.txt``;
  pass 1 (encoding) looks the values up (``lookups``).
* ``VocabFrom(source)`` (``--vocab-from``): a set's vocabularies (and min-max) used as they are: no pre-pass;
  the vocabulary step copies the set's files; pass 1 looks up as with a counted vocabulary.
* ``Hashing(buckets)`` (``--hash-buckets``): Keras ``Hashing(num_bins=N)`` bins; no vocabulary, no counting of
  values (a pre-pass only for ``--numeric minmax``).

Each says whether the run needs its pre-pass (``needs_prepass``), what it checks before the output is touched
(``prepare``), what a pre-pass task counts (``counters``), what the vocabulary step makes (``resolve``: the table
sizes and the vocabulary files), how pass 1 turns a block's values into ids (``column_ids``: one object per column
with ``put(rows, j, out, col, offset)``), what the manifest records per column (``entry``) and in its options
(``to_json``)."""
from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Sequence

import numpy as np

from ..engines.localpool import pool_width
from ..util.checks import as_int, set_int
from .encode import ColumnFacts, hash_bins
from .lookups import column_lookup
from .setinfo import source_tables
from .vocab import ColumnCounter
from .vocabstep import VocabFiles

__all__ = ["Vocabulary", "VocabFrom", "Hashing", "HashBins", "id_policy"]


class _Vocabularies:
    """What a counted and a copied vocabulary share: pass 1's lookups and the manifest's entries."""

    def column_ids(self, area, names: Sequence[str], facts: ColumnFacts, budget) -> list:
        """Each column's lookup (``lookups.column_lookup``, within ``budget.lookup_bytes``)."""
        return [column_lookup(area, n, facts.sizes[j] - 1, budget.lookup_bytes) for j, n in enumerate(names)]

    def entry(self, name: str, size: int, file) -> dict:
        """The manifest's entry of column ``name`` (table size ``size``, its vocabulary ``file``: column,
        temporary name, bytes, sha256, distinct values counted or -1)."""
        _, _, nbytes, sha, distinct = file
        return {"column": name, "table_size": size, "vocab": f"vocab/{name}.txt", "vocab_size": size - 1,
                "bytes": nbytes, "sha256": sha} | ({"distinct": distinct} if distinct >= 0 else {})


@dataclass(frozen=True)
class Vocabulary(_Vocabularies):
    """Vocabularies counted on the inputs: a value seen at least ``min_count`` times gets an id."""

    min_count: int = 1

    def __post_init__(self):
        set_int(self, "min_count", minimum=1)

    def needs_prepass(self, numeric: str) -> bool:
        return True

    def prepare(self, options) -> None:
        """Nothing to check before the output is touched."""

    def counters(self, area, key: str, columns: int, budget) -> list[ColumnCounter]:
        """One counter per categorical column of a pre-pass task (``key``), each within ``budget.count_bytes``."""
        return [ColumnCounter(area, f"{key}-k{j:03d}", budget.count_bytes) for j in range(columns)]

    def resolve(self, area, options, budget, counts: Sequence, mins: tuple, maxs: tuple, pmap=None):
        """The facts and vocabulary files of the counted columns: each column's runs merged, streamed into its
        file and table (the vocabulary is never held); the columns on ``pmap`` (None: here, in turn), each
        process's merge within its share of the merge's memory (``pool_width``)."""
        step = VocabFiles(area, self.min_count, budget.shared(pool_width(pmap)))
        columns = [(name, [r for p in counts for r in p.runs[j]])
                   for j, name in enumerate(options.schema.categorical)]
        done = pmap(step.counted_column, columns) if pmap else list(map(step.counted_column, columns))
        files = tuple(entry for entry, _ in done)
        return ColumnFacts(tuple(size + 1 for _, size in done), mins, maxs), files

    def to_json(self) -> dict:
        return {"min_count": self.min_count, "vocab_from": None, "hash_buckets": None}


@dataclass(frozen=True)
class VocabFrom(_Vocabularies):
    """An existing set's vocabularies (``source``: its location), and its min-max, used as they are."""

    source: str

    def __post_init__(self):
        if not isinstance(self.source, (str, os.PathLike)) or not str(self.source):
            raise ValueError(f"vocab_from must be a set's location, got {self.source!r}")

    def needs_prepass(self, numeric: str) -> bool:
        return False

    def prepare(self, options) -> None:
        """A missing or mismatched source set fails here, before the output is touched."""
        source_tables(options)

    def counters(self, area, key: str, columns: int, budget) -> list:
        return []

    def resolve(self, area, options, budget, counts: Sequence, mins: tuple, maxs: tuple, pmap=None):
        """The source set's facts (its table sizes and min-max) and its vocabulary files copied."""
        facts, vocabs = source_tables(options)
        step = VocabFiles(area, 1, budget)
        return facts, tuple(step.copied(v) for v in vocabs)

    def to_json(self) -> dict:
        return {"min_count": 1, "vocab_from": os.path.basename(str(self.source).rstrip("/")), "hash_buckets": None}


@dataclass(frozen=True)
class HashBins:
    """One column's ids under ``--hash-buckets``: its values' ``hash_bins``."""

    buckets: int

    def put(self, rows, j: int, out: np.ndarray, col: int, offset: int) -> None:
        out[:, col] = hash_bins(rows.cat(j), self.buckets) + offset


@dataclass(frozen=True)
class Hashing:
    """Keras ``Hashing(num_bins=buckets)`` bins instead of a vocabulary: every column's table has ``buckets``
    ids."""

    buckets: int

    def __post_init__(self):
        set_int(self, "buckets", name="hash_buckets", minimum=1)

    def needs_prepass(self, numeric: str) -> bool:
        """Only to fit ``--numeric minmax``'s min/max."""
        return numeric == "minmax"

    def prepare(self, options) -> None:
        """Nothing to check before the output is touched."""

    def counters(self, area, key: str, columns: int, budget) -> list:
        return []

    def resolve(self, area, options, budget, counts: Sequence, mins: tuple, maxs: tuple, pmap=None):
        return ColumnFacts((self.buckets,) * len(options.schema.categorical), mins, maxs), ()

    def column_ids(self, area, names: Sequence[str], facts: ColumnFacts, budget) -> list:
        return [HashBins(self.buckets)] * len(names)

    def entry(self, name: str, size: int, file) -> dict:
        return {"column": name, "table_size": size}

    def to_json(self) -> dict:
        return {"min_count": 1, "vocab_from": None, "hash_buckets": self.buckets}


def id_policy(min_count, vocab_from, hash_buckets, numeric: int, categorical: int):
    """The id policy ``--min-count``, ``--vocab-from`` and ``--hash-buckets`` ask for over a table of ``numeric``
    and ``categorical`` columns; a ``ValueError`` naming the contradiction when they exclude each other."""
    if hash_buckets is not None:  # every id (DeepFM: numeric + columns x buckets) fits int64
        top = ((1 << 63) - 1 - numeric) // max(categorical, 1)
        hash_buckets = as_int(hash_buckets, "hash_buckets", minimum=1, maximum=top)
        if vocab_from is not None:
            raise ValueError("hash_buckets and vocab_from exclude each other")
        if min_count != 1:
            raise ValueError("min_count applies to vocabularies, not to hash_buckets")
        return Hashing(hash_buckets)
    if vocab_from is not None:
        if min_count != 1:
            raise ValueError("min_count applies to counted vocabularies, not to vocab_from (its vocabularies are "
                             "used as they are)")
        return VocabFrom(vocab_from)
    return Vocabulary(min_count)
