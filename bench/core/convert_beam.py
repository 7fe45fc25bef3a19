"""``tfpipe bench convert-libsvm --engine beam``: the Beam engine vs the local converter, same file, one run.

Generate a Criteo-like LibSVM file, convert it with the local converter (``workers=1``) and with the Beam
engine on its in-process runner (one worker), both pinned to the same CPU core, alternating ``--repeat``
times; report throughputs, CPU time and the ratio Beam / local (target >= 0.4: two passes over the text cost
at most ~2x, the rest must be small). Optionally also the Beam engine with N worker processes
(``direct_running_mode=multi_processing``, all cores allowed). The outputs are checked to be byte-identical.
"""
from __future__ import annotations

import filecmp
import os
import shutil
import tempfile
import time

from ..infra.pinning import pinned
from ..infra.pinning import rate as _rate

__all__ = ["run_beam_benchmark", "format_beam_report", "TARGET_BEAM_RATIO"]

TARGET_BEAM_RATIO = 0.4


def _same(a: str, b: str) -> bool:
    names = sorted(os.listdir(a))
    return names == sorted(os.listdir(b)) and all(filecmp.cmp(os.path.join(a, n), os.path.join(b, n), shallow=False)
                                                  for n in names)


def run_beam_benchmark(*, lines: int = 1_000_000, field_size: int = 39, repeat: int = 2, beam_workers: int = 0,
                       cpu: int | None = None, workdir: str | None = None, log=None) -> dict:
    """Run the comparison; returns the report as a dict (see ``format_beam_report``)."""
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    from converters.engines.beam import convert_libsvm as beam_convert
    from converters.libsvm.convert import run as local_convert
    from converters.libsvm.options import LibsvmOptions
    from converters.libsvm.synthetic import write_criteo_libsvm


    say = log or (lambda s: None)
    tmp = tempfile.mkdtemp(prefix="tfpipe-bench-beam-", dir=workdir)
    try:
        src = os.path.join(tmp, "criteo.libsvm")
        say(f"generating {lines:,} Criteo-like lines ...")
        nbytes = write_criteo_libsvm(src, lines, field_size=field_size, seed=0)
        warm = os.path.join(tmp, "warm.libsvm")
        write_criteo_libsvm(warm, 200, field_size=field_size, seed=1)
        opts = LibsvmOptions(field_size)
        runs: dict[str, list] = {"local": [], "beam": []}
        with pinned(cpu) as core:
            local_convert([warm], os.path.join(tmp, "w0"), opts, workers=1)  # warm-up, not timed
            beam_convert([warm], os.path.join(tmp, "w1"), opts)
            for r in range(repeat):
                for name in ("local", "beam"):
                    say(f"{name} engine, run {r + 1}/{repeat} ...")
                    out = os.path.join(tmp, f"{name}{r}")
                    t, c = time.perf_counter(), time.process_time()
                    if name == "local":
                        m = local_convert([src], out, opts, workers=1)
                    else:
                        m = beam_convert([src], out, opts)
                    runs[name].append(_rate(nbytes, m.records, time.perf_counter() - t, time.process_time() - c))
            identical = _same(os.path.join(tmp, "local0"), os.path.join(tmp, "beam0"))
        multi = None
        if beam_workers > 1:
            say(f"beam engine, {beam_workers} worker processes (all cores allowed) ...")
            out = os.path.join(tmp, "multi")
            t = time.perf_counter()
            m = beam_convert([src], out, opts, beam_options={"direct_num_workers": beam_workers,
                                                            "direct_running_mode": "multi_processing"})
            multi = {"workers": beam_workers, **_rate(nbytes, m.records, time.perf_counter() - t)}
            identical = identical and _same(os.path.join(tmp, "local0"), out)
        best = {k: min(v, key=lambda x: x["seconds"]) for k, v in runs.items()}
        return {
            "benchmark": "convert-libsvm --engine beam",
            "lines": lines,
            "field_size": field_size,
            "input_bytes": nbytes,
            "pinned_cpu": core,
            "runs": runs,
            "local": best["local"],
            "beam": best["beam"],
            "ratio": round(best["local"]["seconds"] / best["beam"]["seconds"], 3),
            "ratio_cpu": round(best["local"]["cpu_seconds"] / max(best["beam"]["cpu_seconds"], 1e-9), 3),
            "target_ratio": TARGET_BEAM_RATIO,
            "beam_multi": multi,
            "identical": identical,
        }
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def format_beam_report(r: dict) -> str:
    lo, bm = r["local"], r["beam"]
    lines = [
        f"convert-libsvm --engine beam: {r['lines']:,} Criteo-like lines, {r['field_size']} fields, "
        f"{r['input_bytes'] / 1e6:.1f} MB of text; pinned to CPU {r['pinned_cpu']}, best of "
        f"{len(r['runs']['local'])}",
        f"  {'engine':<44} {'seconds':>8} {'MB/s':>8} {'records/s':>11} {'CPU s':>7} {'rec/CPU-s':>11}",
    ]
    for name, x in (("local (workers=1)", lo), ("beam (in-process FnApiRunner, 1 worker)", bm)):
        lines.append(f"  {name:<44} {x['seconds']:>8.2f} {x['mb_per_s']:>8.1f} {x['records_per_s']:>11,.0f} "
                     f"{x['cpu_seconds']:>7.2f} {x['records_per_cpu_s']:>11,.0f}")
    lines.append(f"  ratio beam/local: {r['ratio']:.2f}x wall clock, {r['ratio_cpu']:.2f}x by CPU time (target >= "
                 f"{r['target_ratio']}x)" + ("" if r["ratio"] >= r["target_ratio"] else "  [BELOW TARGET]"))
    if r["beam_multi"]:
        x = r["beam_multi"]
        lines.append(f"  beam, {x['workers']} worker processes (multi_processing, unpinned): {x['seconds']:.2f} s, "
                     f"{x['records_per_s']:,.0f} records/s")
    lines.append(f"  outputs byte-identical: {'yes' if r['identical'] else 'NO'}")
    return "\n".join(lines)
