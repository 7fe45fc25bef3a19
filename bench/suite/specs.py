"""The benchmarks ``tfpipe bench all`` runs: one ``Benchmark`` per README "Measured speed" row (or two rows
from one run), each with its sizes (``full``; ``smoke`` only shrinks them, for testing the harness), the
metrics it reports with their targets, and ``measure(smoke) -> {metric: value}``, one run in this process.

Each ``measure`` calls the benchmark's own library function
(``bench.commands.convert_libsvm.run_benchmark``, ``bench.core.variants.run_speed_suite``, ...) and picks numbers
from the dict it returns; ``bench.suite.runner`` calls it in a fresh process per run. Heavy imports stay inside
the functions.
"""
from __future__ import annotations

import os
import shutil
import tempfile
from typing import Callable

from sharding.epochs import epoch_batches

from .figures import Benchmark, Metric, Row, meets, show, show_range

__all__ = ["Metric", "Row", "Benchmark", "BENCHMARKS", "DEFAULT", "OPTIONAL", "meets", "show", "show_range"]

# -- one run of each ---------------------------------------------------------------------------------------

def _libsvm_lines(smoke: bool) -> int:
    return 2_000 if smoke else 100_000


def _convert_libsvm(smoke: bool) -> dict:
    from ..commands.convert_libsvm import run_benchmark

    r = run_benchmark(lines=_libsvm_lines(smoke), workers_list=(1, 2))
    w = {s["workers"]: s for s in r["scaling"]}
    return {"ratio": r["ratio"], "ratio_cpu": r["ratio_cpu"],
            "tfpipe_rec_s": r["tfpipe_workers_1"]["records_per_s"], "naive_rec_s": r["naive"]["records_per_s"],
            "workers2_vs_1": w[2]["speedup_vs_1"], "input_mb": round(r["input_bytes"] / 1e6, 1)}


def _convert_libsvm_sparse(smoke: bool) -> dict:
    from ..commands.convert_libsvm import run_benchmark

    r = run_benchmark(lines=_libsvm_lines(smoke), workers_list=(), sparse=True)
    return {"ratio": r["ratio"], "ratio_cpu": r["ratio_cpu"],
            "tfpipe_rec_s": r["tfpipe_workers_1"]["records_per_s"], "naive_rec_s": r["naive"]["records_per_s"],
            "input_mb": round(r["input_bytes"] / 1e6, 1)}


def _text_sizes(smoke: bool) -> dict:
    return (dict(docs=40, vocab_size=400, seq_len=128, repeats=1, mean_words=60) if smoke else
            dict(docs=3000, vocab_size=16384, seq_len=2048, repeats=2))


def _convert_text(smoke: bool) -> dict:
    from ..commands.convert_text import run_benchmark

    r = run_benchmark(**_text_sizes(smoke))
    return {"ratio": r["ratio"], "cpu_ratio": r["cpu_ratio"], "threads": r["threads"],
            "text_mb": round(r["text_bytes"] / 1e6, 1)}


def _tabular(smoke: bool) -> dict:
    from ..commands.tabular import run_benchmark

    r = run_benchmark(rows=3_000 if smoke else 450_000, memory=not smoke)
    return {"ratio_cpu": r["ratio_cpu"], "ratio_wall": r["ratio_wall"], "tfpipe_rows_cpu_s": r["tfpipe_rows_per_cpu_s"],
            "naive_rows_cpu_s": r["naive_rows_per_cpu_s"], **({"peak_growth": r["peak_growth"]} if "peak_growth" in r
                                                              else {})}


def _records(smoke: bool) -> int:
    return 6_000 if smoke else 200_000


def _epoch_cap(smoke: bool, batch: int) -> int:
    """Batches read per run: one epoch of the generated set (short last batch included), at most 400."""
    return min(epoch_batches(_records(smoke), batch, False), 400)


def _shards(tmp: str, smoke: bool) -> str:
    from converters.libsvm.synthetic import write_criteo_shards

    data = os.path.join(tmp, "criteo")
    write_criteo_shards(data, _records(smoke), shard_bytes=(1 << 20) if smoke else 16 << 20)
    return data


