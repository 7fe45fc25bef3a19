"""The engine-independent values and steps every format job shares (pure, picklable; no engine imports).

* ``ErrorRecord``: an ``InputError`` as a plain value, so a task can report bad input instead of raising it
  and the planner raises the *first* one in input order, with the local converter's exact message.
* ``Cutter``: the greedy shard-cut rule (``shardset.cuts.plan_cuts``) fed in input order, one unit at a time,
  with the bytes of the open shard carried across units; a whole unit that fits needs no lengths at all.
* ``ShardSpec`` / ``SetPlan``: what pass 2 writes (shard ``index``: ``records`` records, as format-specific
  ``pieces``) and what finalize records (accounting, options, extra totals), or the error that stops the run.
* ``ShardFile`` / ``ShardResult``: pass 2 writes one shard under its temporary name, exactly as the local
  ``ShardSetWriter`` does (same gzip settings), fsynced, hashed.
* ``Outcome`` / ``finalize``: check every shard against the plan, rename to final names, remove the
  temporary area, write ``index.json`` last. ``Outcome`` round-trips through JSON, for engines whose finalize
  runs elsewhere than their plan (Beam: the driver reads it from the temporary area).
"""
from __future__ import annotations

import json
import logging
import os
import uuid
from dataclasses import asdict, dataclass, field
from typing import Iterable, Sequence

import numpy as np

from ..shardset.commit import Move, commit_set
from ..shardset.cuts import plan_cuts
from ..shardset.manifest import InputStats, Manifest, ShardInfo, manifest_bytes
from ..shardset.options import ShardOutputOptions
from ..shardset.shardfile import ShardStream
from ..shardset.writer import output_errors
from ..tfrecord.layout import RecordLayout
from ..tfrecord.schema import Schema
from ..util.errors import InputError, TfpipeError
from .area import RunArea

__all__ = ["ErrorRecord", "Cutter", "ShardSpec", "SetPlan", "ShardResult", "ShardFile", "write_shard", "Outcome",
           "finalize", "OUTCOME_NAME"]

log = logging.getLogger(__name__)

OUTCOME_NAME = "outcome.json"  # in the temporary area: the plan's totals + shard results, for a remote finalize


def _where(path, line, offset) -> str:
    if path is None:
        return ""
    where = str(path)
    if line is not None:
        where += f":{line}"
    elif offset is not None:
        where += f" at byte {offset}"
    return where + ": "


@dataclass(frozen=True)
class ErrorRecord:
    """Bad input found by a task: re-raised by the planner as the very ``InputError`` the local converter
    raises (same text, path, line, offset, reason)."""

    message: str
    path: str | None = None
    line: int | None = None
    offset: int | None = None
    reason: str | None = None

    @classmethod
    def of(cls, exc: InputError) -> "ErrorRecord":
        text = str(exc)
        where = _where(exc.path, exc.line, exc.offset)
        msg = text[len(where):] if where and text.startswith(where) else text
        return cls(msg, exc.path, exc.line, exc.offset, exc.reason)

    def exception(self) -> InputError:
        return InputError(self.message, path=self.path, line=self.line, offset=self.offset, reason=self.reason)


class Cutter:
    """The shard-cut rule over records arriving in order: a shard is closed before a record would cross
    ``limit`` (a record larger than the limit alone in its shard) — the same cuts as the local writer."""

    def __init__(self, limit: int):
        self.limit = int(limit)
        self.used = 0          # bytes in the open shard
        self.records = 0       # records seen
        self.starts: list[int] = []  # first record of each shard

    def add_run(self, count: int, nbytes: int) -> bool:
        """Take ``count`` records of ``nbytes`` in all if they surely fit in the open shard (then no lengths
        are needed); False (nothing taken) if the caller must ``add`` their lengths."""
        if count == 0:
            return True
        if self.used + nbytes > self.limit:
            return False
        if not self.starts:
            self.starts.append(self.records)
        self.used += nbytes
        self.records += count
        return True

    def add(self, lengths: np.ndarray) -> None:
        """Take records with these framed lengths."""
        lengths = np.asarray(lengths, dtype=np.int64)
        if lengths.size == 0:
            return
        if not self.starts:
            self.starts.append(self.records)
        cuts = plan_cuts(lengths, self.used, self.limit)
        self.starts.extend(self.records + c for c in cuts)
        self.used = int(lengths[cuts[-1]:].sum()) if cuts else self.used + int(lengths.sum())
        self.records += int(lengths.size)

    def ranges(self) -> list[tuple[int, int]]:
        """``[first, stop)`` record range of every shard."""
        ends = self.starts[1:] + [self.records]
        return list(zip(self.starts, ends))


