"""Named tf.data graph variants over one shard set, and their throughput (records/s), side by side.

Stable API (used by ``tfpipe bench pipeline``):

- ``VARIANTS: dict[str, Callable[..., tf.data.Dataset]]`` — each builder is called as
  ``builder(manifest_path, batch_size, **kw)`` and returns a dataset of parsed batches
  (``(features, label)`` or a dict), read as the product reads the set's layout: on an Example set a "parse"
  is ``parse_example`` of a batch of records; on a columnar set (records are blocks of rows) it is the
  product's decode of a batch of blocks (``blocks_per_decode`` of them, ``tf.io.decode_raw``), rebatched to
  ``batch_size`` rows, and the naive graph decodes one block per call and batches its rows one by one. Names:

  ``naive``                            per-record ``parse_single_example`` map, then batch, no prefetch (baseline)
  ``vectorized``                       ``pipeline.build_dataset`` defaults (``kw`` are ``PipelineSpec`` options)
  ``sequential_batch_parse_prefetch``  one sequential reader → batch → ``parse_example`` → prefetch (hand-tuned)
  ``parallel_reads_autotune``          ``num_parallel_reads=AUTOTUNE`` → batch → parse → prefetch (hand-tuned)
  ``interleave_per_file_batched``      interleave over files of per-file batched readers → parse → prefetch
                                       (hand-tuned; batches may be short at file ends, order not deterministic)
  ``map_and_batch_vectorized``         sequential read → batch → parse with ``deterministic=False`` (hand-tuned)
  ``no_prefetch``                      ``build_dataset`` without the final prefetch
  ``cache_before_parse``               ``build_dataset`` with ``cache="memory"``, 2 epochs (``epochs=``)
  ``cache_after_parse``                read → batch → parse → cache → repeat, 2 epochs (``epochs=``)
  ``pipe``                             Pipe mode through local FIFOs fed by a writer thread from the shards
  ``shuffle``                          ``build_dataset`` with ``shuffle_buffer=10_000`` (``shuffle_buffer=``)

- ``HAND_TUNED``: the names that compete for "best hand-tuned graph".
- ``throughput(dataset, *, max_batches=None, warmup=2) -> dict(records_per_s, batches_per_s, seconds,
  records, batches, cpu_seconds, records_per_cpu_s)`` — warmup batches are taken from the same iterator and
  not timed; ``records_per_cpu_s`` (this process's CPU time, all threads) is the steadier figure on a busy host.
- ``run_speed_suite(manifest_path, batch_size, variants=None, *, repeats=1, warmup=2, max_batches=None,
  options=None) -> list[dict]`` — one row per variant: ``variant``, the throughput fields (best of
  ``repeats`` rounds, run round-robin), ``vs_naive`` and ``vs_best_hand_tuned`` (ratios of records/s;
  ``None`` when the reference was not run). ``options`` maps a variant name to extra keyword arguments.

``python -m bench.core.variants DIR [--batch-size 512] [--variants a,b,...] [--repeats 3] [--json]``.
"""
from __future__ import annotations

import argparse
import json
import logging
import os
import shutil
import tempfile
import time
import weakref
from typing import Any, Callable

__all__ = ["VARIANTS", "HAND_TUNED", "throughput", "run_speed_suite", "format_table", "main"]

log = logging.getLogger(__name__)

_BUFFER = 8 << 20  # 8 MiB read buffer for the hand-tuned readers


def _manifest(path: str):
    from pipeline import PipelineSpec

    return PipelineSpec.from_manifest(path, 1)


def _parse(spec):
    """The parse of a vector of records as the product reads the set: ``parse_example`` of Examples into
    ``(features, label)``, or the decode of a columnar set's blocks into a dict of rows (:func:`_rows` cuts it)."""
    if spec.layout is not None:
        from pipeline.graph.columnar import decode_blocks_fn

        return decode_blocks_fn(spec.schema, spec.layout)
    from pipeline.build import parse_fn

    return parse_fn(spec.schema)


