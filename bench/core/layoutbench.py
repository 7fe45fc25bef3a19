"""The Example and the columnar layout of the same rows, side by side (``tfpipe bench layout``).

- :func:`compare_layouts`: paired rounds (the order alternating): tfpipe's default graph on the columnar set,
  tfpipe's default on the Example set and every hand-tuned Example graph (``bench.core.variants.HAND_TUNED``);
  per round the columnar records/s over the best hand-tuned graph's; medians and ranges, records per
  CPU-second (this process's CPU time, the steadier figure on a busy host) and bytes on disk.
- :func:`criteo_sets`, :func:`text_sets`, :func:`relay_set`: the same rows in both layouts (fixed-width
  Criteo-like LibSVM rows; token windows of ``seq_len + 1`` ids; or the rows of a given set, re-laid).
- :func:`compare_shuffled`: the seeded shuffled read users train on: paired rounds of tfpipe's default graph of
  a seeded, shuffled spec on each layout (the resumable order; over rows on the columnar set) against the
  hand-tuned ``TFRecordDataset → shuffle(B) → batch → parse_example`` graph on the Example set.
- :func:`compare_limit`: how close the reads come to the machine's limit: paired rounds of the bare block read
  (``TFRecordDataset`` of the columnar set's blocks, nothing decoded; 8 blocks an element, and one block an
  element) beside tfpipe's default graph of both layouts, unshuffled and seeded shuffled; rows/s and rows per
  CPU-second.
- :func:`check_cost`: what checking every block as it is read costs (``pipeline.graph.blockcheck``): paired
  rounds of the columnar decode alone (read, batch of blocks, decode), checked against the bare
  ``parse_example`` + ``decode_raw`` decode without checks, both with TensorFlow's ops (the column kernel off);
  the ratio of rows/s (and rows per CPU-second).
- :func:`shuffle_table`: how far a seeded shuffled read moves rows in each layout with the same buffer
  (``bench.core.shufflemix``: mean displacement, rank correlation).
"""
from __future__ import annotations

import os
import statistics

import numpy as np

from .layoutsets import write_columnar, write_examples, write_layout_sets

__all__ = ["compare_layouts", "compare_shuffled", "compare_limit", "bare_blocks", "LIMIT_READS", "hand_shuffle",
           "check_cost", "criteo_sets", "text_sets", "relay_set", "set_bytes", "shuffle_table", "TEXT_SEQ_LEN",
           "TEXT_VOCAB"]

TEXT_SEQ_LEN = 2048        # windows of 2,049 token ids (inputs and the shifted targets in one row)
TEXT_VOCAB = 50_257        # a GPT-2-sized vocabulary: uint16 in the columnar layout


def criteo_sets(root: str, rows: int, *, block_rows: int = 256, shard_rows: int = 50_000) -> tuple[str, str]:
    """``rows`` Criteo-like fixed-width rows (39 fields) in both layouts under ``root``."""
    from converters.libsvm.options import libsvm_schema
    from converters.libsvm.synthetic import criteo_arrays

    return write_layout_sets(root, criteo_arrays(rows), libsvm_schema(39), block_rows=block_rows,
                             shard_rows=shard_rows)


def text_sets(root: str, windows: int, *, seq_len: int = TEXT_SEQ_LEN, vocab: int = TEXT_VOCAB,
              block_rows: int = 16, shard_rows: int = 2_000, seed: int = 0) -> tuple[str, str]:
    """``windows`` token windows of ``seq_len + 1`` ids in both layouts: Zipf-distributed token ranks, each
    rank a fixed random id of the vocabulary (so the Example layout's varints are mostly 2-3 bytes, as with a
    real BPE vocabulary of this size; ids that are mostly small would make the Example set smaller)."""
    from converters.text.options import FEATURE, text_schema

    rng = np.random.default_rng(seed)
    ranks = np.minimum(rng.zipf(1.1, (windows, seq_len + 1)) - 1, vocab - 1)
    ids = rng.permutation(vocab)[ranks]
    return write_layout_sets(root, {FEATURE: ids.astype(np.int64)}, text_schema(seq_len), block_rows=block_rows,
                             shard_rows=shard_rows)