def _pipeline(smoke: bool) -> dict:
    """The no-step suite (naive, default, hand-tuned, Pipe mode), then naive and default against a simulated step
    chosen from the naive and default throughputs just measured (as ``tfpipe bench pipeline`` with no arguments)."""
    from ..core.compare import compare
    from ..commands.pipeline import choose_scenario
    from ..core.steps import simulated_step
    from ..core.variants import HAND_TUNED, VARIANTS, run_speed_suite

    batch = 128 if smoke else 512
    tmp = tempfile.mkdtemp(prefix="tfpipe-bench-all-")
    try:
        data = _shards(tmp, smoke)
        names = ["naive", "vectorized", *HAND_TUNED, "pipe"]
        rows = {r["variant"]: r for r in run_speed_suite(
            data, batch, names, max_batches=_epoch_cap(smoke, batch),
            options={"pipe": {"pipe_dir": os.path.join(tmp, "pipe")}})}
        d = rows["vectorized"]
        step_batch, step_ms, _ = choose_scenario(rows["naive"]["records_per_s"], d["records_per_s"], batch)
        reports = compare({n: (lambda n=n: VARIANTS[n](data, step_batch).repeat()) for n in ("naive", "vectorized")},
                          simulated_step(step_ms, device="auto"), steps=6 if smoke else _STEPS,
                          warmup=2 if smoke else 5, gpu_sampler=None)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    best = max((rows[n] for n in HAND_TUNED), key=lambda r: r["records_per_s"])
    wait = {r.name: r.input_wait_pct for r in reports}
    return {"default_vs_naive": d["vs_naive"], "default_vs_best": d["vs_best_hand_tuned"],
            "default_rec_s": d["records_per_s"], "naive_rec_s": rows["naive"]["records_per_s"],
            "best_rec_s": best["records_per_s"], "best_variant": best["variant"],
            "pipe_vs_file": rows["pipe"]["records_per_s"] / d["records_per_s"],
            "pipe_rec_s": rows["pipe"]["records_per_s"], "step_batch": step_batch, "step_ms": step_ms,
            "naive_wait_pct": wait["naive"], "default_wait_pct": wait["vectorized"]}


_STEPS = 40  # measured steps per graph against the simulated step


def _pipeline_loaded(smoke: bool) -> dict:
    """Default vs best hand-tuned beside another TensorFlow reader process (paired rounds), and two local ranks
    each reading half the set (files alternating; 4 MiB shards so the halves hold about as many records)."""
    from converters.libsvm.synthetic import write_criteo_shards

    from ..core.busyhost import beside_reader, two_ranks

    batch = 128 if smoke else 512
    tmp = tempfile.mkdtemp(prefix="tfpipe-bench-all-")
    try:
        data = os.path.join(tmp, "criteo")
        write_criteo_shards(data, _records(smoke), shard_bytes=(1 << 20) if smoke else 4 << 20)
        near = beside_reader(data, batch, rounds=_LOADED_ROUNDS[smoke][0],
                             max_batches=_epoch_cap(smoke, batch))
        ranks = two_ranks(data, batch, rounds=_LOADED_ROUNDS[smoke][1], epochs=1 if smoke else 5)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return {"beside_reader_vs_best": near["ratio"], "beside_reader_default_rec_s": near["default_rec_s"],
            "beside_reader_best_rec_s": near["best_rec_s"], "two_ranks_vs_hand_tuned": ranks["ratio"],
            "two_ranks_default_rec_s": ranks["default_rec_s"], "two_ranks_hand_tuned_rec_s": ranks["hand_tuned_rec_s"]}


_LOADED_ROUNDS = {True: (1, 1), False: (5, 3)}  # (paired rounds beside a reader, paired rounds of two ranks)


def _small_files(smoke: bool) -> dict:
    from ..commands.small_files import run_benchmark

    r = run_benchmark(files=60 if smoke else 20_000, rounds=2)
    return {"ratio": r["ratio"], "many_s": r["many_seconds"], "one_s": r["one_seconds"],
            "mb": round(r["bytes"] / 1e6, 1)}


def _layout_sizes(smoke: bool) -> dict:
    return ({"rows": 20_000, "windows": 200, "rounds": 1, "shuffle_buffer": 1_000} if smoke else
            {"rows": 300_000, "windows": 20_000, "rounds": 5, "shuffle_buffer": 10_000})