def _unit(spec, batch_size: int) -> int:
    """Records per parse call: ``batch_size`` Examples, or the product's blocks per decode of a columnar set."""
    if spec.layout is None:
        return batch_size
    from pipeline.graph.columnar import blocks_per_decode
    from pipeline.plan.readplan import read_plan

    return blocks_per_decode(spec, read_plan(spec))


def _rows(spec, ds, batch_size: int | None):
    """Parsed batches as an Example set's graphs give them: a columnar set's decoded rows cut to ``batch_size``
    (None: cut already) and split into ``(features, label)``; an Example set's as they are."""
    if spec.layout is None:
        return ds
    from pipeline.graph.columnar import columnar_output

    return columnar_output(ds if batch_size is None else ds.rebatch(batch_size), spec)


def _batch_parse(spec, ds, batch_size: int, **map_kw: Any):
    """``ds`` (records) batched, parsed (``map_kw``: the map's options) and cut to ``batch_size`` rows."""
    ds = ds.batch(_unit(spec, batch_size)).map(_parse(spec), **map_kw)
    return _rows(spec, ds, batch_size)


def naive(manifest_path: str, batch_size: int, **kw: Any):
    import tensorflow as tf

    from pipeline.build import feature_spec

    spec = _manifest(manifest_path)
    records = tf.data.TFRecordDataset(list(spec.files), spec.compression_type)
    if spec.layout is not None:   # one block per decode call, its rows batched one by one
        decode = _parse(spec)
        rows = records.map(lambda block: decode(tf.expand_dims(block, 0))).unbatch()
        return _rows(spec, rows.batch(batch_size), None)
    fs = feature_spec(spec.schema)
    label = spec.schema.label

    def parse_one(x):
        d = tf.io.parse_single_example(x, fs)
        return (d, d.pop(label)) if label else d

    return records.map(parse_one).batch(batch_size)


def vectorized(manifest_path: str, batch_size: int, **kw: Any):
    from pipeline import PipelineSpec, build_dataset

    return build_dataset(PipelineSpec.from_manifest(manifest_path, batch_size, **kw))


def sequential_batch_parse_prefetch(manifest_path: str, batch_size: int, **kw: Any):
    import tensorflow as tf

    spec = _manifest(manifest_path)
    ds = tf.data.TFRecordDataset(list(spec.files), spec.compression_type, _BUFFER)
    return _batch_parse(spec, ds, batch_size, num_parallel_calls=tf.data.AUTOTUNE).prefetch(tf.data.AUTOTUNE)


def map_and_batch_vectorized(manifest_path: str, batch_size: int, **kw: Any):
    import tensorflow as tf

    spec = _manifest(manifest_path)
    ds = tf.data.TFRecordDataset(list(spec.files), spec.compression_type, _BUFFER)
    ds = _batch_parse(spec, ds, batch_size, num_parallel_calls=tf.data.AUTOTUNE, deterministic=False)
    return ds.prefetch(tf.data.AUTOTUNE)


def parallel_reads_autotune(manifest_path: str, batch_size: int, **kw: Any):
    import tensorflow as tf

    spec = _manifest(manifest_path)
    ds = tf.data.TFRecordDataset(list(spec.files), spec.compression_type, _BUFFER, num_parallel_reads=tf.data.AUTOTUNE)
    return _batch_parse(spec, ds, batch_size, num_parallel_calls=tf.data.AUTOTUNE).prefetch(tf.data.AUTOTUNE)