def relay_set(path: str, root: str, *, block_rows: int = 256) -> tuple[str, str]:
    """(Example set, columnar set) of the rows of the fixed-width set at ``path``: the set itself for its own
    layout, the other written under ``root`` from its rows (read through ``build_dataset``)."""
    from converters.shardset.reader import read_manifest
    from pipeline import PipelineSpec, build_dataset

    m = read_manifest(path)
    if m.schema.varlen:
        raise ValueError(f"{path}: variable-length features {list(m.schema.varlen)} have no columnar form")
    spec = PipelineSpec.from_manifest(path, 8192, output="dict", read="sequential", cache="none")
    parts: dict[str, list] = {}
    for batch in build_dataset(spec):
        for k, v in batch.items():
            parts.setdefault(k, []).append(v.numpy())
    columns = {k: np.concatenate(v) for k, v in parts.items()}
    rows = [s.records for s in m.shards]
    if m.layout.columnar:
        out = os.path.join(root, "example")
        write_examples(out, columns, m.schema, shard_rows=rows)
        return out, path
    out = os.path.join(root, "columnar")
    write_columnar(out, columns, m.schema, block_rows=block_rows, shard_rows=rows)
    return path, out


def set_bytes(path: str) -> int:
    from converters.shardset.reader import read_manifest

    return read_manifest(path).total_bytes


def _round(example: str, columnar: str, batch: int, first_columnar: bool, max_batches) -> dict:
    from pipeline import PipelineSpec, build_dataset

    from .variants import HAND_TUNED, VARIANTS, throughput

    runs = [("columnar", lambda: build_dataset(PipelineSpec.from_manifest(columnar, batch))),
            ("example_default", lambda: VARIANTS["vectorized"](example, batch))]
    runs += [(n, (lambda n=n: VARIANTS[n](example, batch))) for n in HAND_TUNED]
    if not first_columnar:
        runs = runs[1:] + runs[:1]
    out = {name: throughput(make(), max_batches=max_batches, warmup=1) for name, make in runs}
    if any(r["records"] == 0 for r in out.values()):
        raise ValueError(f"{example}: too few rows to time at batch {batch} (one batch is the warmup)")
    return out


def _decode_pass(columnar: str, checked: bool) -> dict:
    """One timed pass of the columnar set's decode alone: tagged blocks through the checked decode, or the bare
    decode (no checks) of the same batches of blocks; both with TensorFlow's ops (``parse_example`` or ``substr``,
    ``decode_raw``, ``cast``), so that the difference is the checks alone."""
    import tensorflow as tf

    from pipeline import PipelineSpec
    from pipeline.graph.blockcheck import block_decoder, file_tables, tag_file
    from pipeline.graph.columnar import blocks_per_decode, decode_blocks_fn
    from pipeline.plan.readplan import read_plan

    from .variants import throughput

    spec = PipelineSpec.from_manifest(columnar, 1024, cache="none")
    k, calls = blocks_per_decode(spec, read_plan(spec)), tf.data.AUTOTUNE
    if checked:
        tables, paths = file_tables(spec), tf.constant(list(spec.files))
        blocks = tf.data.Dataset.range(len(spec.files)).flat_map(
            lambda f: tag_file(spec, tables, f, tf.data.TFRecordDataset(tf.gather(paths, f)), k))
        ds = blocks.map(block_decoder(spec, tables, kernel=False), num_parallel_calls=calls)
    else:
        ds = tf.data.TFRecordDataset(list(spec.files)).batch(k).map(decode_blocks_fn(spec.schema, spec.layout),
                                                                    num_parallel_calls=calls)
    return throughput(ds.prefetch(calls), warmup=0)   # a small set is one chunk: none left after a warmup


