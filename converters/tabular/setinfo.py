"""An existing tabular set's tables (``--vocab-from SET``): its vocabulary files (checked against the manifest's
sha256) and, for ``--numeric minmax``, its min/max, so another input (a test day) is converted with exactly
the ids and scaling the training set has."""
from __future__ import annotations

import hashlib

from ..shardset.reader import read_manifest
from ..storage import open_storage
from ..util.errors import IntegrityError, TfpipeError
from .encode import Tables

__all__ = ["source_tables"]


def source_tables(options) -> tuple[Tables, list[tuple[str, bytes]]]:
    """``(tables, [(column, vocabulary file bytes), ...])`` of ``options.vocab_from``."""
    src = str(options.vocab_from)
    m = read_manifest(src)
    x = m.extra or {}
    cats = x.get("categorical")
    if m.kind != "tabular" or not isinstance(cats, dict):
        raise TfpipeError(f"--vocab-from {src}: not a set written by convert tabular")
    s = options.schema
    if sorted(cats) != sorted(s.categorical):
        raise TfpipeError(f"--vocab-from {src}: its categorical columns {list(cats)} are not schema "
                          f"{s.name!r}'s {list(s.categorical)}")
    cats = {name: cats[name] for name in s.categorical}  # the manifest's keys are sorted: schema order here
    if any("vocab" not in e for e in cats.values()):
        raise TfpipeError(f"--vocab-from {src}: it was converted with --hash-buckets (no vocabularies)")
    storage = open_storage(m.location)
    vocabs = []
    for name, e in cats.items():
        data = storage.read_bytes(e["vocab"])
        if hashlib.sha256(data).hexdigest() != e["sha256"]:
            raise IntegrityError(f"--vocab-from {src}: {e['vocab']} differs from its manifest's sha256")
        vocabs.append((name, data))
    mins = maxs = (0.0,) * len(s.numeric)
    if options.numeric == "minmax":
        mm = x.get("minmax")
        if not isinstance(mm, dict) or sorted(mm) != sorted(s.numeric):
            raise TfpipeError(f"--vocab-from {src}: --numeric minmax needs a source converted with it")
        mins = tuple(float(mm[n][0]) for n in s.numeric)
        maxs = tuple(float(mm[n][1]) for n in s.numeric)
    return Tables(tuple(int(e["table_size"]) for e in cats.values()), mins, maxs), vocabs
