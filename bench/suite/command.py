"""``tfpipe bench all``: every benchmark behind the README's "Measured speed" table, ``--repeats`` times each, in
a fresh process per run, with the 1-minute load average before and after each run and the CPU count.

Prints one line per figure: its target, the median and the range (min-max) over the runs, the load the runs
ran under, whether the median meets the target and how many runs did. ``--json`` / ``--json-out`` give every
run's numbers; ``--markdown PATH`` writes the README table rows (median [min-max] of N runs, with the load).
The slow benchmarks (tune, beam) run only when named with ``--with`` or ``--only``.
"""
from __future__ import annotations

import argparse
import json
import sys

from converters.cli.parser import add_json_option, add_json_out_option, add_output_file_option
from converters.cli.types import duration_seconds, positive_int

from .specs import BENCHMARKS, DEFAULT, OPTIONAL, show, show_range

__all__ = ["add_parser", "run", "format_table", "format_markdown", "parse_names", "DEFAULT_REPEATS"]

DEFAULT_REPEATS = 3


def parse_names(text: str) -> list[str]:
    """``--only`` / ``--with``: comma-separated benchmark names, each known (an argparse type: a bad name is a
    usage error, with a hint for a close one)."""
    names = [s.strip() for s in text.split(",") if s.strip()]
    if not names:
        raise argparse.ArgumentTypeError("give at least one benchmark name")
    for n in names:
        if n not in BENCHMARKS:
            raise argparse.ArgumentTypeError(
                f"invalid choice: {n!r} (choose from {', '.join(repr(b) for b in BENCHMARKS)})")
    return list(dict.fromkeys(names))


def add_parser(bench_sub) -> argparse.ArgumentParser:
    p = bench_sub.add_parser("all", help="every README benchmark, N runs each: median, range and load",
                             description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--repeats", type=positive_int, default=DEFAULT_REPEATS, metavar="N",
                   help=f"runs of each benchmark, each in a fresh process (default {DEFAULT_REPEATS})")
    p.add_argument("--only", type=parse_names, default=None, metavar="NAME[,NAME]",
                   help=f"run only these benchmarks (default: {', '.join(DEFAULT)}); also: {', '.join(OPTIONAL)}")
    p.add_argument("--with", dest="extra", type=parse_names, default=None, metavar="NAME[,NAME]",
                   help=f"add slow benchmarks to the default set: {', '.join(OPTIONAL)}")
    add_json_option(p, "every run's numbers and the summary")
    add_json_out_option(p, "every run's numbers and the summary")
    add_output_file_option(p, "--markdown",
                           "write the README 'Measured speed' table rows (median [min-max], load) to PATH")
    p.add_argument("--timeout", type=duration_seconds, default=None, metavar="SECONDS",
                   help="stop a run that takes longer and record it as failed (default: no limit)")
    p.add_argument("--smoke", action="store_true",
                   help="tiny sizes, to check that the harness works (the figures mean nothing)")
    p.add_argument("--no-progress", action="store_true", help="no progress lines on stderr")
    return p


def run(args) -> int:
    from converters.util.errors import TfpipeError
    from converters.util.outfile import write_output

    from .runner import run_all

    if args.only and args.extra:
        raise TfpipeError("give either --only or --with, not both")
    names = args.only or [*DEFAULT, *(n for n in (args.extra or []) if n not in DEFAULT)]
    say = None if args.no_progress else (lambda s: print(s, file=sys.stderr, flush=True))
    result = run_all(names, args.repeats, smoke=args.smoke, timeout=args.timeout, say=say)
    text = json.dumps(result, indent=2)
    if args.json_out:
        write_output(args.json_out, (text + "\n").encode(), what="--json-out")
    if args.markdown:
        write_output(args.markdown, (format_markdown(result) + "\n").encode(), what="--markdown")
    print(text if args.json else format_table(result))
    failed = [b["name"] for b in result["benchmarks"] if b["errors"]]
    if failed:
        print(f"tfpipe: error: runs failed in {', '.join(failed)} (the table counts only the runs that finished; "
              f"rerun one with 'tfpipe bench ...' to see why)", file=sys.stderr)
        return 1
    return 0