def interleave_per_file_batched(manifest_path: str, batch_size: int, **kw: Any):
    import tensorflow as tf

    spec = _manifest(manifest_path)
    ctype = spec.compression_type
    cycle = kw.get("cycle_length") or max(1, min(len(spec.files), spec.cores))
    unit = _unit(spec, batch_size)
    ds = tf.data.Dataset.from_tensor_slices(list(spec.files)).interleave(
        lambda f: tf.data.TFRecordDataset(f, ctype, _BUFFER).batch(unit), cycle_length=cycle,
        num_parallel_calls=tf.data.AUTOTUNE, deterministic=False)
    ds = ds.map(_parse(spec), num_parallel_calls=tf.data.AUTOTUNE)
    return _rows(spec, ds, batch_size).prefetch(tf.data.AUTOTUNE)


def no_prefetch(manifest_path: str, batch_size: int, **kw: Any):
    return vectorized(manifest_path, batch_size, **{**kw, "prefetch": 0})


def cache_before_parse(manifest_path: str, batch_size: int, **kw: Any):
    kw = {"epochs": 2, **kw, "cache": "memory"}
    return vectorized(manifest_path, batch_size, **kw)


def cache_after_parse(manifest_path: str, batch_size: int, **kw: Any):
    import tensorflow as tf

    spec = _manifest(manifest_path)
    ds = tf.data.TFRecordDataset(list(spec.files), spec.compression_type, _BUFFER)
    ds = _batch_parse(spec, ds, batch_size, num_parallel_calls=tf.data.AUTOTUNE).cache().repeat(kw.get("epochs", 2))
    return ds.prefetch(tf.data.AUTOTUNE)


def pipe(manifest_path: str, batch_size: int, **kw: Any):
    """Pipe mode over local FIFOs in a fresh temporary directory (one writer thread per call)."""
    from pipeline import PipelineSpec, build_dataset
    from pipeline.graph.pipesource import simulate_channel

    epochs = kw.pop("epochs", 1)
    channel = kw.pop("channel", "train")
    pipe_dir = kw.pop("pipe_dir", None)
    own_dir = pipe_dir is None
    if own_dir:
        pipe_dir = tempfile.mkdtemp(prefix="tfpipe-bench-pipe-")
    files = _manifest(manifest_path).files
    simulate_channel(pipe_dir, channel, list(files), epochs=epochs)
    spec = PipelineSpec.from_manifest(manifest_path, batch_size, mode="pipe", channel=channel, pipe_dir=pipe_dir,
                                      epochs=epochs, pipe_timeout=kw.pop("pipe_timeout", 60.0), **kw)
    ds = build_dataset(spec)
    if own_dir:  # remove the FIFO directory with the dataset (or at exit)
        weakref.finalize(ds, shutil.rmtree, pipe_dir, True)
    return ds


def shuffle(manifest_path: str, batch_size: int, **kw: Any):
    kw = {"shuffle_buffer": 10_000, "seed": 0, **kw}
    return vectorized(manifest_path, batch_size, **kw)


VARIANTS: dict[str, Callable[..., Any]] = {
    "naive": naive,
    "vectorized": vectorized,
    "sequential_batch_parse_prefetch": sequential_batch_parse_prefetch,
    "parallel_reads_autotune": parallel_reads_autotune,
    "interleave_per_file_batched": interleave_per_file_batched,
    "map_and_batch_vectorized": map_and_batch_vectorized,
    "no_prefetch": no_prefetch,
    "cache_before_parse": cache_before_parse,
    "cache_after_parse": cache_after_parse,
    "pipe": pipe,
    "shuffle": shuffle,
}

HAND_TUNED = ("sequential_batch_parse_prefetch", "parallel_reads_autotune", "interleave_per_file_batched",
              "map_and_batch_vectorized")


def _batch_len(batch) -> int:
    import tensorflow as tf

    first = tf.nest.flatten(batch)[0]
    return int(first.shape[0]) if first.shape.rank else 1     # a scalar element is one record