@dataclass(frozen=True)
class ShardSpec:
    """Shard ``index`` holds global records ``[first, first + records)``; ``pieces`` say where pass 2 finds
    them (format-specific plain values)."""

    index: int
    records: int
    pieces: tuple = ()
    first: int = 0
    layout: RecordLayout | None = None  # a columnar set's layout: pass 2 writes blocks of it (records are rows)


@dataclass(frozen=True)
class SetPlan:
    """What a set will be, decided before pass 2: the shards to write and the manifest's accounting, or the
    ``error`` that stops the run before any shard is written; ``layout``: the manifest's record layout entry of
    a columnar set (its shards' ``records`` count rows). With ``--split-by-label``, ``parts`` lists ``(label,
    shards)`` per part in order (the shards are numbered part after part); with ``--shuffle``, ``scatter``
    holds the tasks that must all have run before any pass 2 (``engines.scatter``)."""

    shards: tuple[ShardSpec, ...] = ()
    records: int = 0
    inputs: tuple[InputStats, ...] = ()
    options: dict = field(default_factory=dict)
    extra: dict = field(default_factory=dict)
    error: ErrorRecord | None = None
    parts: tuple[tuple[str, int], ...] = ()
    scatter: tuple = ()
    layout: dict | None = None  # a columnar set's manifest ``layout`` entry (``RecordLayout.to_json``), else None
    files: tuple[tuple[str, str, int], ...] = ()  # (temporary name, final name, bytes) of files beside the shards

    @classmethod
    def failed(cls, error: ErrorRecord) -> "SetPlan":
        return cls(error=error)


@dataclass(frozen=True)
class ShardResult:
    """What pass 2 reports for one shard: its temporary name, records, bytes and sha256."""

    index: int
    tmp_name: str
    records: int
    bytes: int
    sha256: str


class ShardFile:
    """One shard written under its temporary name in the output location, byte for byte as the local
    ``ShardSetWriter`` writes it (GZIP: level 6, mtime 0, no file name), fsynced and hashed."""

    def __init__(self, area: RunArea, index: int, output: ShardOutputOptions):
        self.area, self.index, self.output = area, index, output
        self.tmp_name = area.shard_tmp_name(index, output.names)
        self._storage = area.output()
        # a name of its own for this attempt: a retried or duplicated task never writes into another's file
        self._path = os.path.join(self._storage.staging_dir(), f"{self.tmp_name}.{uuid.uuid4().hex[:8]}.part")
        self._file = ShardStream(open(self._path, "wb"), output.compression)
        self.records = 0

    def write(self, framed: np.ndarray, count: int) -> None:
        """Append ``count`` framed records (their concatenated bytes)."""
        if count:
            self._file.write(memoryview(np.ascontiguousarray(framed)))
            self.records += count

    def close(self) -> ShardResult:
        self._file.close()
        final = self._storage.local_path(self.tmp_name)
        if final is not None:
            os.replace(self._path, final)
        else:
            self._storage.stage(self._path, self.tmp_name)
        return ShardResult(self.index, self.tmp_name, self.records, self._file.nbytes, self._file.sha256)

    def discard(self) -> None:
        try:
            self._file.discard()
        finally:
            if os.path.exists(self._path):
                os.unlink(self._path)


def write_shard(area: RunArea, output: ShardOutputOptions, spec: ShardSpec,
                records: Iterable[tuple[np.ndarray, int]]) -> ShardResult:
    """Pass 2's common part: write ``(framed bytes, count)`` batches as shard ``spec.index`` under its
    temporary name, check the count against the plan; on any failure nothing of the attempt is left."""
    out = ShardFile(area, spec.index, output)
    try:
        for framed, n in records:
            out.write(framed, n)
        if out.records != spec.records:
            raise TfpipeError(f"shard {spec.index}: {out.records} records re-read where the plan has "
                              f"{spec.records} (did an input change during the run?)")
        return out.close()
    except BaseException:
        out.discard()
        raise


