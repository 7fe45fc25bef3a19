"""A format that exists only in the tests: CSV lines of ``width`` numbers -> tf.train.Example records with one
float32 feature ``x[width]``. It touches no tfpipe module: it builds on the public layers below the formats
(sources, shardset, tfrecord, engines) and joins the engines through ``converters.registry.register`` alone.

* ``run``: the local converter (one streaming pass, ``ShardSetWriter``);
* ``CsvJob``: the same conversion as a two-pass job, the core alone (``engines.steps.TwoPassJob``, no optional
  capability): one unit per file, pass 1 writes each record's framed length to the run's temporary area, the
  plan cuts shards with ``engines.core.Cutter`` (the local writer's rule), pass 2 re-reads and serializes each
  shard's records;
* ``FORMAT`` / ``register()``: the format as the registry knows it.

A bad row (a count of numbers other than ``width``, or a token that is not a number) is an ``InputError``
naming ``file:line`` (``--on-error raise``) or is counted as ``bad_row`` (``skip``); blank lines are counted.
"""
from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import Iterable, Iterator, Sequence

import numpy as np

from converters import registry
from converters.engines.area import RunArea, prepare_run
from converters.engines.core import Cutter, ErrorRecord, SetPlan, ShardResult, ShardSpec, write_shard
from converters.engines.units import InputFile, Unit, plan_units
from converters.shardset.manifest import InputStats, Manifest
from converters.shardset.options import ShardOutputOptions
from converters.shardset.writer import ShardSetWriter
from converters.sources import expand_inputs, open_input
from converters.tfrecord.examples import serialize_batch
from converters.tfrecord.schema import FeatureSpec, Schema
from converters.util.errors import InputError

NAME = "csv"
FEATURE = "x"


@dataclass(frozen=True)
class CsvOptions:
    width: int
    output: ShardOutputOptions = field(default_factory=ShardOutputOptions)

    def __post_init__(self):
        if isinstance(self.width, bool) or not isinstance(self.width, int) or self.width < 1:
            raise ValueError(f"width must be a positive integer, got {self.width!r}")

    @property
    def schema(self) -> Schema:
        return Schema((FeatureSpec(FEATURE, "float32", (self.width,)),))

    def to_json(self) -> dict:
        return {"width": self.width, **self.output.to_json()}


def _refuse(prep) -> None:
    if prep is not None and prep.active:
        raise ValueError(f"the csv test format does no write-time preparation ({prep.describe()})")


def read_rows(path: str, options: CsvOptions, stats: InputStats) -> np.ndarray:
    """Every good row of one file as float32 (n, width); bad rows raise or are counted, as the options say."""
    with open_input(path) as f:
        lines = f.read().split(b"\n")
    if lines and lines[-1] == b"":
        lines.pop()
    rows = []
    for no, line in enumerate(lines, 1):
        text = line.strip()
        if not text:
            stats.blank_lines += 1
            continue
        stats.records_read += 1
        try:
            row = [float(t) for t in text.split(b",")]
            if len(row) != options.width:
                raise ValueError(f"{len(row)} numbers where width is {options.width}")
        except ValueError as exc:
            if options.output.on_error == "raise":
                raise InputError(f"bad_row: {exc}", path=path, line=no, reason="bad_row") from None
            stats.skip("bad_row", 1, f"{path}:{no}: bad_row")
            continue
        rows.append(row)
    stats.records_written += len(rows)
    return np.asarray(rows, dtype=np.float32).reshape(len(rows), options.width)