def check_cost(columnar: str, *, rounds: int = 5) -> dict:
    """Paired rounds (the order alternating) of the checked and the unchecked decode of ``columnar``: per round
    checked rows/s over unchecked rows/s, and the same per CPU-second; medians, ranges and the load."""
    ratios, cpu_ratios, loads, checked, bare = [], [], [], [], []
    for r in range(rounds):
        order = (True, False) if r % 2 == 0 else (False, True)
        res = {c: _decode_pass(columnar, c) for c in order}
        checked.append(res[True]["records_per_s"])
        bare.append(res[False]["records_per_s"])
        ratios.append(checked[-1] / bare[-1] if bare[-1] else 0.0)
        cpu_bare = res[False]["records_per_cpu_s"]
        cpu_ratios.append(res[True]["records_per_cpu_s"] / cpu_bare if cpu_bare else 0.0)
        loads.append(os.getloadavg()[0])
    med = statistics.median
    return {"check_ratio": med(ratios), "check_ratio_min": min(ratios), "check_ratio_max": max(ratios),
            "check_cpu_ratio": med(cpu_ratios), "checked_decode_rec_s": med(checked),
            "unchecked_decode_rec_s": med(bare), "check_load_min": min(loads), "check_load_max": max(loads)}


def compare_layouts(example: str, columnar: str, batch: int, *, rounds: int = 5, max_batches: int | None = None,
                    log=None) -> dict:
    """Paired rounds of the columnar default graph against the Example graphs (see the module docstring)."""
    from .variants import HAND_TUNED

    say = log or (lambda s: None)
    ratios, cpu_ratios, col, best, default, col_cpu, best_cpu, loads = [], [], [], [], [], [], [], []
    for r in range(rounds):
        res = _round(example, columnar, batch, r % 2 == 0, max_batches)
        top = max(HAND_TUNED, key=lambda n: res[n]["records_per_s"])
        col.append(res["columnar"]["records_per_s"])
        best.append(res[top]["records_per_s"])
        default.append(res["example_default"]["records_per_s"])
        col_cpu.append(res["columnar"]["records_per_cpu_s"])
        best_cpu.append(max(res[n]["records_per_cpu_s"] for n in HAND_TUNED))
        ratios.append(col[-1] / best[-1])
        cpu_ratios.append(col_cpu[-1] / best_cpu[-1])
        loads.append(os.getloadavg()[0])
        say(f"round {r + 1}: columnar {col[-1]:,.0f} rec/s, best hand-tuned Example ({top}) {best[-1]:,.0f} "
            f"rec/s: {ratios[-1]:.2f}x (load {loads[-1]:.1f})")
    med = statistics.median
    return {"rounds": rounds, "batch_size": batch, "ratio": med(ratios), "ratio_min": min(ratios),
            "ratio_max": max(ratios), "ratios": [round(x, 3) for x in ratios], "cpu_ratio": med(cpu_ratios),
            "columnar_rec_s": med(col), "best_example_rec_s": med(best), "example_default_rec_s": med(default),
            "columnar_rec_per_cpu_s": med(col_cpu), "best_example_rec_per_cpu_s": med(best_cpu),
            "example_bytes": set_bytes(example), "columnar_bytes": set_bytes(columnar),
            "bytes_ratio": set_bytes(columnar) / set_bytes(example), "load_min": min(loads), "load_max": max(loads),
            "cpu_count": os.cpu_count(), **check_cost(columnar, rounds=rounds)}


def hand_shuffle(example: str, batch: int, buffer: int, seed: int):
    """The hand-tuned shuffled Example graph: one sequential reader (8 MiB buffer) → ``shuffle(buffer, seed)`` →
    ``batch`` → one ``parse_example`` per batch (AUTOTUNE calls) → ``prefetch``."""
    import tensorflow as tf

    from .variants import _BUFFER, _manifest, _parse

    spec = _manifest(example)
    ds = tf.data.TFRecordDataset(list(spec.files), spec.compression_type, _BUFFER).shuffle(buffer, seed=seed)
    return ds.batch(batch).map(_parse(spec), num_parallel_calls=tf.data.AUTOTUNE).prefetch(tf.data.AUTOTUNE)


SHUFFLED = ("hand_shuffle", "example_default", "columnar_default")