def _layout(smoke: bool) -> dict:
    from ..commands.layout import run_benchmark

    z = _layout_sizes(smoke)
    w = run_benchmark(rows=z["rows"], windows=z["windows"], rounds=z["rounds"],
                      shuffle_buffer=z["shuffle_buffer"])["workloads"]
    lib, text = w["libsvm"], w["text"]
    sh = lib["shuffled"]
    return {"libsvm_ratio": lib["ratio"], "libsvm_cpu_ratio": lib["cpu_ratio"], "libsvm_rec_s": lib["columnar_rec_s"],
            "libsvm_best_rec_s": lib["best_example_rec_s"], "libsvm_bytes": lib["bytes_ratio"],
            "text_ratio": text["ratio"], "text_cpu_ratio": text["cpu_ratio"], "text_rec_s": text["columnar_rec_s"],
            "text_best_rec_s": text["best_example_rec_s"], "text_bytes": text["bytes_ratio"],
            "libsvm_example_default_rec_s": lib["example_default_rec_s"],
            "shuffled_columnar_ratio": sh["columnar_default_ratio"], "shuffled_example_ratio": sh["example_default_ratio"],
            "shuffled_columnar_rec_s": sh["columnar_default_rec_s"], "shuffled_example_rec_s": sh["example_default_rec_s"],
            "shuffled_hand_rec_s": sh["hand_shuffle_rec_s"], "shuffled_load_max": sh["load_max"]}


def _resume_sizes(smoke: bool) -> dict:
    return ({"records": 6_000, "shards": 4, "rounds": 2, "batch_size": 64, "shuffle_buffer": 200} if smoke else
            {"records": 200_000, "shards": 16, "rounds": 15, "batch_size": 256, "shuffle_buffer": 1_000})


def _resume(smoke: bool) -> dict:
    from ..commands.resume import run_benchmark

    r = run_benchmark(**_resume_sizes(smoke))
    return {"cpu_ratio": r["cpu_ratio"], "wall_ratio": r["wall_ratio"],
            "resumable_rec_per_cpu_s": r["resumable_rec_per_cpu_s"], "default_rec_per_cpu_s": r["default_rec_per_cpu_s"]}


def _overhead(smoke: bool) -> dict:
    from ..commands.overhead import overhead

    r = overhead(step_ms=2.0, steps=10, rounds=1) if smoke else overhead(step_ms=10.0, steps=200, rounds=5)
    return {"ratio": r["ratio"]}


def _tune(smoke: bool) -> dict:
    from ..commands.tune import run_benchmark

    tmp = tempfile.mkdtemp(prefix="tfpipe-bench-all-")
    try:
        data = _shards(tmp, smoke)
        r = run_benchmark(data, rounds=1 if smoke else 5, tune_seconds=2.0 if smoke else 20.0,
                          batch_size=128 if smoke else 512, max_seconds=1.0 if smoke else 3.0)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return dict(r["figures"])


def _beam_lines(smoke: bool) -> int:
    return 2_000 if smoke else 1_000_000  # Beam's fixed start-up cost: at 200,000 lines the ratio is 0.21, not 0.5


def _beam(smoke: bool) -> dict:
    from ..core.convert_beam import run_beam_benchmark

    r = run_beam_benchmark(lines=_beam_lines(smoke), repeat=1)
    return {"ratio": r["ratio"], "ratio_cpu": r["ratio_cpu"], "identical": float(bool(r["identical"]))}


def _offload(smoke: bool) -> dict:
    from ..commands.offload import run_benchmark, smoke_set

    tmp, _ = smoke_set(smoke)
    try:
        r = run_benchmark(os.path.join(tmp, "criteo"), rounds=1 if smoke else 3, batch_size=512,
                          step_ms=1.0 if smoke else 5.0, batches=4 if smoke else 0)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    f, v = r["figures"], r["verdict"]
    return {"cpu_ratio": v["cpu_ratio"], "speedup": v["speedup"],
            "local_rec_s": f["local"]["records_per_s"]["median"],
            "service_rec_s": f["service"]["records_per_s"]["median"]}


# -- the list ------------------------------------------------------------------------------------------------

def _lines_size(what: str) -> Callable[[bool], str]:
    return lambda smoke: f"{_libsvm_lines(smoke):,} {what}, both pinned to one core"


_RATIO8 = dict(op=">=", target=8.0)