def _range(m: dict) -> str:
    return show_range(m["min"], m["max"], m["unit"])


def _load(b: dict) -> str:
    return "-" if b["load"] is None else f"{b['load']['min']:.2f}–{b['load']['max']:.2f}"


def format_table(result: dict) -> str:
    head = ("benchmark", "metric", "target", "median", "min–max", "runs", "load", "median verdict", "every run")
    rows = []
    for b in result["benchmarks"]:
        for m in b["metrics"]:
            target = "—" if m["op"] is None else BENCHMARKS[b["name"]].metric(m["key"]).target_text()
            if not m["runs"]:
                rows.append((b["name"], m["label"], target, "-", "-", f"0/{b['runs_asked']}", _load(b), "NO RUNS", "-"))
                continue
            verdict = "—" if m["median_meets"] is None else ("meets" if m["median_meets"] else "MISSES")
            every = "—" if m["op"] is None else (
                "yes" if m["all_runs_meet"] else f"NO ({m['runs_meeting']}/{m['runs']} met)")
            rows.append((b["name"], m["label"], target, show(m["median"], m["unit"]), _range(m),
                         f"{m['runs']}/{b['runs_asked']}", _load(b), verdict, every))
    widths = [max(len(str(r[i])) for r in (head, *rows)) for i in range(len(head))]
    lines = ["  ".join(str(c).ljust(w) for c, w in zip(r, widths)).rstrip() for r in (head, *rows)]
    lines.insert(1, "  ".join("-" * w for w in widths))
    cpus = f"{result['cpu_count']} CPUs ({result['cores_allowed']} allowed)"
    lines.append(f"\n{result['repeats']} run(s) of each, {cpus}, {result['seconds']:.0f} s in all; "
                 f"{result['fresh_process']}; load: the 1-minute load average before and after the runs"
                 + ("; SMOKE SIZES: these figures mean nothing" if result["smoke"] else ""))
    return "\n".join(lines)


def _figure(m: dict) -> str:
    if not m["runs"]:
        return f"{m['label']}: no run finished"
    return f"{m['label']} **{show(m['median'], m['unit'])}** [{_range(m)}]"


def _target(b: dict, keys: tuple[str, ...]) -> str:
    out = []
    for m in b["metrics"]:
        if m["key"] in keys and m["op"] is not None:
            spec = BENCHMARKS[b["name"]].metric(m["key"])
            if not m["runs"]:
                out.append(f"{spec.target_text()} (no runs)")
                continue
            verdict = "met" if m["median_meets"] else "MISSED"
            out.append(f"{spec.target_text()} ({verdict} by the median; {m['runs_meeting']}/{m['runs']} runs)")
    return ", ".join(out) or "—"


def format_markdown(result: dict) -> str:
    """The README "Measured speed" rows of this run: | benchmark (size; N runs, load) | median [min-max] | target |."""
    lines = [f"<!-- tfpipe bench all --repeats {result['repeats']}, {result['started']}, {result['cpu_count']} CPUs"
             f"{', SMOKE SIZES' if result['smoke'] else ''} -->",
             "| benchmark | measured | target |", "|---|---|---|"]
    for b in result["benchmarks"]:
        by = {m["key"]: m for m in b["metrics"]}
        for row in BENCHMARKS[b["name"]].rows:
            runs = f"median [min–max] of {b['runs_ok']} run{'s' if b['runs_ok'] != 1 else ''}, load {_load(b)}"
            title = f"{row.title} ({row.size(result['smoke']) if row.size else b['size']}; {runs})"
            measured = "; ".join(_figure(by[k]) for k in row.keys)
            lines.append(f"| {title} | {measured} | {_target(b, row.keys)} |")
    return "\n".join(lines)
