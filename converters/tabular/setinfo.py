"""An existing tabular set's tables (``--vocab-from SET``): what it fixes (its table schema, target and numeric
transform: ``source_set``), where its vocabulary files are (read and checked against the manifest's size and
sha256 by ``vocabcopy``) and, for ``--numeric minmax``, its min/max, so another input (a test day) is converted
with exactly the ids and scaling the training set has. What the source manifest says is checked as a set's side
files are: each ``extra.categorical`` entry typed and present, its vocabulary a file the set lists in
``extra.files`` (same bytes and sha256), reached through no symbolic link. A damaged source is an
``IntegrityError`` (exit 4), an option that contradicts it a ``ValueError`` (exit 2): one line naming the set
and the entry, before anything is written."""
from __future__ import annotations

from dataclasses import dataclass

from ..shardset.links import link_problem
from ..shardset.reader import read_manifest
from ..storage import open_storage
from ..util.checks import is_integral
from ..util.errors import InputError, IntegrityError
from ..util.fs import is_sha256
from .encode import NUMERIC, ColumnFacts
from .schema import TableSchema
from .targets import TARGETS

__all__ = ["SourceVocab", "SourceSet", "source_set", "source_tables", "categorical_entries"]


@dataclass(frozen=True)
class SourceSet:
    """What a source set fixes for ``--vocab-from``: its manifest, table schema, target and numeric transform,
    and ``hash_buckets`` when it was converted with them (then it has no vocabularies)."""

    manifest: object
    schema: TableSchema
    target: str
    numeric: str
    hash_buckets: int | None


def source_set(src: str) -> SourceSet:
    """The tabular set at ``src`` (its manifest read and checked; nothing else)."""
    m = read_manifest(src)
    if m.kind != "tabular":
        raise InputError(f"--vocab-from {src}: not a set written by convert tabular")
    o = m.options if isinstance(m.options, dict) else {}
    try:
        schema = TableSchema.from_json(o.get("schema"), "source")
    except ValueError as exc:
        raise IntegrityError(f"--vocab-from {src}: its manifest's options.schema: {exc}") from None
    target, numeric, buckets = o.get("target"), o.get("numeric"), o.get("hash_buckets")
    if target not in TARGETS or numeric not in NUMERIC:
        raise IntegrityError(f"--vocab-from {src}: its manifest's options name target {target!r} and numeric "
                             f"{numeric!r}, expected one of {tuple(TARGETS)} and {NUMERIC}")
    if buckets is not None and not (is_integral(buckets) and buckets >= 1):
        raise IntegrityError(f"--vocab-from {src}: its manifest's options.hash_buckets {buckets!r} is not a "
                             "positive integer")
    return SourceSet(m, schema, target, numeric, buckets)


def categorical_entries(extra: dict) -> list[dict]:
    """``extra.categorical`` as a list in the schema's column order, each entry with its ``column``: as written,
    or from a set written before it was a list (an object keyed by column name, in its own key order)."""
    cats = (extra or {}).get("categorical")
    if isinstance(cats, dict):
        return [{"column": k, **e} if isinstance(e, dict) else e for k, e in cats.items()]
    return list(cats) if isinstance(cats, list) else []


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


def source_tables(options) -> tuple[ColumnFacts, list[SourceVocab]]:
    """``(facts, one SourceVocab per categorical column)`` of ``options.vocab_from`` (nothing read but its
    manifest), after checking that ``options`` agree with it (see the module docstring)."""
    src = str(options.vocab_from)
    ss = source_set(src)
    _check_agrees(src, ss, options)
    m, s = ss.manifest, options.schema
    x = m.extra if isinstance(m.extra, dict) else {}
    entries = _entries(src, x, s.categorical)
    storage = open_storage(m.location)
    listed = {f.get("name"): f for f in x.get("files") or () if isinstance(f, dict)}
    vocabs = []
    for i, e in enumerate(entries):
        where = f"--vocab-from {src}: extra.categorical[{i}] ({e['column']})"
        name = e["vocab"]
        f = listed.get(name)
        if f is None or f.get("bytes") != e["bytes"] or f.get("sha256") != e["sha256"]:
            raise IntegrityError(f"{where}: its vocabulary {name!r} is not a file the set lists in extra.files "
                                 "with that size and sha256")
        problem = link_problem(storage, name)
        if problem:
            raise IntegrityError(f"--vocab-from {src}/{problem}")
        vocabs.append(SourceVocab(e["column"], storage, name, e["bytes"], e["sha256"], e["table_size"] - 1,
                                  f"--vocab-from {src}: {name}"))
    mins = maxs = (0.0,) * len(s.numeric)
    if options.numeric == "minmax":
        mins, maxs = _minmax(src, x, s.numeric)
    return ColumnFacts(tuple(e["table_size"] for e in entries), mins, maxs), vocabs


