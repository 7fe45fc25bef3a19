"""``tfpipe bench overhead``: what measuring costs. The same loop (a prefetched tf.data source and a
simulated step of ``--step-ms``) runs bare and under ``bench.core.measure``, alternating, several rounds; the
ratio of median wall times should stay below 1.02 (measuring adds < 2 %)."""
from __future__ import annotations

import argparse
import statistics
import sys
import time

from converters.cli.types import positive_int, step_milliseconds

__all__ = ["add_parser", "run", "overhead"]

TARGET_RATIO = 1.02


def overhead(*, step_ms: float = 10.0, steps: int = 100, rounds: int = 5, batch_size: int = 64,
             device: str = "host") -> dict:
    """Wall seconds of ``rounds`` bare and measured loops (alternating) and the median ratio."""
    if steps < 1 or rounds < 1:
        raise ValueError(f"steps and rounds must be >= 1, got {steps} and {rounds}")
    import tensorflow as tf

    from ..core.measure import measure
    from ..core.steps import simulated_step

    step = simulated_step(step_ms, device=device)

    def dataset():
        return tf.data.Dataset.range(1 << 62).batch(batch_size).prefetch(tf.data.AUTOTUNE)

    def bare():
        it = iter(dataset())
        next(it)  # same warmup as measured (1 step)
        step(None)
        t0 = time.perf_counter()
        for _ in range(steps):
            step(next(it))
        return time.perf_counter() - t0

    def measured():
        r = measure(dataset(), step, steps=steps, warmup=1)
        return r.wall_s

    bare_s, measured_s = [], []
    for i in range(rounds):
        order = (bare, measured) if i % 2 == 0 else (measured, bare)
        for f in order:
            (bare_s if f is bare else measured_s).append(f())
    b, m = statistics.median(bare_s), statistics.median(measured_s)
    return {"step_ms": step_ms, "steps": steps, "rounds": rounds, "bare_s": bare_s, "measured_s": measured_s,
            "bare_median_s": b, "measured_median_s": m, "ratio": m / b if b > 0 else float("nan"),
            "target_ratio": TARGET_RATIO}


def add_parser(bench_sub) -> argparse.ArgumentParser:
    p = bench_sub.add_parser("overhead", help="check that measuring adds < 2%% to a 10 ms step loop",
                             description=__doc__)
    p.add_argument("--step-ms", type=step_milliseconds, default=10.0, metavar="MS", help="simulated step (default 10)")
    p.add_argument("--steps", type=positive_int, default=200, metavar="N", help="steps per loop (default 200)")
    p.add_argument("--repeats", type=positive_int, default=5, metavar="N",
                   help="bare/measured pairs, alternating (default 5)")
    return p


def run(args) -> int:
    res = overhead(step_ms=args.step_ms, steps=args.steps, rounds=args.repeats)
    print(f"{args.steps} steps of {args.step_ms:g} ms, {args.repeats} rounds: bare median "
          f"{res['bare_median_s']:.4f} s, measured median {res['measured_median_s']:.4f} s")
    ok = res["ratio"] < TARGET_RATIO
    print(f"ratio {res['ratio']:.4f} ({(res['ratio'] - 1) * 100:+.2f}%) -> "
          f"{'within' if ok else 'ABOVE'} the {(TARGET_RATIO - 1) * 100:.0f}% target")
    print(f"tfpipe: measure_overhead_pct={(res['ratio'] - 1) * 100:.3f};")
    if not ok:
        print("note: on a loaded machine rerun with more --repeats; scheduling noise dominates", file=sys.stderr)
    return 0
