"""How File mode reads a shard set: one :class:`ReadConfig`, from explicit options, a stored tuning result
or the built-in rule, and the output-equivalent alternatives ``tfpipe pipeline tune`` times (all pure).

A read config is the part of the graph between the files and the parsed batches: the strategy (one
sequential reader, an interleave of per-file chunked readers, or ``num_parallel_reads``), how many files
are read at once, the chunk of records handed to one ``parse_example`` call before ``rebatch`` cuts uniform
batches (0: ``batch(batch_size)`` then parse, no rebatch), the parse parallelism and the read buffer.

The built-in rule comes from paired rounds on a shared 2-core machine with ~315-byte Criteo records (400k
records, 8 files, batch 512; noisy, load 2–7): ``num_parallel_reads`` hands records over one by one across
threads (~90–190k rec/s against ~310–450k for one sequential reader → batch → parse); an interleave of as
many files as cores, each parsing chunks of 0.5–1 MiB of records in one call and rebatching, ran at
0.9–1.2× the best hand-tuned graph, while the former default (4 MiB chunks, 4 files at once) ran at
0.5–0.6× over 300-batch windows. Elsewhere the best choice differs: ``tfpipe pipeline tune`` measures it.
"""
from __future__ import annotations

import hashlib
import json
import os
from dataclasses import asdict, dataclass
from typing import Any

from converters.util.checks import set_int
from converters.util.units import format_size

from ..spec.options import DEFAULT_BUFFER_BYTES  # re-exported: the read buffer when buffer_size is None

__all__ = ["ReadConfig", "ReadPlan", "read_plan", "rule_config", "choose_read", "candidates", "tunable",
           "data_fingerprint", "fingerprint_key", "chunk_for", "AUTOTUNE", "LARGE_RECORD_BYTES", "MAX_INTERLEAVE",
           "CHUNK_BYTES", "DEFAULT_BUFFER_BYTES", "STRATEGIES"]

AUTOTUNE = -1                     # the value of tf.data.AUTOTUNE
STRATEGIES = ("sequential", "interleave", "parallel_reads")
LARGE_RECORD_BYTES = 4 << 10      # 4 KiB: above this, parallel per-record reads pay off
MAX_INTERLEAVE = 16               # most files read at once
CHUNK_BYTES = 1 << 20             # 1 MiB of records per parse call before rebatch (the rule's chunk)
MAX_CHUNK_RECORDS = 1 << 16
TUNE_CHUNKS = (512 << 10, 1 << 20, 2 << 20)       # chunk sizes the tuner tries (512 KiB, 1 MiB, 2 MiB)
TUNE_BUFFERS = (256 << 10, 1 << 20)               # read buffers tried besides the default (256 KiB, 1 MiB)