def _rounds_header(rounds: int, batch: int, buffer: int, seed: int, loads: list[float]) -> dict:
    """What paired rounds of seeded reads report beside their figures: the settings, the load and the cores."""
    return {"rounds": rounds, "batch_size": batch, "shuffle_buffer": buffer, "seed": seed,
            "load_min": min(loads), "load_max": max(loads), "cpu_count": os.cpu_count()}


def compare_shuffled(example: str, columnar: str, batch: int, buffer: int, *, seed: int = 1, rounds: int = 5,
                     log=None) -> dict:
    """Paired rounds (the order reversed every other round) of :data:`SHUFFLED`: per round each default's
    records/s over the hand-tuned ``shuffle(B)`` graph's; medians and ranges, and the load."""
    from pipeline import PipelineSpec, build_dataset

    from .variants import throughput

    def default(path):
        return lambda: build_dataset(PipelineSpec.from_manifest(path, batch, shuffle_buffer=buffer, seed=seed))

    make = {"hand_shuffle": lambda: hand_shuffle(example, batch, buffer, seed), "example_default": default(example),
            "columnar_default": default(columnar)}
    say = log or (lambda s: None)
    rates = {n: [] for n in SHUFFLED}
    loads = []
    for r in range(rounds):
        loads.append(os.getloadavg()[0])
        for n in (SHUFFLED if r % 2 == 0 else SHUFFLED[::-1]):
            rates[n].append(throughput(make[n](), warmup=1)["records_per_s"])
        say(f"round {r + 1}: shuffle_buffer {buffer:,}: Example default "
            f"{rates['example_default'][-1] / rates['hand_shuffle'][-1]:.2f}x, columnar default "
            f"{rates['columnar_default'][-1] / rates['hand_shuffle'][-1]:.2f}x the hand-tuned shuffle(B) graph "
            f"({rates['hand_shuffle'][-1]:,.0f} rec/s; load {loads[-1]:.1f})")
    med = statistics.median
    out = _rounds_header(rounds, batch, buffer, seed, loads)
    for n in SHUFFLED:
        out[f"{n}_rec_s"] = med(rates[n])
    for n in SHUFFLED[1:]:
        ratios = [a / b for a, b in zip(rates[n], rates["hand_shuffle"])]
        out.update({f"{n}_ratio": med(ratios), f"{n}_ratio_min": min(ratios), f"{n}_ratio_max": max(ratios)})
    return out


LIMIT_READS = ("bare_blocks", "bare_block", "columnar_unshuffled", "columnar_shuffled", "example_unshuffled",
               "example_shuffled")


def bare_blocks(columnar: str, per_element: int = 8):
    """The bare block read: ``TFRecordDataset`` of the columnar set's blocks (8 MiB buffer, CRCs checked),
    nothing decoded, ``per_element`` blocks an element (batched when more than one) → ``prefetch``: the floor
    any columnar reader of the set pays. With 8 blocks an element Python steps once per 8 blocks; with one, once
    per block (as often as a read that hands out one batch per block's rows)."""
    import tensorflow as tf

    from .variants import _BUFFER, _manifest

    spec = _manifest(columnar)
    ds = tf.data.TFRecordDataset(list(spec.files), spec.compression_type, _BUFFER)
    return (ds.batch(per_element) if per_element > 1 else ds).prefetch(tf.data.AUTOTUNE)


