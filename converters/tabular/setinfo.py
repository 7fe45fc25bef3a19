"""An existing tabular set's tables (``--vocab-from SET``): where its vocabulary files are (read and checked
against the manifest's size and sha256 by ``vocabcopy``) and, for ``--numeric minmax``, its min/max, so another
input (a test day) is converted with exactly the ids and scaling the training set has."""
from __future__ import annotations

from dataclasses import dataclass

from ..shardset.reader import read_manifest
from ..storage import open_storage
from ..util.errors import InputError
from .encode import Tables

__all__ = ["SourceVocab", "source_tables"]


@dataclass(frozen=True)
class SourceVocab:
    """One column's vocabulary file in the source set: ``name`` in ``storage``, ``nbytes`` and ``sha256`` as its
    manifest lists them, ``values`` (its table size less one), ``label`` naming it in messages."""

    column: str
    storage: object
    name: str
    nbytes: int
    sha256: str
    values: int
    label: str


def source_tables(options) -> tuple[Tables, list[SourceVocab]]:
    """``(tables, one SourceVocab per categorical column)`` of ``options.vocab_from`` (nothing read but its
    manifest)."""
    src = str(options.vocab_from)
    m = read_manifest(src)
    x = m.extra or {}
    cats = x.get("categorical")
    if m.kind != "tabular" or not isinstance(cats, dict):
        raise InputError(f"--vocab-from {src}: not a set written by convert tabular")
    s = options.schema
    if sorted(cats) != sorted(s.categorical):
        raise InputError(f"--vocab-from {src}: its categorical columns {list(cats)} are not schema "
                          f"{s.name!r}'s {list(s.categorical)}")
    cats = {name: cats[name] for name in s.categorical}  # the manifest's keys are sorted: schema order here
    if any("vocab" not in e for e in cats.values()):
        raise InputError(f"--vocab-from {src}: it was converted with --hash-buckets (no vocabularies)")
    storage = open_storage(m.location)
    vocabs = [SourceVocab(name, storage, e["vocab"], int(e["bytes"]), str(e["sha256"]), int(e["table_size"]) - 1,
                          f"--vocab-from {src}: {e['vocab']}") for name, e in cats.items()]
    mins = maxs = (0.0,) * len(s.numeric)
    if options.numeric == "minmax":
        mm = x.get("minmax")
        if not isinstance(mm, dict) or sorted(mm) != sorted(s.numeric):
            raise InputError(f"--vocab-from {src}: --numeric minmax needs a source converted with it")
        mins = tuple(float(mm[n][0]) for n in s.numeric)
        maxs = tuple(float(mm[n][1]) for n in s.numeric)
    return Tables(tuple(int(e["table_size"]) for e in cats.values()), mins, maxs), vocabs