def throughput(dataset, *, max_batches: int | None = None, warmup: int = 2) -> dict:
    """Iterate ``dataset`` once: ``warmup`` batches untimed, then the rest (or ``max_batches``) timed."""
    it = iter(dataset)
    for _ in range(warmup):
        try:
            next(it)
        except StopIteration:
            break
    records = batches = 0
    cpu0 = time.process_time()
    start = time.perf_counter()
    for batch in it:
        records += _batch_len(batch)
        batches += 1
        if max_batches is not None and batches >= max_batches:
            break
    seconds = time.perf_counter() - start
    cpu = time.process_time() - cpu0
    rate = (lambda n: n / seconds if seconds > 0 else 0.0)
    return {"records_per_s": rate(records), "batches_per_s": rate(batches), "seconds": seconds,
            "records": records, "batches": batches, "cpu_seconds": cpu,
            "records_per_cpu_s": records / cpu if cpu > 0 else 0.0}


def run_speed_suite(manifest_path: str, batch_size: int, variants: list[str] | tuple[str, ...] | None = None, *,
                    repeats: int = 1, warmup: int = 2, max_batches: int | None = None,
                    options: dict[str, dict] | None = None) -> list[dict]:
    """records/s per variant (best of ``repeats`` round-robin rounds) with ratios vs naive and best hand-tuned."""
    names = list(variants) if variants else list(VARIANTS)
    unknown = [n for n in names if n not in VARIANTS]
    if unknown:
        raise ValueError(f"unknown variant(s) {unknown}; valid: {sorted(VARIANTS)}")
    if repeats < 1:
        raise ValueError(f"repeats must be >= 1, got {repeats}")
    options = options or {}
    best: dict[str, dict] = {}
    for r in range(repeats):
        for name in names:
            ds = VARIANTS[name](manifest_path, batch_size, **dict(options.get(name, {})))
            res = throughput(ds, max_batches=max_batches, warmup=warmup)
            log.info("round %d %s: %.0f records/s", r, name, res["records_per_s"])
            if name not in best or res["records_per_s"] > best[name]["records_per_s"]:
                best[name] = res
    naive_rate = best.get("naive", {}).get("records_per_s")
    tuned = [best[n]["records_per_s"] for n in HAND_TUNED if n in best]
    tuned_rate = max(tuned) if tuned else None
    rows = []
    for name in names:
        res = best[name]
        rate = res["records_per_s"]
        rows.append({"variant": name, **res,
                     "vs_naive": rate / naive_rate if naive_rate else None,
                     "vs_best_hand_tuned": rate / tuned_rate if tuned_rate else None})
    return rows


def format_table(rows: list[dict]) -> str:
    def ratio(v):
        return f"{v:6.2f}x" if v is not None else "      -"

    out = [f"{'variant':34s} {'records/s':>12s} {'vs naive':>9s} {'vs best tuned':>14s} {'rec/CPU-s':>10s}"]
    for r in rows:
        out.append(f"{r['variant']:34s} {r['records_per_s']:12,.0f} {ratio(r['vs_naive']):>9s} "
                   f"{ratio(r['vs_best_hand_tuned']):>14s} {r.get('records_per_cpu_s', 0):10,.0f}")
    return "\n".join(out)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.core.variants", description="records/s of tf.data variants")
    p.add_argument("manifest")
    p.add_argument("--batch-size", type=int, default=512)
    p.add_argument("--variants", help=f"comma-separated subset of: {','.join(VARIANTS)}")
    p.add_argument("--repeats", type=int, default=1)
    p.add_argument("--max-batches", type=int)
    p.add_argument("--json", action="store_true")
    args = p.parse_args(argv)
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    names = args.variants.split(",") if args.variants else None
    rows = run_speed_suite(args.manifest, args.batch_size, names, repeats=args.repeats,
                           max_batches=args.max_batches)
    print(json.dumps(rows, indent=2) if args.json else format_table(rows))
    return 0


if __name__ == "__main__":
    from converters.cli.quiet import lean_tensorflow_import

    lean_tensorflow_import()  # the variants need no Keras (TensorFlow's import then takes about a third less CPU)
    raise SystemExit(main())
