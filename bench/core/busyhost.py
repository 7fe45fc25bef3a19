"""The default graph on a busy host: default vs the best hand-tuned graph beside another TensorFlow reader
process, and as two local ranks each reading half the set (``bench all``'s ``pipeline-loaded`` row).

- :func:`beside_reader`: a second process reads the same set in a loop through ``build_dataset`` (another
  multi-threaded TensorFlow job) while this one times, in paired rounds, the default graph and each
  hand-tuned graph (``bench.core.variants``); per round, the default's records/s over the best hand-tuned
  one's; the median of the rounds.
- :func:`two_ranks`: two processes started together with Open MPI's local-rank variables (as ``mpirun -np 2``
  sets them), each reading every other file of the set with its own graph; the aggregate records/s (all
  records over the wall time until the slower rank ends), for tfpipe's default and for the hand-tuned
  sequential → batch → parse → prefetch graph, alternating, per round; the median ratio.

``python -m bench.core.busyhost rank DIR BATCH GRAPH INDEX EPOCHS BARRIER_DIR`` is one rank (prints its records).
"""
from __future__ import annotations

import contextlib
import json
import os
import shutil
import statistics
import subprocess
import sys
import time

__all__ = ["BUSY_LOOP", "MATMUL_LOOP", "neighbour_codes", "neighbour_processes", "reader_code", "beside_reader",
           "two_ranks", "rank_graph", "RANK_GRAPHS"]

RANK_GRAPHS = ("default", "hand_tuned")
BARRIER_TIMEOUT_S = 300.0  # both ranks import TensorFlow and build their graphs, then start reading together


def _env() -> dict:
    env = dict(os.environ)
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    env["PYTHONPATH"] = os.pathsep.join(p for p in (root, env.get("PYTHONPATH")) if p)
    env.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    return env


def reader_code(data: str, batch: int) -> str:
    """Python code of another TensorFlow job: ``build_dataset`` reading ``data`` in a loop, endlessly."""
    return ("from converters.cli.quiet import lean_tensorflow_import\n"
            "lean_tensorflow_import()\n"
            "from pipeline import PipelineSpec, build_dataset\n"
            f"ds = build_dataset(PipelineSpec.from_manifest({data!r}, {batch}, epochs=None))\n"
            "for _ in ds: pass\n")


BUSY_LOOP = "while True: pass"

# another TensorFlow job that computes (a model's step on the host): 512 x 512 matmuls in a loop, on all of
# TensorFlow's intra-op threads
MATMUL_LOOP = ("from converters.cli.quiet import lean_tensorflow_import\n"
               "lean_tensorflow_import()\n"
               "import tensorflow as tf\n"
               "a = tf.random.stateless_normal([512, 512], seed=[1, 2])\n"
               "x = a\n"
               "while True:\n"
               "    x = tf.math.tanh(tf.linalg.matmul(x, a))\n")


def neighbour_codes(kind: str, data: str, batch: int) -> list[str]:
    """The code of the processes beside a measurement: ``none``, ``reader`` (another TensorFlow job reading
    ``data``), ``matmul`` (another TensorFlow job computing: :data:`MATMUL_LOOP`) or ``busy`` (two busy loops)."""
    if kind == "reader":
        return [reader_code(data, batch)]
    codes = {"none": [], "matmul": [MATMUL_LOOP], "busy": [BUSY_LOOP, BUSY_LOOP]}
    if kind not in codes:
        raise ValueError(f"neighbours must be one of {sorted([*codes, 'reader'])}, got {kind!r}")
    return codes[kind]


@contextlib.contextmanager
def neighbour_processes(codes, settle_s: float = 5.0):
    """Python processes running ``codes`` (e.g. :data:`BUSY_LOOP`) while the block runs; killed after it."""
    others = [subprocess.Popen([sys.executable, "-c", c], env=_env(), stdout=subprocess.DEVNULL,
                               stderr=subprocess.DEVNULL) for c in codes]
    try:
        if others:
            time.sleep(settle_s)  # let the neighbours start
        yield others
    finally:
        for other in others:
            other.kill()
            other.wait()


def beside_reader(data: str, batch: int, *, rounds: int, max_batches: int, neighbours: str = "reader") -> dict:
    """Paired rounds of default vs each hand-tuned graph beside ``neighbours`` (:func:`neighbour_codes`: another
    process reading the set, ``"reader"``; computing, ``"matmul"``; two busy loops, ``"busy"``)."""
    from .variants import HAND_TUNED, run_speed_suite

    with neighbour_processes(neighbour_codes(neighbours, data, batch)):
        ratios, default_rates, best_rates = [], [], []
        for _ in range(rounds):
            rows = {r["variant"]: r for r in run_speed_suite(data, batch, ["vectorized", *HAND_TUNED],
                                                               max_batches=max_batches)}
            best = max(rows[n]["records_per_s"] for n in HAND_TUNED)
            default_rates.append(rows["vectorized"]["records_per_s"])
            best_rates.append(best)
            ratios.append(rows["vectorized"]["records_per_s"] / best)
    return {"ratio": statistics.median(ratios), "ratios": ratios, "default_rec_s": statistics.median(default_rates),
            "best_rec_s": statistics.median(best_rates)}