BENCHMARKS: dict[str, Benchmark] = {b.name: b for b in (
    Benchmark("convert-libsvm", "tfpipe bench convert-libsvm", _lines_size("Criteo-like lines"), _convert_libsvm,
              (Metric("ratio", "vs naive, wall", **_RATIO8), Metric("ratio_cpu", "vs naive, CPU", **_RATIO8),
               Metric("tfpipe_rec_s", "tfpipe", "rec/s"), Metric("naive_rec_s", "naive", "rec/s"),
               Metric("workers2_vs_1", "--workers 2 vs --workers 1")),
              (Row("`tfpipe bench convert-libsvm`", ("ratio", "ratio_cpu", "tfpipe_rec_s", "naive_rec_s",
                                                      "workers2_vs_1")),)),
    Benchmark("convert-libsvm-sparse", "tfpipe bench convert-libsvm --sparse",
              _lines_size("sparse lines (0-150 pairs, qid:)"), _convert_libsvm_sparse,
              (Metric("ratio", "vs naive, wall", **_RATIO8), Metric("ratio_cpu", "vs naive, CPU", **_RATIO8),
               Metric("tfpipe_rec_s", "tfpipe --sparse --keep-qid", "rec/s"), Metric("naive_rec_s", "naive", "rec/s")),
              (Row("`tfpipe bench convert-libsvm --sparse`", ("ratio", "ratio_cpu", "tfpipe_rec_s", "naive_rec_s")),)),
    Benchmark("convert-text", "tfpipe bench convert-text",
              lambda s: (f"{_text_sizes(s)['docs']:,} Pile-like docs, BPE vocab {_text_sizes(s)['vocab_size']:,}, "
                         f"all cores, best of {_text_sizes(s)['repeats']} inside a run"), _convert_text,
              (Metric("ratio", "convert_text vs encode_batch alone, wall", op="<=", target=1.5),
               Metric("cpu_ratio", "same, CPU")),
              (Row("`tfpipe bench convert-text`", ("ratio", "cpu_ratio")),)),
    Benchmark("tabular", "tfpipe bench tabular",
              lambda s: f"{3_000 if s else 450_000:,} Criteo-like rows, DeepFM target, exact vocabularies, one process",
              _tabular,
              (Metric("ratio_cpu", "vs per-line converter, rows per CPU-second", op=">=", target=10.0),
               Metric("ratio_wall", "same, wall"), Metric("tfpipe_rows_cpu_s", "tfpipe", "rec/s"),
               Metric("naive_rows_cpu_s", "per-line", "rec/s"),
               Metric("peak_growth", "peak memory, 4x rows and values", "ratio", op="<=", target=1.3)),
              (Row("`tfpipe bench tabular`", ("ratio_cpu", "ratio_wall", "tfpipe_rows_cpu_s", "naive_rows_cpu_s",
                                              "peak_growth")),),
              optional=True),
    Benchmark("pipeline", "tfpipe bench pipeline",
              lambda s: f"{_records(s):,} records, batch {128 if s else 512}, no step", _pipeline,
              (Metric("default_vs_naive", "default vs naive", op=">=", target=12.0),
               Metric("default_vs_best", "default vs best hand-tuned", op=">=", target=0.95),
               Metric("default_rec_s", "default", "rec/s"), Metric("naive_rec_s", "naive", "rec/s"),
               Metric("best_rec_s", "best hand-tuned", "rec/s"),
               Metric("pipe_vs_file", "Pipe mode vs File mode", op=">=", target=0.8),
               Metric("pipe_rec_s", "Pipe mode", "rec/s"),
               Metric("naive_wait_pct", "naive input wait", "%", op=">", target=20.0),
               Metric("default_wait_pct", "default input wait", "%", op="<", target=5.0),
               Metric("step_batch", "step batch", "n"), Metric("step_ms", "step", "ms")),
              (Row("`tfpipe bench pipeline`", ("default_vs_naive", "default_vs_best", "default_rec_s", "naive_rec_s",
                                                "best_rec_s")),
               Row("Pipe mode vs File mode, `tfpipe bench pipeline`, local FIFOs", ("pipe_vs_file", "pipe_rec_s")),
               Row("`tfpipe bench pipeline`, naive and default against the step chosen from their throughputs",
                   ("naive_wait_pct", "default_wait_pct", "step_batch", "step_ms"),
                   lambda s: f"{_records(s):,} records, {6 if s else _STEPS} steps after {2 if s else 5} warmup"))),
    Benchmark("pipeline-loaded", "tfpipe bench all --only pipeline-loaded",
              lambda s: f"{_records(s):,} records, batch {128 if s else 512}, no step", _pipeline_loaded,
              (Metric("beside_reader_vs_best", "default vs best hand-tuned", op=">=", target=0.95),
               Metric("beside_reader_default_rec_s", "default", "rec/s"),
               Metric("beside_reader_best_rec_s", "best hand-tuned", "rec/s"),
               Metric("two_ranks_vs_hand_tuned", "default vs hand-tuned, aggregate", op=">=", target=0.95),
               Metric("two_ranks_default_rec_s", "default, 2 ranks", "rec/s"),
               Metric("two_ranks_hand_tuned_rec_s", "hand-tuned, 2 ranks", "rec/s")),
              (Row("`tfpipe bench pipeline` beside another TensorFlow reader process",
                   ("beside_reader_vs_best", "beside_reader_default_rec_s", "beside_reader_best_rec_s"),
                   lambda s: f"{_records(s):,} records, batch {128 if s else 512}, median of "
                             f"{_LOADED_ROUNDS[s][0]} paired rounds"),
               Row("`tfpipe bench pipeline` as two local ranks, each reading half the set with its own graph",
                   ("two_ranks_vs_hand_tuned", "two_ranks_default_rec_s", "two_ranks_hand_tuned_rec_s"),
                   lambda s: f"{_records(s):,} records, batch {128 if s else 512}, "
                             f"{1 if s else 5} epoch(s) per rank, median of {_LOADED_ROUNDS[s][1]} paired rounds"))),
    Benchmark("small-files", "tfpipe bench small-files",
              lambda s: f"{60 if s else 20_000:,} LibSVM files of ~2 KB vs one file of the same lines, best of 2",
              _small_files,
              (Metric("ratio", "many files vs one file", op="<=", target=3.0),
               Metric("many_s", "many files", "s"), Metric("one_s", "one file", "s")),
              (Row("`tfpipe bench small-files`", ("ratio", "many_s", "one_s")),)),
    Benchmark("offload", "tfpipe bench offload SET",
              lambda s: (f"{4_000 if s else 200_000:,} Criteo-like records, batch 512, {1 if s else 5} ms step, trainer "
                         f"on one core, one local worker on the others, {1 if s else 3} round(s)"), _offload,
              (Metric("cpu_ratio", "trainer CPU per record, service vs local", "ratio", op="<=", target=0.5),
               Metric("speedup", "records/s, service vs local"),
               Metric("local_rec_s", "local", "rec/s"), Metric("service_rec_s", "service", "rec/s")),
              (Row("`tfpipe bench offload`", ("cpu_ratio", "speedup", "local_rec_s", "service_rec_s")),)),
    Benchmark("layout", "tfpipe bench layout",
              lambda s: (f"{_layout_sizes(s)['rows']:,} Criteo-like rows, batch 1,024; "
                         f"{_layout_sizes(s)['windows']:,} windows of 2,049 tokens, batch 64; median of "
                         f"{_layout_sizes(s)['rounds']} paired rounds; seeded shuffled reads with shuffle_buffer "
                         f"{_layout_sizes(s)['shuffle_buffer']:,}"), _layout,
              (Metric("libsvm_ratio", "LibSVM: columnar default vs best hand-tuned Example", op=">=", target=2.5),
               Metric("libsvm_cpu_ratio", "same, per CPU-second"),
               Metric("libsvm_rec_s", "columnar default", "rec/s"),
               Metric("libsvm_best_rec_s", "best hand-tuned Example", "rec/s"),
               Metric("libsvm_bytes", "bytes on disk, columnar / Example", "ratio", op="<=", target=1.0),
               Metric("text_ratio", "text windows: columnar default vs best hand-tuned Example", op=">=", target=2.5),
               Metric("text_cpu_ratio", "same, per CPU-second"),
               Metric("text_rec_s", "columnar default", "rec/s"),
               Metric("text_best_rec_s", "best hand-tuned Example", "rec/s"),
               Metric("text_bytes", "bytes on disk, columnar / Example", "ratio", op="<=", target=1.0),
               Metric("libsvm_example_default_rec_s", "Example default, unshuffled", "rec/s"),
               Metric("shuffled_columnar_ratio", "seeded shuffled columnar default vs hand-tuned shuffle(B) Example",
                      op=">=", target=2.5),
               Metric("shuffled_example_ratio", "seeded shuffled Example default vs hand-tuned shuffle(B) Example",
                      op=">=", target=0.95),
               Metric("shuffled_columnar_rec_s", "columnar default, seeded shuffled", "rec/s"),
               Metric("shuffled_example_rec_s", "Example default, seeded shuffled", "rec/s"),
               Metric("shuffled_hand_rec_s", "hand-tuned shuffle(B) Example", "rec/s")),
              (Row("`tfpipe bench layout`, fixed-width LibSVM rows",
                   ("libsvm_ratio", "libsvm_cpu_ratio", "libsvm_rec_s", "libsvm_best_rec_s", "libsvm_bytes")),
               Row("`tfpipe bench layout`, text windows of 2,049 tokens",
                   ("text_ratio", "text_cpu_ratio", "text_rec_s", "text_best_rec_s", "text_bytes")),
               Row("`tfpipe bench layout --shuffle-buffer`, the seeded shuffled read beside the unshuffled one, "
                   "both layouts",
                   ("shuffled_columnar_ratio", "shuffled_example_ratio", "shuffled_columnar_rec_s", "libsvm_rec_s",
                    "shuffled_example_rec_s", "libsvm_example_default_rec_s", "shuffled_hand_rec_s")))),
    Benchmark("resume", "tfpipe bench resume",
              lambda s: (f"{_resume_sizes(s)['records']:,} Criteo-like records in {_resume_sizes(s)['shards']} shards, "
                         f"batch {_resume_sizes(s)['batch_size']}, shuffle_buffer {_resume_sizes(s)['shuffle_buffer']:,} "
                         f"in both, median of {_resume_sizes(s)['rounds']} paired rounds"), _resume,
              (Metric("cpu_ratio", "resumable vs default graph, records per CPU-second", op=">=", target=0.95),
               Metric("wall_ratio", "same, records/s"),
               Metric("resumable_rec_per_cpu_s", "resumable, records per CPU-second", "rec/s"),
               Metric("default_rec_per_cpu_s", "default, records per CPU-second", "rec/s")),
              (Row("`tfpipe bench resume`", ("cpu_ratio", "wall_ratio", "resumable_rec_per_cpu_s",
                                             "default_rec_per_cpu_s")),)),
    Benchmark("overhead", "tfpipe bench overhead",
              lambda s: "10 × 2 ms steps, 1 round" if s else "200 × 10 ms steps, 5 rounds", _overhead,
              (Metric("ratio", "measured / bare wall time", "ratio", op="<", target=1.02),),
              (Row("`tfpipe bench overhead`", ("ratio",)),)),
    Benchmark("tune", "tfpipe bench tune --repeats 5 --tune-seconds 20 --generate 200000",
              lambda s: f"{_records(s):,} records, {1 if s else 5} paired rounds after a {2 if s else 20} s tune",
              _tune,
              (Metric("tuned_vs_best_hand_tuned", "tuned default vs best hand-tuned", op=">=", target=0.97),
               Metric("tuned_vs_naive", "tuned default vs naive", op=">=", target=12.0),
               Metric("untuned_vs_best_hand_tuned", "untuned default vs best hand-tuned", op=">=", target=0.9)),
              (Row("`tfpipe bench tune`", ("tuned_vs_best_hand_tuned", "tuned_vs_naive",
                                           "untuned_vs_best_hand_tuned")),), optional=True),
    Benchmark("beam", "tfpipe bench convert-libsvm --engine beam --repeats 1",
              lambda s: f"{_beam_lines(s):,} Criteo-like lines, both pinned to one core", _beam,
              (Metric("ratio", "Beam vs local, wall", op=">=", target=0.4), Metric("ratio_cpu", "Beam vs local, CPU"),
               Metric("identical", "byte-identical output (1 = yes)", "ratio", op=">=", target=1.0)),
              (Row("`tfpipe bench convert-libsvm --engine beam`", ("ratio", "ratio_cpu", "identical")),), optional=True),
)}

DEFAULT = tuple(n for n, b in BENCHMARKS.items() if not b.optional)
OPTIONAL = tuple(n for n, b in BENCHMARKS.items() if b.optional)