@dataclass(frozen=True)
class Outcome:
    """Everything finalize needs: the plan without its pieces, plus the shard results."""

    error: ErrorRecord | None
    expected: tuple[int, ...]            # records per shard, by index
    records: int
    inputs: tuple[InputStats, ...]
    options: dict
    extra: dict
    results: tuple[ShardResult, ...]
    parts: tuple[tuple[str, int], ...] = ()   # (label, shards) per part of a split by label
    layout: dict | None = None                # the plan's record layout entry (columnar), else None
    files: tuple[tuple[str, str, int], ...] = ()  # the plan's files beside the shards (vocabularies)

    @classmethod
    def of(cls, plan: SetPlan, results: Sequence[ShardResult]) -> "Outcome":
        return cls(plan.error, tuple(s.records for s in plan.shards), plan.records, tuple(plan.inputs),
                   dict(plan.options), dict(plan.extra), tuple(sorted(results, key=lambda r: r.index)),
                   tuple(plan.parts), plan.layout, tuple(plan.files))

    def to_json(self) -> dict:
        return {"error": asdict(self.error) if self.error else None, "expected": list(self.expected),
                "records": self.records, "inputs": [asdict(i) for i in self.inputs], "options": self.options,
                "extra": self.extra, "results": [asdict(r) for r in self.results],
                "parts": [list(p) for p in self.parts]} | ({"layout": self.layout} if self.layout else {}) | (
                    {"files": [list(f) for f in self.files]} if self.files else {})

    @classmethod
    def from_json(cls, d: dict) -> "Outcome":
        return cls(ErrorRecord(**d["error"]) if d["error"] else None, tuple(d["expected"]), d["records"],
                   tuple(InputStats(**i) for i in d["inputs"]), d["options"], d["extra"],
                   tuple(ShardResult(**r) for r in d["results"]), tuple((a, b) for a, b in d.get("parts", [])),
                   d.get("layout"), tuple(tuple(f) for f in d.get("files", ())))

    def checked(self, run_id: str, why: str | None = None) -> dict[int, ShardResult]:
        """Raise the plan's error, or check that pass 2 reported every planned shard with its planned count;
        returns the results by shard index. ``why``: the likely cause a mismatch names (default: an input
        changed during the run)."""
        if self.error is not None:
            raise self.error.exception()
        n = len(self.expected)
        got = {r.index: r for r in self.results}
        if sorted(got) != list(range(n)) or len(self.results) != n:
            raise TfpipeError(f"run {run_id}: expected shards 0..{n - 1}, pass 2 reported {sorted(got)}"
                              + (f" ({why})" if why else ""))
        for i, want in enumerate(self.expected):
            if got[i].records != want:
                raise TfpipeError(f"shard {i}: pass 2 wrote {got[i].records} records where the plan has {want} "
                                  f"({why or 'did an input change during the run?'})")
        return got

    def dumps(self) -> bytes:
        return json.dumps(self.to_json(), sort_keys=True).encode("utf-8")


def finalize(area: RunArea, output: ShardOutputOptions, schema: Schema, kind: str, outcome: Outcome) -> Manifest:
    """Raise the plan's error, or check each shard result against the plan; then the one commit path
    (``shardset.commit``): the shards under their final names, the temporary area removed, ``index.json``
    last, replacing a set committed there before; returns the Manifest. (A split by label:
    ``engines.group.finalize_outcome``.)"""
    try:
        got = outcome.checked(area.run_id)
        n = len(outcome.expected)
        names = output.names
        moves = [Move(got[i].tmp_name, names.format(i, n), got[i].bytes) for i in range(n)]
        moves += [Move(tmp, final, nbytes) for tmp, final, nbytes in outcome.files]  # written before the manifest
        shards = tuple(ShardInfo(m.final, got[i].records, got[i].bytes, got[i].sha256)
                       for i, m in enumerate(moves[:n]))
        manifest = Manifest(records=outcome.records, shards=shards, schema=schema, inputs=outcome.inputs,
                            options=dict(outcome.options), compression=output.compression, kind=kind,
                            extra=dict(outcome.extra), location=area.out,
                            layout=RecordLayout.from_json(outcome.layout))
        with output_errors(area.out):
            commit_set(area.output(), moves, manifest_bytes(manifest), run_id=area.run_id,
                       before_manifest=area.cleanup, where=area.out)
    finally:
        area.cleanup()
        area.release()
    log.info("wrote %d records in %d shards to %s", manifest.records, n, area.out)
    return manifest
