"""lint: each rule fires on a bad graph, and build_dataset's graphs produce no findings."""
from __future__ import annotations

import pytest
from pipeline_data import write_indexed_set

from pipeline import PipelineSpec, build_dataset, lint
from pipeline.build import feature_spec, parse_fn
from pipeline.lint import RULES, dataset_chain


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    d = tmp_path_factory.mktemp("indexed")
    write_indexed_set(d, 300)
    return str(d)


@pytest.fixture(scope="module")
def parts(data):
    import tensorflow as tf

    spec = PipelineSpec.from_manifest(data, 32)
    fs = feature_spec(spec.schema)
    return SimpleParts(tf, list(spec.files), lambda x: tf.io.parse_single_example(x, fs), parse_fn(spec.schema))


class SimpleParts:
    def __init__(self, tf, files, parse_one, parse_batch):
        self.tf, self.files, self.parse_one, self.parse_batch = tf, files, parse_one, parse_batch

    def src(self):
        return self.tf.data.TFRecordDataset(self.files)


AT = -1  # tf.data.AUTOTUNE

BAD = {
    "map-before-batch": lambda p: p.src().map(p.parse_one, num_parallel_calls=AT).batch(8).prefetch(AT),
    "cache-after-shuffle": lambda p: p.src().shuffle(10).cache().batch(8).map(p.parse_batch).prefetch(AT),
    "repeat-before-cache": lambda p: p.src().repeat(2).cache().batch(8).map(p.parse_batch).prefetch(AT),
    "no-prefetch": lambda p: p.src().batch(8).map(p.parse_batch),
    "shard-after-shuffle": lambda p: p.src().shuffle(10).shard(2, 0).batch(8).map(p.parse_batch).prefetch(AT),
}


@pytest.mark.parametrize("rule", RULES)
def test_rule_fires_on_bad_graph(parts, rule):
    findings = lint(BAD[rule](parts))
    assert [f.rule for f in findings] == [rule]
    assert findings[0].message and findings[0].op


def test_map_and_batch_with_parse(parts):
    tf = parts.tf
    ds = parts.src().apply(tf.data.experimental.map_and_batch(parts.parse_one, 8)).prefetch(AT)
    assert "map-before-batch" in [f.rule for f in lint(ds)]


def test_naive_graph_has_two_findings(parts):
    ds = parts.src().map(parts.parse_one).batch(8)
    assert sorted(f.rule for f in lint(ds)) == ["map-before-batch", "no-prefetch"]


def test_vectorized_map_after_batch_is_fine(parts):
    assert lint(parts.src().batch(8).map(parts.parse_batch, num_parallel_calls=AT).prefetch(AT)) == []


def test_vector_parse_before_rebatch_is_fine(parts):
    ds = parts.src().batch(100).map(parts.parse_batch, num_parallel_calls=AT).rebatch(8).prefetch(AT)
    assert lint(ds) == []


def test_options_after_prefetch_still_counts(parts):
    tf = parts.tf
    opts = tf.data.Options()
    opts.threading.private_threadpool_size = 2
    ds = parts.src().batch(8).map(parts.parse_batch).prefetch(AT).with_options(opts)
    assert lint(ds) == []


@pytest.mark.parametrize("kw", [
    {},
    {"read": "sequential"},
    {"read": "parallel_reads"},
    {"shuffle_buffer": 50, "seed": 1, "resumable": False},
    {"shuffle_buffer": 50, "seed": 1, "epochs": 3, "resumable": False},        # memory cache, shuffle, repeat
    {"shuffle_buffer": 50, "seed": 1, "epochs": None, "cache": "none", "resumable": False},  # file-order shuffle
    {"shuffle_buffer": 50, "seed": 1, "epochs": 2},                   # the resumable order (the seeded default)
    {"num_shards": 3, "shard_index": 2, "shuffle_buffer": 50, "epochs": 2},
    {"drop_remainder": True, "output": "dict"},
])
def test_default_graphs_have_no_findings(data, kw):
    assert lint(build_dataset(PipelineSpec.from_manifest(data, 32, **kw))) == []


def test_pipe_mode_graph_has_no_findings(data, tmp_path):
    spec = PipelineSpec.from_manifest(data, 32, mode="pipe", channel="train", pipe_dir=str(tmp_path), epochs=2,
                                      shuffle_buffer=10, num_shards=2)
    assert lint(build_dataset(spec)) == []          # graph inspected, never iterated: no FIFO needed


def test_chain_is_source_first(data):
    ops = [op for _, op, _, _ in dataset_chain(build_dataset(PipelineSpec.from_manifest(data, 32, read="sequential")))]
    assert ops[-1] == "PrefetchDataset" and ops.index("BatchDatasetV2") < ops.index("ParallelMapDatasetV2")


_SCRIPT = '''
import tensorflow as tf

STEP = 3


def helper(x):
    for _ in tf.range(2):
        x = x + STEP
    return x


def make():
    return tf.data.Dataset.range(10).map(lambda x: helper(x) + 1).batch(4).prefetch(-1)
'''


def test_cli_lint_of_a_script_is_quiet(tmp_path):
    """A lambda in the target script is converted by AutoGraph (its module is importable), so no "AutoGraph could
    not transform ... Please report this to the TensorFlow team" warning and no traceback."""
    import os
    import subprocess
    import sys

    (tmp_path / "target.py").write_text(_SCRIPT)
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    env = {**os.environ, "PYTHONPATH": root + os.pathsep + os.environ.get("PYTHONPATH", "")}
    r = subprocess.run([sys.executable, "-m", "converters.cli", "pipeline", "lint", f"{tmp_path}/target.py:make"],
                       capture_output=True, text=True, timeout=300, env=env, cwd=tmp_path)
    assert (r.returncode, r.stdout.strip()) == (0, "no findings"), r.stderr[-3000:]
    assert "Please report this" not in r.stderr and "AutoGraph" not in r.stderr and "Traceback" not in r.stderr


def test_load_target_registers_a_module_of_its_own(tmp_path):
    import sys

    from pipeline.lint import load_target

    (tmp_path / "a.py").write_text("def make():\n    return 1\n")
    fn = load_target(f"{tmp_path}/a.py:make")
    assert fn() == 1 and sys.modules[fn.__module__].__file__ == str(tmp_path / "a.py")
    assert fn.__module__.startswith("_tfpipe_lint_")