def serialize(options: CsvOptions, rows: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    return serialize_batch(options.schema, {FEATURE: rows})


def run(inputs, out, options: CsvOptions, *, workers: int | None = None, overwrite: bool = False,
        progress: bool = False, prep=None) -> Manifest:
    """The local converter."""
    _refuse(prep)
    paths = expand_inputs([inputs] if isinstance(inputs, (str, os.PathLike)) else inputs, suffixes=(".csv",))
    stats = []
    with ShardSetWriter(str(out), options.output, overwrite=overwrite) as writer:
        for p in paths:
            stats.append(InputStats(p))
            rows = read_rows(p, options, stats[-1])
            if len(rows):
                writer.write(*serialize(options, rows))
        return writer.finish(schema=options.schema, inputs=stats, options=options.to_json(), kind=NAME)


@dataclass
class CsvSummary:
    unit: Unit
    stats: InputStats
    records: int = 0
    error: ErrorRecord | None = None


@dataclass(frozen=True)
class CsvPiece:
    unit: Unit
    first: int
    stop: int


@dataclass(frozen=True)
class CsvJob:
    options: CsvOptions
    paths: tuple[str, ...]
    area: RunArea
    kind = NAME

    @classmethod
    def create(cls, inputs, out, options: CsvOptions, *, overwrite: bool = False, prep=None,
               run_id: str | None = None, **storage_options) -> "CsvJob":
        _refuse(prep)
        paths = expand_inputs([inputs] if isinstance(inputs, (str, os.PathLike)) else inputs, suffixes=(".csv",))
        return cls(options, tuple(paths), prepare_run(str(out), overwrite=overwrite, run_id=run_id,
                                                      **storage_options))

    @classmethod
    def from_files(cls, options: CsvOptions, files: Sequence[str], area: RunArea, *, prep=None,
                   unit_size: int | None = None) -> "CsvJob":
        _refuse(prep)
        return cls(options, tuple(files), area)

    @property
    def output(self) -> ShardOutputOptions:
        return self.options.output

    @property
    def schema(self) -> Schema:
        return self.options.schema

    def units(self) -> list[Unit]:
        return plan_units([InputFile(p, 0, False) for p in self.paths], 1)  # one whole file per unit

    def pass1(self, unit: Unit, ctx=None) -> CsvSummary:
        s = CsvSummary(unit, InputStats(unit.path))
        try:
            rows = read_rows(unit.path, self.options, s.stats)
        except InputError as exc:
            s.error = ErrorRecord.of(exc)
            return s
        s.records = len(rows)
        if s.records:
            self.area.put_array(f"{unit.key}.len", serialize(self.options, rows)[1].astype(np.int32))
        return s

    def plan(self, summaries: Sequence[CsvSummary], sizes: Sequence = (), ctx=None) -> SetPlan:
        summaries = sorted(summaries, key=lambda s: s.unit.index)
        for s in summaries:
            if s.error is not None:
                return SetPlan.failed(s.error)
        cutter, firsts = Cutter(self.output.shard_size), []
        for s in summaries:
            firsts.append(cutter.records)
            if s.records:
                cutter.add(self.area.get_array(f"{s.unit.key}.len", np.int32))
        shards = []
        for k, (a, b) in enumerate(cutter.ranges()):
            pieces = tuple(CsvPiece(s.unit, max(a - f, 0), min(b - f, s.records))
                           for s, f in zip(summaries, firsts) if f < b and f + s.records > a)
            shards.append(ShardSpec(k, b - a, pieces, first=a))
        return SetPlan(tuple(shards), cutter.records, tuple(s.stats for s in summaries), self.options.to_json(), {})

    def pass2(self, spec: ShardSpec) -> ShardResult:
        return write_shard(self.area, self.output, spec, self._records(spec.pieces))

    def _records(self, pieces: Iterable[CsvPiece]) -> Iterator[tuple[np.ndarray, int]]:
        for p in pieces:
            rows = read_rows(p.unit.path, self.options, InputStats(p.unit.path))[p.first:p.stop]
            if len(rows):
                yield serialize(self.options, rows)[0], len(rows)


class CsvFormat(registry.Format):
    name = NAME
    summary = "CSV rows of a fixed count of numbers -> one float32 feature (a test-only format)"
    options = CsvOptions
    convert = staticmethod(run)
    job = CsvJob
    suffixes = (".csv",)
    reasons = ("bad_row",)


FORMAT = CsvFormat()


def register() -> registry.Format:
    """Register the format (again: idempotent)."""
    return registry.register(FORMAT, replace=True)