def rank_graph(data: str, batch: int, graph: str, index: int, ranks: int = 2, epochs: int = 1):
    """Rank ``index``'s graph over every ``ranks``-th file of the set, ``epochs`` times: tfpipe's default or
    the hand-tuned one."""
    from pipeline import PipelineSpec, build_dataset

    spec = PipelineSpec.from_manifest(data, batch, epochs=epochs)
    spec = spec.with_(files=spec.files[index::ranks])
    if graph == "default":
        return build_dataset(spec)
    if graph != "hand_tuned":
        raise ValueError(f"graph must be one of {RANK_GRAPHS}, got {graph!r}")
    import tensorflow as tf

    from pipeline.build import parse_fn

    ctype = "GZIP" if spec.compression == "gzip" else ""
    ds = tf.data.TFRecordDataset(list(spec.files), ctype, 8 << 20).batch(batch)
    ds = ds.map(parse_fn(spec.schema), num_parallel_calls=tf.data.AUTOTUNE)
    return (ds.repeat(epochs) if epochs != 1 else ds).prefetch(tf.data.AUTOTUNE)


def _two_ranks_once(data: str, batch: int, graph: str, epochs: int) -> float:
    """Aggregate records/s of two ranks started together (all records over the slower rank's wall time)."""
    import tempfile

    barrier = tempfile.mkdtemp(prefix="tfpipe-ranks-")  # each rank, its graph built, waits here for the other
    procs = []
    for i in range(2):
        env = _env()
        env.update(OMPI_COMM_WORLD_RANK=str(i), OMPI_COMM_WORLD_SIZE="2", OMPI_COMM_WORLD_LOCAL_RANK=str(i),
                   OMPI_COMM_WORLD_LOCAL_SIZE="2")
        procs.append(subprocess.Popen([sys.executable, "-m", "bench.core.busyhost", "rank", data, str(batch), graph,
                                       str(i), str(epochs), barrier], env=env, stdout=subprocess.PIPE, text=True))
    try:
        outs = [json.loads((p.communicate()[0] or "{}").strip().splitlines()[-1]) for p in procs]
    finally:
        shutil.rmtree(barrier, ignore_errors=True)
    if any(p.returncode for p in procs):
        raise RuntimeError(f"a rank failed: exit codes {[p.returncode for p in procs]}")
    start = min(o["start"] for o in outs)
    return sum(o["records"] for o in outs) / (max(o["end"] for o in outs) - start)


def two_ranks(data: str, batch: int, *, rounds: int, epochs: int = 1) -> dict:
    """Paired rounds (order alternating) of two local ranks: tfpipe's default vs the hand-tuned graph."""
    ratios, default_rates, tuned_rates = [], [], []
    for r in range(rounds):
        order = RANK_GRAPHS if r % 2 == 0 else RANK_GRAPHS[::-1]
        rates = {g: _two_ranks_once(data, batch, g, epochs) for g in order}
        default_rates.append(rates["default"])
        tuned_rates.append(rates["hand_tuned"])
        ratios.append(rates["default"] / rates["hand_tuned"])
    return {"ratio": statistics.median(ratios), "ratios": ratios, "default_rec_s": statistics.median(default_rates),
            "hand_tuned_rec_s": statistics.median(tuned_rates)}


def _rank_main(argv: list[str]) -> int:
    data, batch, graph, index, epochs, barrier = argv[0], int(argv[1]), argv[2], int(argv[3]), int(argv[4]), argv[5]
    ds = rank_graph(data, batch, graph, index, epochs=epochs)
    import tensorflow as tf

    open(os.path.join(barrier, f"ready-{index}"), "w").close()
    deadline = time.time() + BARRIER_TIMEOUT_S
    while len(os.listdir(barrier)) < 2 and time.time() < deadline:
        time.sleep(0.001)
    start = time.time()
    records = 0
    for b in ds:
        records += int(tf.nest.flatten(b)[0].shape[0])
    print(json.dumps({"records": records, "start": start, "end": time.time()}))
    return 0


if __name__ == "__main__":
    if len(sys.argv) != 8 or sys.argv[1] != "rank":
        sys.exit("usage: python -m bench.core.busyhost rank DIR BATCH GRAPH INDEX EPOCHS BARRIER_DIR")
    from converters.cli.quiet import lean_tensorflow_import

    lean_tensorflow_import()  # a rank needs no Keras (TensorFlow's import then takes about a third less CPU)
    raise SystemExit(_rank_main(sys.argv[2:]))
