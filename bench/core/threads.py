"""CPU thread tuning: intra-op, inter-op and ``OMP_NUM_THREADS`` combinations for a CPU training step.

TensorFlow's thread pools are fixed once it initializes, so each combination runs in a fresh Python
subprocess (``python -m bench.core.threads --child ...``) with its environment set before TensorFlow is
imported. The child trains a small model (DeepFM-style by default) on a synthetic batch and prints one
JSON line with its step times. ``candidate_combos`` (pure) chooses what to try: TensorFlow's defaults, all
vCPUs, half of them (≈ physical cores), 1, and a few mixed settings.
"""
from __future__ import annotations

import dataclasses
import json
import logging
import os
import subprocess
import sys
from typing import Sequence

from converters.util.checks import set_int

__all__ = ["ThreadCombo", "ThreadResult", "candidate_combos", "run_combo", "tune", "best", "parse_combos"]

log = logging.getLogger(__name__)

MODELS = ("deepfm", "lm")


@dataclasses.dataclass(frozen=True)
class ThreadCombo:
    """``intra``/``inter``: TensorFlow pool sizes (0 = TensorFlow chooses); ``omp``: OMP_NUM_THREADS (None = unset)."""

    intra: int
    inter: int
    omp: int | None = None

    def __post_init__(self):
        for name in ("intra", "inter"):
            set_int(self, name, name=f"ThreadCombo.{name}", minimum=0, must="an int >= 0")
        set_int(self, "omp", name="ThreadCombo.omp", minimum=1, none=True, must="an int >= 1 or None")

    @property
    def label(self) -> str:
        def f(v):
            return "tf" if v == 0 else str(v)
        return f"intra={f(self.intra)} inter={f(self.inter)} omp={'unset' if self.omp is None else self.omp}"

    def env(self, base: dict[str, str] | None = None) -> dict[str, str]:
        env = dict(os.environ if base is None else base)
        env.pop("OMP_NUM_THREADS", None)
        if self.omp is not None:
            env["OMP_NUM_THREADS"] = str(self.omp)
        env.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
        return env


@dataclasses.dataclass(frozen=True)
class ThreadResult:
    combo: ThreadCombo
    step_ms_p50: float | None
    step_ms_mean: float | None
    records_per_s: float | None
    error: str = ""

    @property
    def ok(self) -> bool:
        return not self.error and self.step_ms_p50 is not None

    def as_dict(self) -> dict:
        return {"intra": self.combo.intra, "inter": self.combo.inter, "omp": self.combo.omp,
                "step_ms_p50": self.step_ms_p50, "step_ms_mean": self.step_ms_mean,
                "records_per_s": self.records_per_s, "error": self.error}


