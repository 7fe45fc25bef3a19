"""``tfpipe bench small-files``: the cost of many small input files. One run generates ``--files`` LibSVM
files of about ``--file-bytes`` each (Criteo-like lines) and one file holding the same lines, converts each
``--repeats`` times (alternating, same options), and reports the best time of each and their ratio. Target: the
many files take at most 3x the time of the one file (per-file overhead small: small files are packed into one
task, parsed one by one and serialized together)."""
from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import tempfile
import time

from converters.cli.parser import add_json_option
from converters.cli.types import positive_int

__all__ = ["add_parser", "run", "run_benchmark", "format_report", "TARGET_RATIO"]

TARGET_RATIO = 3.0


def add_parser(sub) -> argparse.ArgumentParser:
    p = sub.add_parser("small-files", help="many ~2 KB LibSVM files vs one file of the same lines",
                       description=__doc__.split("\n\n", 1)[0])
    p.add_argument("--files", type=positive_int, default=20_000, metavar="N",
                   help="number of small files (default 20000)")
    p.add_argument("--file-bytes", type=positive_int, default=2048, metavar="N",
                   help="bytes per small file, about (default 2048)")
    p.add_argument("--workers", type=positive_int, default=1, metavar="N", help="converter workers (default 1)")
    p.add_argument("--repeats", type=positive_int, default=2, metavar="N",
                   help="alternating rounds, best kept (default 2)")
    add_json_option(p, "the report")
    return p


def run(args) -> int:
    say = None if args.json else (lambda s: print(s, file=sys.stderr, flush=True))
    report = run_benchmark(files=args.files, file_bytes=args.file_bytes, workers=args.workers,
                           rounds=args.repeats, log=say)
    print(json.dumps(report, indent=2) if args.json else format_report(report))
    return 0


def _write_inputs(tmp: str, files: int, file_bytes: int) -> tuple[str, str, int]:
    from converters.libsvm.synthetic import criteo_lines

    many, one = os.path.join(tmp, "many"), os.path.join(tmp, "one.libsvm")
    os.makedirs(many)
    k, seed, total = 0, 0, 0
    with open(one, "wb") as whole:
        while k < files:
            lines = criteo_lines(5_000, seed=seed).split(b"\n")[:-1]
            seed += 5_000
            chunk, size = [], 0
            for ln in lines:
                chunk.append(ln)
                size += len(ln) + 1
                if size >= file_bytes:
                    data = b"\n".join(chunk) + b"\n"
                    with open(os.path.join(many, f"part-{k:06d}.libsvm"), "wb") as f:
                        f.write(data)
                    whole.write(data)
                    total += len(data)
                    k += 1
                    chunk, size = [], 0
                    if k == files:
                        break
    return many, one, total


def run_benchmark(*, files: int = 20_000, file_bytes: int = 2048, workers: int = 1, rounds: int = 2,
                  workdir: str | None = None, log=None) -> dict:
    """Convert the many files and the one file ``rounds`` times each, alternating; best times and ratio."""
    from converters.libsvm.convert import convert_libsvm

    say = log or (lambda s: None)
    tmp = tempfile.mkdtemp(prefix="tfpipe-bench-small-", dir=workdir)
    try:
        say(f"generating {files:,} files of ~{file_bytes:,} bytes and one file of the same lines ...")
        many, one, nbytes = _write_inputs(tmp, files, file_bytes)
        out = os.path.join(tmp, "out")
        convert_libsvm(one, out, field_size=39, workers=workers, overwrite=True)  # warm up (kernels, caches)
        best = {"many": float("inf"), "one": float("inf")}
        records = {}
        for r in range(rounds):
            for name, src in (("many", many), ("one", one)):
                t = time.perf_counter()
                m = convert_libsvm(src, out, field_size=39, workers=workers, overwrite=True)
                best[name] = min(best[name], time.perf_counter() - t)
                records[name] = m.records
            say(f"round {r + 1}: many files {best['many']:.2f} s, one file {best['one']:.2f} s (best so far)")
        if records["many"] != records["one"]:
            raise RuntimeError(f"record counts differ: {records}")
        return {"benchmark": "small-files", "files": files, "file_bytes": file_bytes, "bytes": nbytes,
                "records": records["one"], "workers": workers, "rounds": rounds,
                "many_seconds": round(best["many"], 3), "one_seconds": round(best["one"], 3),
                "ratio": round(best["many"] / best["one"], 3), "target_ratio": TARGET_RATIO,
                "cpu_count": os.cpu_count()}
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def format_report(r: dict) -> str:
    ok = "meets" if r["ratio"] <= r["target_ratio"] else "MISSES"
    return (f"{r['files']:,} files of ~{r['file_bytes']:,} bytes ({r['bytes'] / 1e6:.1f} MB, {r['records']:,} "
            f"records), --workers {r['workers']}, best of {r['rounds']}:\n"
            f"  many files  {r['many_seconds']:.2f} s\n"
            f"  one file    {r['one_seconds']:.2f} s\n"
            f"  ratio       {r['ratio']:.2f}x ({ok} the target <= {r['target_ratio']:.0f}x)")
