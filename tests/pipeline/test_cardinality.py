"""pipeline.graph.cardinality: a finite graph reports exactly the batches it yields (assert_cardinality fails the
read if not), in both layouts, under shard(n, i), with drop_remainder, with explicit steps and resumed mid-epoch;
``epoch_steps`` is one epoch's batches; Keras ``fit``/``evaluate`` then run without "Your input ran out of
data" (the same fit over a dataset whose count is hidden warns, so the check can fail), and a streamed read ends
without TensorFlow's GeneratorDataset finalizing noise."""
from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import warnings

import pytest
from columnar_data import indexed_columns, write_columnar_set
from pipeline_data import write_indexed_set
from test_training_fit import _model   # the quick start's model: ids and values in, one output

from pipeline import PipelineSpec, build_dataset, epoch_steps, input_state
from pipeline.graph.cardinality import run_batches
from pipeline.plan.graphplan import plan_graph

N = 1000
B = 64
ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


@pytest.fixture(scope="module")
def sets(tmp_path_factory):
    """The same N rows as an Example set (several small shards) and a columnar set (3 files, short blocks)."""
    d = tmp_path_factory.mktemp("card")
    write_indexed_set(d / "example", N, shard_bytes=8 << 10)
    write_columnar_set(d / "columnar", indexed_columns(N), block_rows=16, shard_rows=300)
    return {"example": str(d / "example"), "columnar": str(d / "columnar")}


def _count(ds) -> int:
    return sum(1 for _ in ds)


CASES = [  # layout, options, batches (N = 1000 rows, batch 64)
    ("example", {}, 16),
    ("example", {"drop_remainder": True}, 15),
    ("example", {"epochs": 3}, 48),
    ("example", {"num_shards": 3, "shard_index": 2}, 6),                 # equal steps: floor(333 / 64) + 1
    ("example", {"num_shards": 3, "shard_index": 0, "drop_remainder": True, "epochs": 2}, 10),
    ("example", {"num_shards": 3, "shard_index": 1, "equal_steps": False}, 6),
    ("example", {"steps": 5, "epochs": 2}, 10),
    ("example", {"steps": 40}, 16),                                      # steps beyond the data: the data's
    ("example", {"shuffle_buffer": 100, "seed": 3, "epochs": 2}, 32),    # the resumable order
    ("example", {"shuffle_buffer": 100, "seed": 3, "resumable": False, "drop_remainder": True}, 15),
    ("example", {"read": "interleave", "num_parallel_reads": 2}, 16),
    ("columnar", {}, 16),
    ("columnar", {"drop_remainder": True, "epochs": 2}, 30),
    ("columnar", {"num_shards": 3, "shard_index": 2}, 6),
    ("columnar", {"num_shards": 2, "shard_index": 1, "drop_remainder": True}, 7),
    ("columnar", {"shuffle_buffer": 100, "seed": 3}, 16),
    ("columnar", {"shuffle_buffer": 100, "seed": 3, "num_shards": 2, "shard_index": 0, "epochs": 2}, 16),
]


@pytest.mark.parametrize("layout, options, batches", CASES)
def test_a_finite_graph_reports_the_batches_it_yields(sets, layout, options, batches):
    spec = PipelineSpec.from_manifest(sets[layout], B, **options)
    ds = build_dataset(spec)
    assert int(ds.cardinality()) == batches == run_batches(plan_graph(spec))
    assert _count(ds) == batches     # assert_cardinality fails the read when the count is wrong
    one = epoch_steps(PipelineSpec.from_manifest(sets[layout], B, **{**options, "epochs": None}))
    assert one == batches // options.get("epochs", 1)


@pytest.mark.parametrize("layout", ["example", "columnar"])
@pytest.mark.parametrize("ranks, drop, done", [((1, 0), False, 3), ((1, 0), True, 20), ((2, 1), False, 3),
                                               ((2, 1), True, 9)])
def test_a_resumed_read_reports_the_batches_left(sets, layout, ranks, drop, done):
    spec = PipelineSpec.from_manifest(sets[layout], B, shuffle_buffer=100, seed=3, epochs=2, drop_remainder=drop,
                                      num_shards=ranks[0], shard_index=ranks[1], resumable=True)
    whole = _count(build_dataset(spec))
    ds = build_dataset(spec, resume=input_state(spec, done))
    assert int(ds.cardinality()) == whole - done == _count(ds)


@pytest.mark.parametrize("options", [{"epochs": None},
                                     {"mode": "pipe", "channel": "train", "pipe_dir": "/nonexistent"}])
def test_no_count_where_none_is_known(sets, options):
    """Endless specs, and Pipe mode (a FIFO holds what the channel streams): no count is claimed."""
    spec = PipelineSpec.from_manifest(sets["example"], B, **options)
    assert run_batches(plan_graph(spec)) is None
    if options.get("mode") == "pipe":
        assert epoch_steps(spec) is None


def _ran_out(caught) -> int:
    return sum("ran out of data" in str(w.message) for w in caught)


@pytest.mark.parametrize("layout", ["example", "columnar"])
def test_keras_sees_a_finite_epoch(sets, layout):
    spec = PipelineSpec.from_manifest(sets[layout], B, num_shards=2, shard_index=1, drop_remainder=True)
    model = _model()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        history = model.fit(build_dataset(spec), epochs=2, verbose=0, shuffle=False)
        model.evaluate(build_dataset(spec), verbose=0)
    assert _ran_out(caught) == 0 and len(history.history["loss"]) == 2
    with warnings.catch_warnings(record=True) as caught:   # the control: the count hidden, Keras warns
        warnings.simplefilter("always")
        model.fit(build_dataset(spec).filter(lambda *_: True), epochs=2, verbose=0, shuffle=False)
    assert _ran_out(caught) >= 1


def test_a_streamed_read_ends_quietly(s3, tmp_path, sets):
    """A set streamed from S3 (moto), fit and evaluated by Keras in a fresh process: stderr holds neither
    Keras's "ran out of data" nor TensorFlow's FAILED_PRECONDITION finalizing a GeneratorDataset iterator."""
    from converters.cli import main

    for layout in ("example", "columnar"):
        assert main(["upload", sets[layout], f"{s3.url}/{layout}"]) == 0
    child = textwrap.dedent(f"""
        import sys
        sys.path[:0] = [{ROOT!r}, {os.path.join(ROOT, "tests")!r}, {os.path.dirname(os.path.abspath(__file__))!r}]
        from test_training_fit import _model
        from pipeline import PipelineSpec, build_dataset
        for layout in ("example", "columnar"):
            spec = PipelineSpec.from_manifest("{s3.url}/" + layout, {B}, stream_cache_dir="cache-" + layout)
            model = _model()
            model.fit(build_dataset(spec), epochs=1, verbose=2, shuffle=False)
            model.evaluate(build_dataset(spec), verbose=2)
    """)
    r = subprocess.run([sys.executable, "-c", child], cwd=str(tmp_path), capture_output=True, text=True,
                       timeout=300, env={**os.environ, "TF_CPP_MIN_LOG_LEVEL": "0"})
    assert r.returncode == 0, r.stderr[-3000:]
    assert r.stdout.count("16/16 - ") == 4      # Keras's progress knew every epoch's steps (fit, evaluate)
    for noise in ("ran out of data", "FAILED_PRECONDITION", "GeneratorDataset iterator"):
        assert noise not in r.stderr, r.stderr[-3000:]