def _check_agrees(src: str, ss: SourceSet, options) -> None:
    """A ``ValueError`` (exit 2) when ``options`` ask for what the source set was not converted with."""
    if ss.hash_buckets is not None:
        raise ValueError(f"--vocab-from {src}: it was converted with --hash-buckets (no vocabularies): pass "
                         f"--hash-buckets {ss.hash_buckets} instead")
    s = options.schema
    if tuple(s.columns) != tuple(ss.schema.columns):
        raise ValueError(f"--vocab-from {src}: --schema {s.name!r} contradicts the set's schema (columns "
                         f"{[c.name for c in ss.schema.columns]}): drop --schema, the set's is used")
    for flag, mine, theirs in (("--target", options.target, ss.target), ("--numeric", options.numeric, ss.numeric)):
        if mine != theirs:
            raise ValueError(f"--vocab-from {src}: {flag} {mine} contradicts the set (converted with {flag} "
                             f"{theirs}): drop {flag}, the set's is used")


def _entries(src: str, extra: dict, columns: tuple[str, ...]) -> list[dict]:
    """The source's ``extra.categorical``, one checked entry per column of ``columns`` (the schema's order)."""
    cats = extra.get("categorical")
    if not isinstance(cats, (list, dict)):
        raise IntegrityError(f"--vocab-from {src}: its manifest's extra.categorical is a {type(cats).__name__}, "
                             "not a list of columns")
    entries = categorical_entries(extra)
    for i, e in enumerate(entries):
        if not isinstance(e, dict):
            raise IntegrityError(f"--vocab-from {src}: its manifest's extra.categorical[{i}] is a "
                                 f"{type(e).__name__}, not an object")
    if [e.get("column") if isinstance(e, dict) else None for e in entries] != list(columns):
        if isinstance(cats, dict) and sorted(cats) == sorted(columns):  # keyed by name: the schema's order
            entries = [{"column": n, **cats[n]} for n in columns]
        else:
            raise IntegrityError(f"--vocab-from {src}: its manifest's extra.categorical does not list the "
                                 f"schema's categorical columns {list(columns)} in order")
    for i, e in enumerate(entries):
        where = f"--vocab-from {src}: extra.categorical[{i}] ({e['column']})"
        for key, ok, what in (("table_size", lambda v: is_integral(v) and v >= 1, "a positive integer"),
                              ("vocab", lambda v: isinstance(v, str), "a file name"),
                              ("bytes", lambda v: is_integral(v) and v >= 0, "an integer >= 0"),
                              ("sha256", is_sha256, "64 hex digits")):
            if key not in e:
                raise IntegrityError(f"{where}: no {key!r}")
            if not ok(e[key]):
                raise IntegrityError(f"{where}: {key} {e[key]!r} is not {what}")
        if e.get("vocab_size", e["table_size"] - 1) != e["table_size"] - 1:
            raise IntegrityError(f"{where}: vocab_size {e['vocab_size']!r} is not table_size - 1")
    return entries


def _minmax(src: str, extra: dict, numeric: tuple[str, ...]) -> tuple[tuple[float, ...], tuple[float, ...]]:
    mm = extra.get("minmax")
    if not isinstance(mm, dict) or sorted(mm) != sorted(numeric):
        raise IntegrityError(f"--vocab-from {src}: --numeric minmax, but its manifest's extra.minmax does not "
                             f"list the columns {list(numeric)}")
    out = []
    for n in numeric:
        pair = mm[n]
        if (not isinstance(pair, list) or len(pair) != 2
                or not all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in pair)):
            raise IntegrityError(f"--vocab-from {src}: extra.minmax.{n} {pair!r} is not [min, max]")
        out.append((float(pair[0]), float(pair[1])))
    return tuple(a for a, _ in out), tuple(b for _, b in out)