def candidate_combos(cpus: int) -> list[ThreadCombo]:
    """Combinations worth trying on a host with ``cpus`` vCPUs, TensorFlow's defaults first, no duplicates."""
    if not isinstance(cpus, int) or cpus < 1:
        raise ValueError(f"cpus must be an int >= 1, got {cpus!r}")
    half = max(1, cpus // 2)
    two = min(2, cpus)
    raw = [
        ThreadCombo(0, 0, None),          # TensorFlow's defaults
        ThreadCombo(cpus, cpus, cpus),    # all vCPUs everywhere
        ThreadCombo(cpus, 1, cpus),
        ThreadCombo(cpus, two, cpus),
        ThreadCombo(half, half, half),    # physical cores (hyper-threads off)
        ThreadCombo(half, 1, half),
        ThreadCombo(half, two, half),
        ThreadCombo(cpus, two, half),
        ThreadCombo(1, 1, 1),
    ]
    out, seen = [], set()
    for c in raw:
        if c not in seen:
            seen.add(c)
            out.append(c)
    return out


def parse_combos(text: str) -> list[ThreadCombo]:
    """``"2,1,2;1,1,1"`` → combos (intra,inter[,omp]); ``omp`` may be ``-`` for unset."""
    out = []
    for part in text.split(";"):
        part = part.strip()
        if not part:
            continue
        fields = [f.strip() for f in part.split(",")]
        if len(fields) not in (2, 3):
            raise ValueError(f"thread combination {part!r}: expected intra,inter[,omp]")
        try:
            intra, inter = int(fields[0]), int(fields[1])
            omp = None if len(fields) == 2 or fields[2] in ("-", "") else int(fields[2])
        except ValueError:
            raise ValueError(f"thread combination {part!r}: numbers expected") from None
        out.append(ThreadCombo(intra, inter, omp))
    if not out:
        raise ValueError(f"no thread combinations in {text!r}")
    return out


def run_combo(combo: ThreadCombo, *, steps: int = 30, warmup: int = 5, batch_size: int = 512,
              model: str = "deepfm", timeout: float = 300.0) -> ThreadResult:
    """Run one combination in a fresh subprocess; errors become ``ThreadResult.error``, never exceptions."""
    if model not in MODELS:
        raise ValueError(f"model must be one of {MODELS}, got {model!r}")
    cfg = {"intra": combo.intra, "inter": combo.inter, "steps": steps, "warmup": warmup,
           "batch_size": batch_size, "model": model}
    cmd = [sys.executable, "-m", "bench.core.threads", "--child", json.dumps(cfg)]
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))  # the repository
    env = combo.env()
    env["PYTHONPATH"] = os.pathsep.join(p for p in (root, env.get("PYTHONPATH", "")) if p)
    try:
        proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        return ThreadResult(combo, None, None, None, error=f"timed out after {timeout:g} s")
    lines = [ln for ln in proc.stdout.splitlines() if ln.startswith("{")]
    if proc.returncode != 0 or not lines:
        tail = (proc.stderr.strip().splitlines() or ["no output"])[-1]
        return ThreadResult(combo, None, None, None, error=f"exit {proc.returncode}: {tail}")
    doc = json.loads(lines[-1])
    return ThreadResult(combo, doc["step_ms_p50"], doc["step_ms_mean"], doc["records_per_s"])


def tune(combos: Sequence[ThreadCombo], *, on_result=None, **kw) -> list[ThreadResult]:
    """Run every combination (sequentially: they must not compete for the CPUs)."""
    results = []
    for c in combos:
        log.info("threads: %s", c.label)
        r = run_combo(c, **kw)
        if on_result is not None:
            on_result(r)
        results.append(r)
    return results


def best(results: Sequence[ThreadResult]) -> ThreadResult | None:
    ok = [r for r in results if r.ok]
    return min(ok, key=lambda r: r.step_ms_p50) if ok else None


def _child(cfg: dict) -> None:
    import tensorflow as tf

    tf.config.threading.set_intra_op_parallelism_threads(int(cfg["intra"]))
    tf.config.threading.set_inter_op_parallelism_threads(int(cfg["inter"]))
    from .measure import measure
    from .models import deepfm, deepfm_batch, keras_step, lm_batch, tiny_lm

    bs = int(cfg["batch_size"])
    if cfg["model"] == "lm":
        model, batch = tiny_lm(64), lm_batch(bs, 64)
    else:
        model, batch = deepfm(39), deepfm_batch(bs, 39)
    n, w = int(cfg["steps"]), int(cfg["warmup"])
    r = measure([batch] * (n + w), keras_step(model), steps=n, warmup=w)
    print(json.dumps({"step_ms_p50": r.step_ms.p50, "step_ms_mean": r.step_ms.mean,
                      "records_per_s": r.records_per_s,
                      "intra": tf.config.threading.get_intra_op_parallelism_threads(),
                      "inter": tf.config.threading.get_inter_op_parallelism_threads(),
                      "omp": os.environ.get("OMP_NUM_THREADS")}), flush=True)


if __name__ == "__main__":  # child process entry point
    if len(sys.argv) == 3 and sys.argv[1] == "--child":
        _child(json.loads(sys.argv[2]))
    else:
        sys.exit("usage: python -m bench.core.threads --child JSON  (internal; use `tfpipe bench threads`)")
