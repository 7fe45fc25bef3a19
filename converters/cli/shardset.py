"""``tfpipe inspect`` and ``tfpipe verify``: a shard set's manifest summary, and a full CRC-checked read."""
from __future__ import annotations

import json
import sys

__all__ = ["register"]


def register(sub) -> None:
    p = sub.add_parser("inspect", help="print a shard set's manifest summary and schema")
    p.add_argument("path", help="shard-set directory (or its index.json), local or s3://")
    p.add_argument("--json", action="store_true", help="print the manifest as JSON")
    p.set_defaults(func=_cmd_inspect)

    p = sub.add_parser("verify", help="read every record with CRC checks and compare with the manifest")
    p.add_argument("path", help="shard-set directory (or its index.json), local or s3://")
    p.add_argument("--all", action="store_true", help="report every problem, not only the first")
    p.add_argument("--no-progress", action="store_true", help="no progress bar")
    p.set_defaults(func=_cmd_verify)


def _cmd_inspect(args) -> int:
    from ..shardset.reader import read_manifest_raw
    from ..util.units import format_size
    from .types import print_prep

    m, raw = read_manifest_raw(args.path)
    if args.json:  # the manifest as written (a group's own manifest for a group)
        print(json.dumps(json.loads(raw), indent=2, sort_keys=True))
        return 0
    print(f"shard set   {m.location}" + (f"   (a group of {len(m.parts)} per-label sets)" if m.parts else ""))
    print(f"kind        {m.kind}   (tfpipe {m.tfpipe_version}, format {m.format_version})")
    print(f"records     {m.records:,}")
    print(f"shards      {len(m.shards)}   {format_size(m.total_bytes)} total"
          f"{'   GZIP' if m.compression else ''}")
    if m.shards:
        sizes = [s.bytes for s in m.shards]
        print(f"shard size  min {format_size(min(sizes))}, max {format_size(max(sizes))}")
    print("schema")
    for f in m.schema.features:
        role = "   (label)" if f.name == m.schema.label else ""
        shape = "[None]   (variable length)" if f.varlen else list(f.shape)
        print(f"  {f.name:<16} {f.dtype:<8} {shape}{role}")
    if m.inputs:
        read = sum(i.records_read for i in m.inputs)
        print(f"inputs      {len(m.inputs)} file(s), {read:,} records read, "
              f"{sum(i.records_written for i in m.inputs):,} written, "
              f"{sum(i.records_skipped for i in m.inputs):,} skipped")
    for reason, n in m.skipped.items():
        print(f"  skipped {n:,} x {reason}")
    notes: dict[str, int] = {}
    for i in m.inputs:
        for k, n in i.notes.items():
            notes[k] = notes.get(k, 0) + n
    for k, n in sorted(notes.items()):  # informational counts of written records (e.g. ids_unordered)
        print(f"  note    {n:,} x {k}")
    if m.options.get("ids"):
        print(f"ids         {m.options['ids']}")
    for k, v in sorted(m.extra.items()):
        if not isinstance(v, (dict, list)):
            print(f"{k:<11} {v}")
        elif k == "nonzeros" and isinstance(v, dict):  # sparse LibSVM: per-row nonzeros
            print(f"{k:<11} " + " ".join(f"{a} {v.get(a)}" for a in ("min", "mean", "max", "total")))
    print_prep(m)
    return 0


def _cmd_verify(args) -> int:
    from ..shardset.verify import verify

    report = verify(args.path, progress=not args.no_progress and sys.stderr.isatty(),
                    raise_on_error=not args.all)
    if report.problems:
        for p in report.problems:
            print(f"FAIL {p}", file=sys.stderr)
        print(f"tfpipe: error: {len(report.problems)} problem(s) in {report.location}", file=sys.stderr)
        return 4
    print(f"OK {report.location}: {report.shards} shards, {report.records:,} records, CRCs, counts, "
          f"sizes and sha256 match the manifest")
    return 0
