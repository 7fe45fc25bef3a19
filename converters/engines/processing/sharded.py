"""ShardedByS3Key: every instance sees only its own objects, converts them into its own part, and the first
host stitches the parts into one shard set.

* Each instance runs the local converter on its own files into ``<work area>/part-<host>/`` (a complete shard
  set with its own manifest), then writes its marker ``parts/<host>.json`` (the part's manifest, the files it
  converted and their sizes). A rerun reuses a part whose marker matches the same files and options.
* A decision every part must share is taken over *all* instances' inputs first, where the format has one
  (``Format.scan_round``; LibSVM's ``--index-base auto``): each instance scans its files and writes
  ``<round>/<host>.json`` (e.g. ``index-base/``: an index 0 seen?); all wait for all, then every part converts
  with the options the format agrees on (the same base).
* The finalizer waits for every marker, names the shards in host order (each host's shards in its input
  order), moves them to their final names, merges the accounting (every input of every host, host order) and
  writes ``index.json`` last.
* The manifest's ``extra`` totals the format declares (``Format.sums``) add up over the parts; the rest
  must agree. Text: each instance packs its own documents, so windows never span two instances: each
  instance's final partial window is dropped (counted in ``tokens_dropped``) or padded with ``--pad-last``, as
  at the end of a local run.
"""
from __future__ import annotations

import logging
import os
from dataclasses import replace
from typing import Any, Sequence

from converters import registry
from converters.shardset.manifest import InputStats, Manifest, ShardInfo, manifest_bytes
from converters.storage import open_storage
from converters.tfrecord.layout import RecordLayout
from converters.tfrecord.schema import Schema
from converters.util.errors import TfpipeError

from .job import ConvertJob, convert_part
from .finalize import check_output, commit
from .hosts import sharded_layout
from .config import ProcessingConfig
from .workarea import WorkArea

__all__ = ["run_sharded", "merge_extra"]

log = logging.getLogger(__name__)

PARTS = "parts"
SHARDED_COLUMNAR = ("--layout columnar needs the stored types of the whole set before any block is written: use "
                    "FullyReplicated inputs (every instance reads the whole input, one plan), not ShardedByS3Key")


def _fingerprint(files: Sequence[str]) -> list[list]:
    return [[f, os.path.getsize(f)] for f in files]


def run_sharded(job: ConvertJob, cfg: ProcessingConfig, area: WorkArea, files: list[str], *, timeout: float,
                poll: float) -> tuple[Manifest | None, bool, str]:
    """This instance's part; on the first host also the finalize. Returns the set's manifest (finalizer, else
    None), whether this instance reused a part written by an earlier run, and its share in words."""
    if job.options.output.columnar and not job.fmt.types_before_data:
        raise TfpipeError(SHARDED_COLUMNAR)
    place = cfg.place
    name = job.fmt.scan_round(job.options)
    part_job = job if name is None else _scan_round(job, name, cfg, area, files, timeout=timeout, poll=poll)
    reused = _part(part_job, place.current_host, area, files)
    work = f"{len(files)} file(s)"
    if not place.is_finalizer:
        return None, reused, work
    markers = area.wait(PARTS, place.hosts, timeout=timeout, poll=poll, what="part")
    return _finalize(job, cfg, area, [markers[h] for h in place.hosts]), reused, work


def _scan_round(job: ConvertJob, name: str, cfg: ProcessingConfig, area: WorkArea, files: list[str], *,
                timeout: float, poll: float) -> ConvertJob:
    """The format's shared decision (round ``name``) over every instance's inputs: this instance's scan
    (reused when its files are the same), then every host's -> the job every part converts."""
    host = cfg.place.current_host
    fp = _fingerprint(files)
    old = area.marker(name, host, any_job=True)
    if old is not None and old.get("inputs") == fp and isinstance(old.get("scan"), dict):
        scan = old["scan"]
    else:
        scan = job.fmt.scan(job.options, files, job.workers)
    area.mark(name, host, {"inputs": fp, "scan": scan})
    seen = area.wait(name, cfg.place.hosts, timeout=timeout, poll=poll, what=f"{name} scan")
    options = job.fmt.agree(job.options, [seen[h].get("scan", {}) for h in cfg.place.hosts], cfg.place.hosts)
    return replace(job, options=options)


