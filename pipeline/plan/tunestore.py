"""Stored results of ``tfpipe pipeline tune``: the machine's and the data's fingerprints, one JSON file per
(data, machine) pair under ``$TFPIPE_CACHE/tune`` (or ``~/.cache/tfpipe/tune``), written atomically.

``lookup(spec)`` is what ``PipelineSpec.from_manifest`` calls for ``read="auto"``: a :class:`TuneLookup` with
the stored winner when both fingerprints match, else no config and the reason (``describe`` prints it).
No TensorFlow here: the TensorFlow version comes from the installed package's metadata.
"""
from __future__ import annotations

import functools
import glob
import json
import logging
import os
import platform
import sys
from dataclasses import dataclass
from typing import Any

from converters.util.fs import write_atomic
from converters.util.safe_json import read_bounded_json
from converters.util.system import WORKERS_PER_CPU, cache_root, cpu_count, total_memory

from .readplan import AUTOTUNE, MAX_CHUNK_RECORDS, ReadConfig, data_fingerprint, fingerprint_key, tunable

__all__ = ["TuneLookup", "machine_fingerprint", "store_dir", "result_path", "save_result", "load_result",
           "lookup", "lookup_from_doc", "config_problem", "TUNE_FORMAT", "MAX_RESULT_BYTES", "BUFFER_RAM_FRACTION"]

log = logging.getLogger(__name__)

TUNE_FORMAT = 1
MAX_RESULT_BYTES = 1 << 20        # a stored result is a few KiB
BUFFER_RAM_FRACTION = 64          # a stored read buffer may use at most 1/64 of RAM
_warned: set[tuple[str, str]] = set()
_TF_DISTS = ("tensorflow", "tensorflow-cpu", "tensorflow-gpu", "tensorflow-macos", "intel-tensorflow",
             "tf-nightly", "tf-nightly-cpu")


@dataclass(frozen=True)
class TuneLookup:
    """A stored tuning result looked up for one spec: the winning config (or None) and why."""

    config: ReadConfig | None
    note: str
    data: tuple[tuple[str, Any], ...] | None = None   # the data fingerprint the config was measured for
    path: str | None = None

    def matches(self, data: dict[str, Any] | None) -> bool:
        return self.data is not None and data is not None and dict(self.data) == data


def _cpu_model() -> str:
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                key, _, value = line.partition(":")
                if key.strip() in ("model name", "Model", "Hardware", "cpu model"):
                    return value.strip()
    except OSError:
        pass
    return platform.processor() or platform.machine() or "unknown"


def _tf_version() -> str:
    tf = sys.modules.get("tensorflow")
    if tf is not None and getattr(tf, "__version__", None):
        return str(tf.__version__)
    from importlib.metadata import PackageNotFoundError, version

    for dist in _TF_DISTS:
        try:
            return version(dist)
        except PackageNotFoundError:
            continue
    return "unknown"


@functools.lru_cache(maxsize=1)
def machine_fingerprint() -> dict[str, Any]:
    """What about this host changes the winner: vCPUs, CPU model, TensorFlow version."""
    return {"cpu_count": cpu_count(), "cpu_model": _cpu_model(), "tensorflow": _tf_version()}


def store_dir() -> str:
    """Where tuning results live: ``<tfpipe cache>/tune``."""
    return os.path.join(cache_root(), "tune")


def result_path(data: dict[str, Any], machine: dict[str, Any]) -> str:
    """``<store>/<data key>-<machine key>.json``."""
    return os.path.join(store_dir(), f"{fingerprint_key(data)}-{fingerprint_key(machine)}.json")


def save_result(doc: dict[str, Any]) -> str:
    """Write a tuning report (``TuneReport.to_json()``) atomically to its place in the store; returns the path."""
    path = result_path(doc["data"], doc["machine"])
    os.makedirs(os.path.dirname(path), exist_ok=True)
    write_atomic(path, (json.dumps(doc, indent=2, sort_keys=True) + "\n").encode())
    return path


def config_problem(config: ReadConfig, *, cores: int | None = None, ram: int | None = None) -> str | None:
    """Why a stored read config cannot be used on this machine, or None: a read buffer over 1/64 of RAM, more
    files or parse calls at once than ``WORKERS_PER_CPU`` times the cores, a chunk out of its range."""
    cores = cores or cpu_count()
    ram = total_memory() if ram is None else ram
    most = WORKERS_PER_CPU * cores
    if ram and config.buffer_size > ram // BUFFER_RAM_FRACTION:
        return f"buffer_size {config.buffer_size} is more than 1/{BUFFER_RAM_FRACTION} of this machine's RAM ({ram})"
    if config.parallelism > most:
        return f"parallelism {config.parallelism} is more than {WORKERS_PER_CPU}× this machine's {cores} core(s)"
    if config.parse_parallelism != AUTOTUNE and config.parse_parallelism > most:
        return (f"parse_parallelism {config.parse_parallelism} is more than {WORKERS_PER_CPU}× this machine's "
                f"{cores} core(s)")
    if config.chunk_records > MAX_CHUNK_RECORDS:
        return f"chunk_records {config.chunk_records} is more than {MAX_CHUNK_RECORDS}"
    return None