def compare_limit(example: str, columnar: str, batch: int, buffer: int, *, seed: int = 1, rounds: int = 5,
                  log=None) -> dict:
    """Paired rounds (the order reversed every other round) of :data:`LIMIT_READS`: the bare block read of the
    columnar set (8 blocks an element, and one) beside tfpipe's default graph of both layouts, unshuffled and
    seeded shuffled (``shuffle_buffer=buffer``); per read the median and range of rows/s and of rows per
    CPU-second (this process's CPU time), each read's rows per CPU-second over each bare read's (per round,
    then the median: ``of_bare_cpu`` over 8 blocks an element, ``of_bare1_cpu`` over one), and the load."""
    from converters.shardset.reader import read_manifest
    from pipeline import PipelineSpec, build_dataset

    from .variants import throughput

    m = read_manifest(columnar)
    per_block = m.records / max(1, sum(-(-s.records // m.layout.block_rows) for s in m.shards))

    def default(path, shuffled):
        kw = dict(shuffle_buffer=buffer, seed=seed) if shuffled else {}
        return lambda: build_dataset(PipelineSpec.from_manifest(path, batch, **kw))

    make = {"bare_blocks": lambda: bare_blocks(columnar), "bare_block": lambda: bare_blocks(columnar, 1),
            "columnar_unshuffled": default(columnar, False),
            "columnar_shuffled": default(columnar, True), "example_unshuffled": default(example, False),
            "example_shuffled": default(example, True)}
    say = log or (lambda s: None)
    rates = {n: [] for n in LIMIT_READS}
    cpu = {n: [] for n in LIMIT_READS}
    loads = []
    for r in range(rounds):
        loads.append(os.getloadavg()[0])
        for n in (LIMIT_READS if r % 2 == 0 else LIMIT_READS[::-1]):
            t = throughput(make[n](), warmup=1)
            scale = per_block if n.startswith("bare_") else 1.0    # the bare reads count blocks
            rates[n].append(t["records_per_s"] * scale)
            cpu[n].append(t["records_per_cpu_s"] * scale)
        say(f"round {r + 1}: rows per CPU-second: bare block read {cpu['bare_blocks'][-1]:,.0f} (8 blocks an "
            f"element), {cpu['bare_block'][-1]:,.0f} (one), columnar "
            f"unshuffled {cpu['columnar_unshuffled'][-1]:,.0f}, shuffled {cpu['columnar_shuffled'][-1]:,.0f} "
            f"(load {loads[-1]:.1f})")
    med = statistics.median
    out = _rounds_header(rounds, batch, buffer, seed, loads)
    for n in LIMIT_READS:
        out[n] = {"rows_s": med(rates[n]), "rows_s_min": min(rates[n]), "rows_s_max": max(rates[n]),
                  "rows_per_cpu_s": med(cpu[n]), "rows_per_cpu_s_min": min(cpu[n]),
                  "rows_per_cpu_s_max": max(cpu[n]),
                  "of_bare_cpu": med([a / b if b else 0.0 for a, b in zip(cpu[n], cpu["bare_blocks"])]),
                  "of_bare1_cpu": med([a / b if b else 0.0 for a, b in zip(cpu[n], cpu["bare_block"])])}
    out["shuffled_of_unshuffled_cpu"] = med([a / b if b else 0.0 for a, b in
                                             zip(cpu["columnar_shuffled"], cpu["columnar_unshuffled"])])
    return out


def shuffle_table(root: str, rows: int, buffers, *, seeds=(1, 2, 3), block_rows: int = 256,
                  batch: int = 256) -> list[dict]:
    """Per buffer and layout: the mean displacement and rank correlation of seeded shuffled reads of one-file
    sets of ``rows`` rows whose label is the row index (mean over ``seeds``): the Example set through
    ``shuffle(B)`` (``resumable=False``), the columnar set through its default graph (the resumable order over
    its rows)."""
    from converters.libsvm.options import libsvm_schema
    from pipeline import PipelineSpec, build_dataset

    from .shufflemix import mix, read_order

    idx = np.arange(rows, dtype=np.int64)
    cols = {"label": idx.astype(np.float32), "ids": idx[:, None] + np.arange(3), "values": np.ones((rows, 3), np.float32)}
    ex, col = write_layout_sets(root, cols, libsvm_schema(3), block_rows=block_rows)
    out = []
    for b in buffers:
        row = {"buffer": b, "rows": rows, "block_rows": block_rows}
        for name, path, resumable in (("example", ex, False), ("columnar", col, None)):
            runs = [mix(read_order(build_dataset(PipelineSpec.from_manifest(
                path, batch, shuffle_buffer=b, seed=s, cache="none", resumable=resumable)))) for s in seeds]
            row[f"{name}_displacement"] = float(np.mean([x["mean_displacement"] for x in runs]))
            row[f"{name}_rank_correlation"] = float(np.mean([x["rank_correlation"] for x in runs]))
        row["displacement_ratio"] = row["columnar_displacement"] / row["example_displacement"]
        out.append(row)
    return out