def _part(job: ConvertJob, host: str, area: WorkArea, files: list[str]) -> bool:
    """Write (or reuse: returns True) this host's part, then its marker."""
    fp = _fingerprint(files)
    options = job.options.to_json()
    old = area.marker(PARTS, host, any_job=True)
    if old is not None and old.get("inputs") == fp and old.get("options") == options and _intact(area, host, old):
        log.info("%s: reusing the part written by an earlier run (%d file(s))", host, len(files))
        area.mark(PARTS, host, {k: v for k, v in old.items() if k not in ("job", "host")})
        return True
    area.unmark(PARTS, host)
    part = None
    if files:
        part = convert_part(job, files, area.sub_url(f"part-{host}")).to_json()
    area.mark(PARTS, host, {"inputs": fp, "options": options, "manifest": part})
    log.info("%s: part written: %d file(s), %d record(s)", host, len(files), part["records"] if part else 0)
    return False


def _intact(area: WorkArea, host: str, marker: dict) -> bool:
    """Every shard the marker lists is still in the part (an interrupted finalize may have moved some)."""
    part = marker.get("manifest")
    if not part:
        return True
    names = set(area.storage(f"part-{host}").list())
    return all(s["name"] in names for s in part["shards"])


def _finalize(job: ConvertJob, cfg: ProcessingConfig, area: WorkArea, markers: list[dict]) -> Manifest:
    parts = [m.get("manifest") for m in markers]
    counts = [len(p["shards"]) if p else 0 for p in parts]
    layout = sharded_layout(counts)
    n = len(layout)
    names = job.options.output.names
    finals = [names.format(i, n) for i in range(n)]
    shards, moves = [], []
    for i, (h, k) in enumerate(layout):
        s = parts[h]["shards"][k]
        host = cfg.place.hosts[h]
        moves.append((f"{area.name}/part-{host}/{s['name']}", finals[i], s["bytes"]))
        shards.append(ShardInfo(finals[i], s["records"], s["bytes"], s["sha256"]))
    beside = [(h, e) for h, p in enumerate(parts) if p for e in (p.get("extra") or {}).get("files") or ()]
    if len({h for h, _ in beside}) > 1:
        raise TfpipeError("several parts wrote files beside their shards (vocabularies): one set cannot hold them")
    moves += [(f"{area.name}/part-{cfg.place.hosts[h]}/{e['name']}", e["name"], e["bytes"]) for h, e in beside]
    inputs = [InputStats(**i) for p in parts if p for i in p["inputs"]]
    records = sum(s.records for s in shards)
    if records == 0 and (error := job.fmt.empty_error(inputs)) is not None:
        raise error
    full = [p for p in parts if p]
    if not full:
        raise TfpipeError("no instance had an input file: nothing to convert")
    options = job.options.to_json()
    options.update({k: v for k, v in full[0]["options"].items() if k not in options})  # what the parts decided
    extra = merge_extra(job.format, [p["extra"] for p in full])
    extra["hosts"] = [{"host": h, "inputs": len(p["inputs"]) if p else 0, "shards": c,
                       "records": p["records"] if p else 0}
                      for h, p, c in zip(cfg.place.hosts, parts, counts)]
    manifest = Manifest(records=records, shards=tuple(shards), schema=Schema.from_json(full[0]["schema"]),
                        inputs=tuple(inputs), options=options, compression=job.options.output.compression,
                        kind=job.format, extra=extra, location=job.out,
                        layout=RecordLayout.from_json(full[0].get("layout")))  # every part's: the same options
    storage = open_storage(job.out)
    obsolete = check_output(storage, overwrite=job.overwrite, planned=finals, side=[e["name"] for _, e in beside])
    commit(storage, area, moves, manifest_bytes(manifest), obsolete=obsolete)
    log.info("finalized %d record(s) in %d shard(s) from %d host(s) -> %s", records, n, len(parts), job.out)
    return manifest


def merge_extra(kind: str, extras: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """One manifest ``extra`` from the parts': totals add up, nested totals (text subsets) add up per name,
    everything else (tokenizer, sequence length, index base) must be the same in every part."""
    if not extras:
        return {}
    fmt = registry.get(kind)
    sums, nested = fmt.sums, fmt.nested_sums
    out: dict[str, Any] = {}
    for key in sorted({k for e in extras for k in e}):
        values = [e.get(key) for e in extras]
        if key in sums:
            out[key] = sum(int(v or 0) for v in values)
        elif key in nested:
            merged: dict[str, dict[str, int]] = {}
            for v in values:
                for name, counts in (v or {}).items():
                    slot = merged.setdefault(name, {})
                    for c, x in counts.items():
                        slot[c] = slot.get(c, 0) + int(x)
            out[key] = dict(sorted(merged.items()))
        else:
            if any(v != values[0] for v in values[1:]):
                raise TfpipeError(f"the instances' parts disagree on {key!r} ({values[0]!r} vs "
                                  f"{next(v for v in values if v != values[0])!r}): were they run with the same "
                                  "command and the same image?")
            out[key] = values[0]
    return out
