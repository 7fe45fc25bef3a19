"""``tfpipe quickstart``: generate a small Criteo-like LibSVM sample, convert it, read it back with
TensorFlow and verify it: the main job end to end on a fresh machine."""
from __future__ import annotations

import os
import time

from .types import positive_int

__all__ = ["register", "QUICKSTART_MARKER"]

QUICKSTART_MARKER = ".tfpipe-quickstart"  # marks a directory quickstart created (it may replace it)


def register(top_sub) -> None:
    q = top_sub.add_parser(
        "quickstart", help="generate a small Criteo-like LibSVM sample, convert it, read it back with TensorFlow",
        description="End-to-end demo: writes a Criteo-like LibSVM sample, converts it to TFRecord shards, reads "
                    "every record back through tf.data + tf.io.parse_example, verifies the shards and "
                    "prints where everything is.")
    q.add_argument("--out", default="quickstart-out", help="directory for the sample and the shards "
                                                           "(default ./quickstart-out)")
    q.add_argument("--lines", type=positive_int, default=20_000, metavar="N", help="sample lines (default 20000)")
    q.add_argument("--overwrite", action="store_true",
                   help="replace a non-empty --out that quickstart did not create")
    q.add_argument("--no-progress", action="store_true", help="no progress bar")
    q.set_defaults(func=_cmd_quickstart)


def _cmd_quickstart(args) -> int:
    from ..libsvm.convert import convert_libsvm
    from ..libsvm.synthetic import write_criteo_libsvm
    from ..shardset.verify import verify
    from ..util.jit import compile_seconds
    from ..util.units import format_size

    import sys

    progress = not args.no_progress and sys.stderr.isatty()
    out = os.path.abspath(args.out)
    _clear_own(out, args.overwrite)
    os.makedirs(out, exist_ok=True)
    with open(os.path.join(out, QUICKSTART_MARKER), "w") as f:
        f.write("created by tfpipe quickstart; it may replace its own files here\n")
    sample = os.path.join(out, "criteo-sample.libsvm")
    shards = os.path.join(out, "shards")
    n = args.lines

    t0 = time.perf_counter()
    nbytes = write_criteo_libsvm(sample, n, field_size=39, seed=0)
    print(f"1. wrote a Criteo-like LibSVM sample: {n:,} lines, 39 fields, {format_size(nbytes)}\n   {sample}",
          flush=True)  # (shown before the parser's first compile, also when stdout is a pipe)

    t1, c1 = time.perf_counter(), compile_seconds()
    m = convert_libsvm([sample], shards, field_size=39, shard_size=max(64 << 10, nbytes // 3),
                       overwrite=True, progress=progress)
    t2, compiling = time.perf_counter(), compile_seconds() - c1
    print(f"2. converted it to {len(m.shards)} TFRecord shard(s), {m.records:,} tf.train.Example records, "
          f"{format_size(m.total_bytes)} in {_took(t2 - t1, compiling)}\n   {shards}/ (manifest: index.json)")

    checked = _read_back_with_tensorflow(m, n)
    print(f"3. read all {checked:,} records back through tf.data.TFRecordDataset + tf.io.parse_example: "
          "labels, ids and values equal the generated data")

    report = verify(shards, progress=progress, raise_on_error=True)
    print(f"4. verified {report.shards} shard(s): CRCs, record counts, sizes and sha256 match the manifest")
    print(f"done in {time.perf_counter() - t0:.1f}s. Next:\n"
          f"   tfpipe inspect {shards}\n"
          f"   tfpipe convert libsvm YOUR.libsvm --out DIR --field-size 39\n"
          f"   tfpipe convert tabular day_0 day_1 --out DIR     (raw Criteo click logs -> DeepFM/DLRM training "
          f"sets with their vocabularies)\n"
          f"   parse with: tf.io.parse_example(batch, {{'label': FixedLenFeature([], tf.float32), "
          f"'ids': FixedLenFeature([39], tf.int64), 'values': FixedLenFeature([39], tf.float32)}})")
    return 0


def _took(seconds: float, compiling: float) -> str:
    """The conversion's time without the parser's one-time compile, which is named beside it when it ran."""
    if compiling < 0.05:
        return f"{seconds:.2f}s"
    return (f"{max(0.0, seconds - compiling):.2f}s (+ {compiling:.1f}s compiling the parser, first run on this "
            "machine only)")


_OWN = (QUICKSTART_MARKER, "criteo-sample.libsvm", "shards")


def _clear_own(out: str, overwrite: bool) -> None:
    """Remove quickstart's own previous sample and marker (the shard set in ``shards/`` is replaced by the
    converter, which deletes only what its manifest lists). Anything else in ``out`` is left alone, and
    makes quickstart refuse: it never deletes what it did not write."""
    from ..util.errors import OutputExistsError, TfpipeError

    if not os.path.exists(out):
        return
    if not os.path.isdir(out):
        raise TfpipeError(f"{out} exists and is not a directory")
    names = os.listdir(out)
    if not names:
        return
    if QUICKSTART_MARKER not in names and not overwrite:
        raise OutputExistsError(f"{out} is not empty and was not made by quickstart: pass --overwrite or choose "
                                "another --out")
    foreign = sorted(set(names) - set(_OWN))
    if foreign:
        raise OutputExistsError(f"{out} holds files quickstart did not write ({', '.join(foreign[:5])}"
                                f"{', ...' if len(foreign) > 5 else ''}); refusing to delete them: choose another "
                                "--out")
    for name in _OWN[:2]:
        path = os.path.join(out, name)
        if os.path.lexists(path) and not os.path.isdir(path):
            os.unlink(path)


def _read_back_with_tensorflow(m, n: int) -> int:
    import numpy as np

    from ..libsvm.synthetic import criteo_arrays
    from ..util.errors import IntegrityError

    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    import tensorflow as tf

    feats = {
        "label": tf.io.FixedLenFeature([], tf.float32),
        "ids": tf.io.FixedLenFeature([39], tf.int64),
        "values": tf.io.FixedLenFeature([39], tf.float32),
    }
    ds = (tf.data.TFRecordDataset(m.shard_paths()).batch(1024)
          .map(lambda x: tf.io.parse_example(x, feats)).prefetch(2))
    got = {k: [] for k in feats}
    for batch in ds:
        for k in feats:
            got[k].append(batch[k].numpy())
    got = {k: np.concatenate(v) for k, v in got.items()}
    # the generator writes its text in blocks of 50,000 lines, each seeded by its start
    want = {k: [] for k in feats}
    for start in range(0, n, 50_000):
        a = criteo_arrays(min(50_000, n - start), field_size=39, seed=start)
        a["ids"] = a["ids"] + 1  # the text holds one-based ids; fixed-width ids are kept as written
        for k in feats:
            want[k].append(a[k])
    want = {k: np.concatenate(v) for k, v in want.items()}
    for k in feats:
        if got[k].shape != want[k].shape or not np.array_equal(got[k], want[k]):
            raise IntegrityError(f"quickstart read-back mismatch in feature {k!r}")
    return int(got["label"].shape[0])