@dataclass(frozen=True)
class ReadConfig:
    """One way to read the files into parsed batches (every field has a :class:`PipelineSpec` option)."""

    read: str
    parallelism: int = 1                  # files read at once (1 for sequential)
    chunk_records: int = 0                # records per parse call before rebatch; 0: batch(batch_size) → parse
    parse_parallelism: int = AUTOTUNE     # num_parallel_calls of the parse map (-1: AUTOTUNE)
    buffer_size: int = DEFAULT_BUFFER_BYTES

    def __post_init__(self):
        if self.read not in STRATEGIES:
            raise ValueError(f"read must be one of {STRATEGIES}, got {self.read!r}")
        for name in ("parallelism", "chunk_records", "parse_parallelism", "buffer_size"):
            set_int(self, name, name=f"ReadConfig.{name}", must="an integer")
        if self.parallelism < 1 or (self.read == "sequential" and self.parallelism != 1):
            raise ValueError(f"parallelism must be >= 1 (1 for sequential), got {self.parallelism!r}")
        if self.chunk_records < 0 or self.buffer_size < 0:
            raise ValueError(f"chunk_records and buffer_size must be >= 0, got {self.chunk_records!r}, "
                             f"{self.buffer_size!r}")
        if self.parse_parallelism != AUTOTUNE and self.parse_parallelism < 1:
            raise ValueError(f"parse_parallelism must be >= 1 or -1 (AUTOTUNE), got {self.parse_parallelism!r}")

    def options(self) -> dict[str, Any]:
        """The :class:`PipelineSpec` keyword arguments that build exactly this read."""
        return {"read": self.read, "num_parallel_reads": self.parallelism, "chunk_records": self.chunk_records,
                "parse_parallelism": self.parse_parallelism, "buffer_size": self.buffer_size}

    def label(self) -> str:
        """A short name: ``interleave×2 chunk=2048 parse=AUTOTUNE buf=8 MiB``."""
        head = "sequential" if self.read == "sequential" else f"{self.read}×{self.parallelism}"
        chunk = f"chunk={self.chunk_records}" if self.chunk_records else "no-rebatch"
        par = "AUTOTUNE" if self.parse_parallelism == AUTOTUNE else str(self.parse_parallelism)
        return f"{head} {chunk} parse={par} buf={format_size(self.buffer_size)}"

    def to_json(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_json(cls, doc: dict[str, Any]) -> "ReadConfig":
        known = {"read", "parallelism", "chunk_records", "parse_parallelism", "buffer_size"}
        if not isinstance(doc, dict) or not known >= set(doc) or "read" not in doc:
            raise ValueError(f"not a read config: {doc!r}")
        return cls(**doc)


@dataclass(frozen=True)
class ReadPlan:
    """The read config ``build_dataset`` uses, where it came from (``asked``, ``tuned``, ``rule``) and why."""

    config: ReadConfig
    source: str
    why: str


def chunk_for(spec, nbytes: int) -> int:
    """Records per parse chunk of about ``nbytes``: a multiple of the batch size, 0 when that is one batch or
    less (then chunking gains nothing)."""
    rb = spec.record_bytes or 512
    records = min(MAX_CHUNK_RECORDS, int(nbytes // rb))
    records -= records % spec.batch_size
    return records if records > spec.batch_size else 0


def _size(spec) -> str:
    rb = spec.record_bytes
    return f"~{format_size(int(rb))} records" if rb else "records of unknown size"


def rule_config(spec) -> tuple[ReadConfig, str]:
    """The built-in rule: (config, why) from record size, file count, cores, shuffle and sharding."""
    files, cores, rb = len(spec.files), spec.cores, spec.record_bytes
    if getattr(spec, "layout", None) is not None:   # columnar: chunk_records are rows per decode call
        from ..spec.blocks import decode_rows_for

        rows = decode_rows_for(spec.schema)
        return ReadConfig("sequential", chunk_records=rows), (
            f"a columnar set: one sequential reader (a record is a block of {spec.layout.block_rows} rows), "
            f"blocks of about {rows} rows (at most 16 MiB decoded) per decode call")
    chunk = 0 if spec.shuffle_buffer else chunk_for(spec, CHUNK_BYTES)
    chunk_why = (f", in turns of {chunk} records (~{format_size(CHUNK_BYTES)}) read and parsed per batch"
                 if chunk else "")
    if files < 2 or cores < 2:
        return ReadConfig("sequential", chunk_records=chunk), (
            f"{files} file(s), {cores} core(s): one sequential reader{chunk_why}")
    if rb is not None and rb >= LARGE_RECORD_BYTES:
        k = min(files, 2 * cores, MAX_INTERLEAVE)
        return ReadConfig("parallel_reads", k), (
            f"{_size(spec)} (≥ {format_size(LARGE_RECORD_BYTES)}): per-record handover is cheap next to the "
            f"bytes, so read {k} files at once")
    if spec.shuffle_buffer or spec.num_shards > 1:
        why = ("shuffle needs records one by one" if spec.shuffle_buffer else
               f"shard({spec.num_shards}, {spec.shard_index}) needs records one by one, in the same order on every "
               f"rank")
        return ReadConfig("sequential", chunk_records=chunk), (
            f"{why}, and with {_size(spec)} a parallel reader's per-record handover costs more than it gains "
            f"(measured ~90k vs ~310k rec/s): one sequential reader{chunk_why}")
    k = min(files, cores, MAX_INTERLEAVE)
    return ReadConfig("interleave", k, chunk or spec.batch_size), (
        f"{_size(spec)}, {files} files, {cores} cores: interleave {k} per-file readers{chunk_why or ', rebatched'}")


def tunable(spec) -> str | None:
    """None when ``tfpipe pipeline tune`` may choose this spec's read, else the reason it may not."""
    if spec.mode != "file":
        return "Pipe mode reads one FIFO sequentially (its own chunking)"
    if spec.read != "auto":
        return f"asked for (read={spec.read!r})"
    if spec.shuffle_buffer:
        return "records pass one by one through the shuffle buffer, so the read follows the built-in rule"
    return None


def data_fingerprint(spec) -> dict[str, Any] | None:
    """What about the data and the spec changes the winner (None without a manifest fingerprint)."""
    if not getattr(spec, "manifest_sha256", None):
        return None
    names = "\n".join(os.path.basename(f) for f in spec.files)
    return {"manifest_sha256": spec.manifest_sha256, "batch_size": spec.batch_size, "files": len(spec.files),
            "files_sha256": hashlib.sha256(names.encode()).hexdigest()[:16], "parse": bool(spec.parse),
            "deterministic": bool(spec.deterministic), "num_shards": spec.num_shards}


def _explicit(spec, config: ReadConfig) -> tuple[ReadConfig, list[str]]:
    """``config`` with the spec's explicitly set read options applied over it."""
    changes, asked = {}, []
    if spec.num_parallel_reads is not None and config.read != "sequential":
        changes["parallelism"] = spec.num_parallel_reads
    for name in ("chunk_records", "parse_parallelism", "buffer_size"):
        if getattr(spec, name) is not None:
            changes[name] = getattr(spec, name)
    if config.read == "interleave" and changes.get("chunk_records") == 0:
        changes["chunk_records"] = spec.batch_size  # per-file batches of batch_size, rebatched (uniform)
    asked = [f"{k}={v}" for k, v in changes.items() if getattr(config, k) != v]
    if not changes:
        return config, []
    d = config.to_json()
    d.update(changes)
    return ReadConfig(**d), asked


def read_plan(spec) -> ReadPlan:
    """The read ``build_dataset(spec)`` uses (File mode): explicit ``read`` > a matching stored tuning result
    (``spec.tuning``) > the built-in rule; explicitly set options (``num_parallel_reads``, ``chunk_records``,
    ``parse_parallelism``, ``buffer_size``) apply over either."""
    rule, rule_why = rule_config(spec)
    if spec.read != "auto":
        k = 1 if spec.read == "sequential" else min(len(spec.files), spec.cores, MAX_INTERLEAVE)
        chunk = 0
        if spec.read == "interleave":
            chunk = (chunk_for(spec, CHUNK_BYTES) if not spec.shuffle_buffer else 0) or spec.batch_size
        base, source, why = ReadConfig(spec.read, max(1, k), chunk), "asked", f"asked for (read={spec.read!r})"
    else:
        base, source, why = rule, "rule", f"built-in rule: {rule_why}"
        tuning = getattr(spec, "tuning", None)
        note = getattr(tuning, "note", None)
        reason = tunable(spec)
        if reason is None and tuning is not None and tuning.config is not None:
            if tuning.matches(data_fingerprint(spec)):
                base, source, why = tuning.config, "tuned", note
            else:
                why += "; the stored tuning result was measured for other data or options (batch size, files)"
        elif reason is None and note:
            why += f"; {note}"
    config, asked = _explicit(spec, base)
    if asked:
        why += f" (as asked: {', '.join(asked)})"
    return ReadPlan(config, source, why)


def choose_read(spec) -> tuple[str, int, str]:
    """(strategy, files read at once, why) for File mode: the short form of :func:`read_plan`."""
    plan = read_plan(spec)
    return plan.config.read, plan.config.parallelism, plan.why


def candidates(spec, *, quick: bool = False) -> list[ReadConfig]:
    """Output-equivalent read configs for this spec, the built-in rule's first ([] when not tunable).

    Every candidate yields each record exactly once per epoch, in uniform batches, deterministically when
    the spec is; under a record-level ``shard(n, i)`` only sequential readers are candidates (every rank must
    see one record order, the manifest's, whatever each host's tuning chose). ``quick`` (for
    ``tune="on-first-use"``): only the rule, a sequential reader with and without chunks, and the rule with
    one parse thread.
    """
    if tunable(spec) is not None:
        return []
    rule, _ = rule_config(spec)
    if quick:
        one_parse = ReadConfig(**{**rule.to_json(), "parse_parallelism": 1}) if spec.parse else None
        chunked = ReadConfig("sequential", chunk_records=chunk_for(spec, CHUNK_BYTES))
        quick_list = [rule, ReadConfig("sequential"), chunked, one_parse]
        return list(dict.fromkeys(c for c in quick_list if c is not None))
    files, cores = len(spec.files), spec.cores
    chunks = [c for c in dict.fromkeys(chunk_for(spec, b) for b in TUNE_CHUNKS) if c] or [spec.batch_size]
    mid = chunk_for(spec, CHUNK_BYTES) or spec.batch_size
    out = [rule, ReadConfig("sequential"), ReadConfig("sequential", chunk_records=chunk_for(spec, CHUNK_BYTES))]
    sharded = spec.num_shards > 1
    if sharded:  # one record order on every rank: sequential readers only, chunk sizes instead of cycles
        out += [ReadConfig("sequential", chunk_records=c) for c in chunks]
    elif files >= 2:
        near = min(files, cores, MAX_INTERLEAVE)
        out += [ReadConfig("interleave", max(2, near), c) for c in chunks]
        out += [ReadConfig("interleave", k, mid) for k in (2, cores, 2 * cores) if 2 <= k <= min(files, MAX_INTERLEAVE)]
        rb = spec.record_bytes
        if rb is None or rb >= 1 << 10:  # per-record handover only pays with large records
            k = min(files, 2 * cores, MAX_INTERLEAVE)
            out += [ReadConfig("parallel_reads", k), ReadConfig("parallel_reads", k, chunk_records=mid)]
    shape = dict(rule.to_json())
    if spec.parse:
        for p in sorted({1, cores}):
            out.append(ReadConfig(**{**shape, "parse_parallelism": p}))
    for b in TUNE_BUFFERS:
        out.append(ReadConfig(**{**shape, "buffer_size": b}))
    return list(dict.fromkeys(out))


def fingerprint_key(doc: dict[str, Any]) -> str:
    """A short stable hash of a fingerprint dict."""
    return hashlib.sha256(json.dumps(doc, sort_keys=True).encode()).hexdigest()[:16]