def load_result(path: str) -> dict[str, Any]:
    """A stored report, read as a manifest is (a regular file of at most 1 MiB, nested at most 32 levels) and
    checked for the keys ``lookup`` needs and for a winner this machine can run (ValueError naming the file
    when it is not one)."""
    doc = read_bounded_json(path, max_bytes=MAX_RESULT_BYTES)
    if not isinstance(doc, dict) or doc.get("format") != TUNE_FORMAT:
        raise ValueError(f"{path}: not a tfpipe tuning result (format {TUNE_FORMAT})")
    for key in ("machine", "data", "winner", "reference"):
        if not isinstance(doc.get(key), dict):
            raise ValueError(f"{path}: no {key!r} in the tuning result")
    try:
        config = ReadConfig.from_json(doc["winner"].get("config"))
    except (TypeError, ValueError) as exc:
        raise ValueError(f"{path}: the winner is not a read config ({exc})") from None
    problem = config_problem(config)
    if problem:
        raise ValueError(f"{path}: {problem}")
    return doc


def lookup_from_doc(doc: dict[str, Any], path: str | None = None) -> TuneLookup:
    """The lookup a stored (or just measured) report gives: its winner, and a note saying where it is from."""
    winner = doc["winner"]
    config = ReadConfig.from_json(winner["config"])
    gain = winner.get("vs_rule")
    ok = isinstance(gain, (int, float)) and not isinstance(gain, bool) and 0 < gain < 1e6
    gain_txt = f", {gain:.2f}× the built-in rule" if ok else ""
    when = doc.get("created")
    when = when[:10] if isinstance(when, str) and when[:4].isdigit() else ""
    rounds = doc.get("rounds")
    rounds = rounds if isinstance(rounds, int) and not isinstance(rounds, bool) and 0 < rounds < 10**6 else "?"
    what = f"{config.label()}{gain_txt}"
    busy = doc.get("contended") if isinstance(doc.get("contended"), dict) else {}
    n, c = busy.get("neighbours"), busy.get("vs_rule")
    busy_ok = isinstance(n, int) and isinstance(c, (int, float)) and not isinstance(c, bool) and 0 <= c < 1e6
    if isinstance(doc.get("best"), dict):   # the top score was within the rounds' noise: the rule was kept
        what = f"kept the built-in rule ({config.label()}): no candidate beat it beyond the rounds' noise"
    elif isinstance(doc.get("rejected"), dict) and busy_ok:     # the quiet winner lost beside busy processes
        lab = busy.get("label")
        lab = lab if isinstance(lab, str) and len(lab) <= 120 and lab.isprintable() else "the quiet winner"
        what = (f"kept the built-in rule ({config.label()}): {lab} beat it quiet "
                f"but read {c:.2f}× it beside {n} busy process(es)")
    elif busy_ok:
        what += f" quiet and {c:.2f}× beside {n} busy process(es)"
    note = (f"tuned on this machine{' on ' + when if when else ''} (`tfpipe pipeline tune`): "
            f"{what}, median of {rounds} paired rounds")
    if path:
        note += f" [{path}]"
    return TuneLookup(config, note, tuple(sorted(doc["data"].items())), path)


def _differences(a: dict[str, Any], b: dict[str, Any]) -> str:
    return "; ".join(f"{k} {a.get(k)} vs {b.get(k)}" for k in sorted(set(a) | set(b)) if a.get(k) != b.get(k))


def lookup(spec) -> TuneLookup:
    """The stored tuning result for ``spec`` on this machine, or no config and the reason (never raises on a
    damaged store: it is a cache)."""
    reason = tunable(spec)
    if reason is not None:
        return TuneLookup(None, reason)
    if spec.tune == "off":
        return TuneLookup(None, "tune='off': stored tuning results are not used")
    data = data_fingerprint(spec)
    if data is None:
        return TuneLookup(None, "not tuned: the spec has no manifest fingerprint (build it with from_manifest)")
    machine = machine_fingerprint()
    if spec.cores != machine["cpu_count"]:
        return TuneLookup(None, f"not tuned: planning for {spec.cores} cores on this "
                                f"{machine['cpu_count']}-vCPU machine")
    path = result_path(data, machine)
    hint = f"`tfpipe pipeline tune DIR --batch-size {spec.batch_size}` measures the candidates"
    if spec.tune == "on-first-use":
        hint = "tune='on-first-use': the first build_dataset measures the candidates (≤ 10 s) and stores the winner"
    try:
        if os.path.exists(path):
            doc = load_result(path)
            if doc["machine"] == machine and doc["data"] == data:
                return lookup_from_doc(doc, path)
        others = sorted(glob.glob(os.path.join(store_dir(), f"{fingerprint_key(data)}-*.json")))
        for other in others:
            doc = load_result(other)
            if doc["data"] == data:
                return TuneLookup(None, f"not tuned on this machine: the stored result for this data was measured "
                                        f"on another ({_differences(doc['machine'], machine)}); {hint}")
    except (OSError, ValueError) as exc:  # UnsafeFileError is a ValueError
        text = str(exc) if str(path) in str(exc) or str(store_dir()) in str(exc) else f"{path}: {exc}"
        if (path, text) not in _warned:   # one warning per file and problem, however often it is looked up
            _warned.add((path, text))
            log.warning("ignoring a stored tuning result, using the built-in rule: %s", text)
        return TuneLookup(None, f"not tuned: the stored result is unreadable ({text}); {hint}")
    return TuneLookup(None, f"not tuned for this data and batch size on this machine; {hint}")
