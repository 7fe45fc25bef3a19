"""``tfpipe inspect`` and ``tfpipe verify``: a shard set's manifest summary, and a full CRC-checked read."""
from __future__ import annotations

import json
import sys

from .parser import add_json_option, add_set_argument

__all__ = ["register"]


def register(sub) -> None:
    p = sub.add_parser("inspect", help="print a shard set's manifest summary and schema")
    add_set_argument(p)
    add_json_option(p, "the manifest")
    p.set_defaults(func=_cmd_inspect)

    p = sub.add_parser("verify", help="read every record with CRC checks and compare with the manifest")
    add_set_argument(p)
    p.add_argument("--all", action="store_true", help="report every problem, not only the first")
    p.add_argument("--no-progress", action="store_true", help="no progress bar")
    p.set_defaults(func=_cmd_verify)


def _cmd_inspect(args) -> int:
    from ..shardset.reader import read_manifest_raw
    from ..util.units import format_size
    from .types import layout_line, print_prep

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
    print(f"layout      {layout_line(m)}")
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
    _print_extra(m.extra)
    print_prep(m)
    return 0


def _num(v) -> str:
    """A manifest value as the summary shows it: integers with thousands separators."""
    return f"{v:,}" if isinstance(v, int) and not isinstance(v, bool) else str(v)


def _natural(items):
    """``(name, value)`` pairs in natural order of the names (C2 before C10)."""
    import re

    return sorted(items, key=lambda kv: [int(t) if t.isdigit() else t for t in re.split(r"(\d+)", str(kv[0]))])


def _print_extra(extra: dict) -> None:
    """The format's own manifest fields: scalars (absent ones left out), the sparse nonzeros, the text
    tokenizer and the documents and tokens per subset."""
    width = 11
    for k, v in sorted(extra.items()):
        if v is None:
            continue
        if not isinstance(v, (dict, list)):
            print(f"{k:<{width}} {_num(v)}")
        elif k == "nonzeros" and isinstance(v, dict):  # sparse LibSVM: per-row nonzeros
            print(f"{k:<{width}} " + " ".join(f"{a} {_num(v.get(a))}" for a in ("min", "mean", "max", "total")))
        elif k == "tokenizer" and isinstance(v, dict):  # text: which tokenizer made the ids
            sha = v.get("sha256")
            print(f"{k:<{width}} {v.get('name')}   vocabulary {_num(v.get('vocab_size'))}, eod id "
                  f"{_num(v.get('eod_id'))}" + (f", sha256 {str(sha)[:16]}..." if sha else ""))
        elif k == "categorical" and isinstance(v, (dict, list)):  # tabular: each column's table size, in order
            pairs = _natural(v.items()) if isinstance(v, dict) else [  # (a set written before: keyed by name)
                (e.get("column"), e) for e in v if isinstance(e, dict)]
            print(f"{'tables':<{width}} " + ", ".join(
                f"{name} {_num(e.get('table_size'))}" for name, e in pairs if isinstance(e, dict)))
    subsets = extra.get("subsets")
    if isinstance(subsets, dict) and subsets:  # text: per Pile subset
        name_w = max(len("subset"), *(len(n) for n in subsets))
        print(f"{'subsets':<{width}} {len(subsets)}")
        print(f"  {'subset':<{name_w}} {'documents':>12} {'tokens':>15}")
        for name, c in sorted(subsets.items()):
            c = c if isinstance(c, dict) else {}
            print(f"  {name:<{name_w}} {_num(c.get('documents', '?')):>12} {_num(c.get('tokens', '?')):>15}")


def _cmd_verify(args) -> int:
    from ..shardset.verify import verify

    report = verify(args.path, progress=not args.no_progress and sys.stderr.isatty(),
                    raise_on_error=not args.all)
    if report.problems:
        for p in report.problems:
            print(f"FAIL {p}", file=sys.stderr)
        print(f"tfpipe: error: {len(report.problems)} problem(s) in {report.location}", file=sys.stderr)
        return 4
    blocks = f", {report.blocks:,} columnar blocks well-formed" if report.blocks else ""
    print(f"OK {report.location}: {report.shards} shards, {report.records:,} records, CRCs, counts, "
          f"sizes and sha256 match the manifest{blocks}")
    return 0
