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
from converters.util.system import cache_root, cpu_count

from .read import ReadConfig, data_fingerprint, fingerprint_key, tunable

__all__ = ["TuneLookup", "machine_fingerprint", "store_dir", "result_path", "save_result", "load_result",
           "lookup", "lookup_from_doc", "TUNE_FORMAT"]

log = logging.getLogger(__name__)

TUNE_FORMAT = 1
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


def load_result(path: str) -> dict[str, Any]:
    """A stored report, checked for the keys ``lookup`` needs (ValueError when it is not one)."""
    with open(path, encoding="utf-8") as f:
        doc = json.load(f)
    if not isinstance(doc, dict) or doc.get("format") != TUNE_FORMAT:
        raise ValueError(f"{path}: not a tfpipe tuning result (format {TUNE_FORMAT})")
    for key in ("machine", "data", "winner", "reference"):
        if not isinstance(doc.get(key), dict):
            raise ValueError(f"{path}: no {key!r} in the tuning result")
    ReadConfig.from_json(doc["winner"]["config"])
    return doc


def lookup_from_doc(doc: dict[str, Any], path: str | None = None) -> TuneLookup:
    """The lookup a stored (or just measured) report gives: its winner, and a note saying where it is from."""
    winner = doc["winner"]
    gain = winner.get("vs_rule")
    gain_txt = f", {gain:.2f}× the built-in rule" if isinstance(gain, (int, float)) else ""
    when = str(doc.get("created", ""))[:10]
    note = (f"tuned on this machine{' on ' + when if when else ''} (`tfpipe pipeline tune`): "
            f"{winner.get('label', 'winner')}{gain_txt}, median of {doc.get('rounds', '?')} paired rounds")
    if path:
        note += f" [{path}]"
    return TuneLookup(ReadConfig.from_json(winner["config"]), note, tuple(sorted(doc["data"].items())), path)


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
    except (OSError, ValueError) as exc:
        log.warning("ignoring a damaged tuning result: %s", exc)
        return TuneLookup(None, f"not tuned: the stored result is unreadable ({exc}); {hint}")
    return TuneLookup(None, f"not tuned for this data and batch size on this machine; {hint}")
