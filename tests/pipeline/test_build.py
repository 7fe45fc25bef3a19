"""build_dataset: every record exactly once per epoch (File mode), strategies, cache policy, determinism,
sharding hooks, and the README's Keras / tf.distribute examples."""
from __future__ import annotations

from collections import Counter
from types import SimpleNamespace

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from pipeline_data import batches_of, labels_of, write_indexed_set

from converters.util.errors import TfpipeError
from pipeline import PipelineSpec, build_dataset, describe
from pipeline.build import choose_cache, choose_read, plan_stages

tf = pytest.importorskip("tensorflow")  # imported first: TF raises the recursion limit on import

N = 1000
B = 64


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    d = tmp_path_factory.mktemp("indexed")
    write_indexed_set(d, N)
    return str(d)


@pytest.fixture(scope="module")
def gz_data(tmp_path_factory):
    d = tmp_path_factory.mktemp("indexed_gz")
    write_indexed_set(d, N, compression="gzip")
    return str(d)


@pytest.mark.parametrize("ranks", [1, 2, 3])
@pytest.mark.parametrize("shuffle", [0, 100])
@pytest.mark.parametrize("read", ["auto", "sequential", "parallel_reads"])
def test_every_record_exactly_once_per_rank_set(data, ranks, shuffle, read):
    seen = Counter()
    for i in range(ranks):
        spec = PipelineSpec.from_manifest(data, B, shuffle_buffer=shuffle, seed=7, num_shards=ranks,
                                          shard_index=i, equal_steps=False, read=read, resumable=False)
        seen.update(labels_of(build_dataset(spec)))
    assert sorted(seen) == list(range(N))
    assert max(seen.values()) == 1


def test_interleave_strategy_exactly_once_and_uniform_batches(data):
    spec = PipelineSpec.from_manifest(data, B)
    assert choose_read(spec)[0] == "interleave"
    batches = batches_of(build_dataset(spec))
    assert [len(b) for b in batches[:-1]] == [B] * (len(batches) - 1)
    assert sorted(x for b in batches for x in b) == list(range(N))


def test_interleave_refuses_record_shard(data):
    spec = PipelineSpec.from_manifest(data, B, read="interleave", num_shards=2, shard_index=0)
    with pytest.raises(TfpipeError, match="interleave"):
        build_dataset(spec)


def test_gzip_from_manifest(gz_data):
    spec = PipelineSpec.from_manifest(gz_data, B)
    assert spec.compression == "gzip"
    assert sorted(labels_of(build_dataset(spec))) == list(range(N))


@pytest.mark.parametrize("ranks", [2, 3, 7])
def test_equal_steps_per_rank(data, ranks):
    counts, steps = [], []
    seen = Counter()
    for i in range(ranks):
        spec = PipelineSpec.from_manifest(data, B, num_shards=ranks, shard_index=i, shuffle_buffer=50, seed=1)
        batches = batches_of(build_dataset(spec))
        steps.append(len(batches))
        counts.append(sum(len(b) for b in batches))
        seen.update(x for b in batches for x in b)
    assert len(set(steps)) == 1 and steps[0] == spec.take_steps
    assert max(seen.values()) == 1                         # no duplicates
    smallest = N // ranks
    assert N - sum(counts) <= ranks * (smallest % B or B)  # only remainders dropped


def test_drop_remainder(data):
    spec = PipelineSpec.from_manifest(data, B, drop_remainder=True)
    batches = batches_of(build_dataset(spec))
    assert all(len(b) == B for b in batches) and len(batches) == N // B


@pytest.mark.parametrize("resumable", [None, False])   # the resumable order (the default here) and shuffle(B)
def test_seeded_shuffle_is_deterministic_and_reshuffles_per_epoch(data, resumable):
    spec = PipelineSpec.from_manifest(data, B, shuffle_buffer=200, seed=3, epochs=2, resumable=resumable)
    a, b = labels_of(build_dataset(spec)), labels_of(build_dataset(spec))
    assert a == b
    assert sorted(a[:N]) == list(range(N)) and sorted(a[N:]) == list(range(N))
    assert a[:N] != a[N:]
    other = labels_of(build_dataset(spec.with_(seed=4)))
    assert other != a


def test_no_shuffle_keeps_manifest_order(data):
    spec = PipelineSpec.from_manifest(data, B, read="sequential")
    assert labels_of(build_dataset(spec)) == list(range(N))


@pytest.mark.parametrize("output", ["keras", "dict"])
def test_output_structure(data, output):
    spec = PipelineSpec.from_manifest(data, B, output=output)
    first = next(iter(build_dataset(spec)))
    if output == "keras":
        features, label = first
        assert sorted(features) == ["ids", "values"]
        assert label.dtype.name == "float32" and features["ids"].shape == (B, 3)
        np.testing.assert_array_equal(features["ids"].numpy()[:, 0], label.numpy().astype(np.int64))
    else:
        assert sorted(first) == ["ids", "label", "values"]


def test_parse_off_yields_serialized(data):
    spec = PipelineSpec.from_manifest(data, B, parse=False, prefetch=0)
    first = next(iter(build_dataset(spec)))
    assert first.dtype.name == "string" and first.shape == (B,)


@pytest.mark.parametrize("kw,policy", [
    ({"epochs": 1}, "none"),
    ({"epochs": 2}, "memory"),
    ({"epochs": None}, "memory"),
    ({"epochs": 2, "memory_bytes": 1000}, "none"),          # dataset far above 25% of this "RAM"
    ({"epochs": 2, "cache": "none"}, "none"),
    ({"epochs": 1, "cache": "memory"}, "memory"),
    ({"epochs": 2, "cache": "file:/tmp/x"}, "file"),
])
def test_cache_policy(data, kw, policy):
    spec = PipelineSpec.from_manifest(data, B, **kw)
    assert choose_cache(spec)[0] == policy


def test_file_cache_is_per_rank_when_sharded(data):
    paths = {choose_cache(PipelineSpec.from_manifest(data, B, cache="file:/tmp/c", num_shards=3, shard_index=i))[1]
             for i in range(3)}
    assert paths == {"/tmp/c.0-of-3", "/tmp/c.1-of-3", "/tmp/c.2-of-3"}


def test_cache_reason_mentions_ram(data):
    spec = PipelineSpec.from_manifest(data, B, epochs=2)
    why = choose_cache(spec)[2]
    assert "< 25% of RAM" in why


def test_file_cache_two_epochs(data, tmp_path):
    path = str(tmp_path / "cache")
    spec = PipelineSpec.from_manifest(data, B, epochs=2, cache=f"file:{path}", shuffle_buffer=100, seed=0)
    got = labels_of(build_dataset(spec))
    assert sorted(got) == sorted(list(range(N)) * 2)
    assert any(p.name.startswith("cache") for p in tmp_path.iterdir())


def test_memory_cache_two_epochs(data):
    spec = PipelineSpec.from_manifest(data, B, epochs=2, cache="memory")
    assert sorted(labels_of(build_dataset(spec))) == sorted(list(range(N)) * 2)


@pytest.mark.parametrize("files,cores,shuffle,shards,rb,want", [
    (1, 8, 0, 1, 300, "sequential"),
    (8, 1, 0, 1, 300, "sequential"),
    (8, 2, 0, 1, 300, "interleave"),
    (8, 2, 100, 1, 300, "sequential"),
    (8, 2, 0, 2, 300, "sequential"),
    (8, 2, 100, 1, 16384, "parallel_reads"),
    (8, 2, 0, 1, 16384, "parallel_reads"),
])
def test_choose_read_table(files, cores, shuffle, shards, rb, want):
    from converters.libsvm.options import libsvm_schema

    spec = PipelineSpec(schema=libsvm_schema(3), batch_size=B, files=tuple(f"f{i}" for i in range(files)),
                        cores=cores, shuffle_buffer=shuffle, num_shards=shards, records=1000,
                        total_bytes=1000 * rb)
    assert choose_read(spec)[0] == want


def test_plan_per_rank_files(data):
    from converters.shardset.reader import read_manifest

    names = [s.name for s in read_manifest(data).shards]
    seen = Counter()
    for r in range(2):
        entry = SimpleNamespace(rank=r, host="algo-1", local_rank=r, channel=None, files=tuple(names[r::2]),
                                shard=None, steps=None)
        spec = PipelineSpec.from_manifest(data, B, plan=entry)
        seen.update(labels_of(build_dataset(spec)))
    assert sorted(seen) == list(range(N)) and max(seen.values()) == 1


def test_plan_steps_take(data):
    plan = SimpleNamespace(ranks=[SimpleNamespace(rank=r, host="h", local_rank=r, channel=None, files=None,
                                                  shard=(2, r), steps=3) for r in range(2)])
    spec = PipelineSpec.from_manifest(data, B, plan=plan, rank=1)
    assert (spec.num_shards, spec.shard_index, spec.take_steps) == (2, 1, 3)
    assert len(batches_of(build_dataset(spec))) == 3


def test_stages_in_proven_order(data):
    spec = PipelineSpec.from_manifest(data, B, epochs=2, shuffle_buffer=10, num_shards=2, shard_index=0)
    names = [s.name for s in plan_stages(spec)]
    assert names == ["source", "shard", "cache", "shuffle", "batch", "take", "parse", "repeat", "prefetch"]


# -- README examples ---------------------------------------------------------------------------------

def test_readme_keras_fit(data):
    import tensorflow as tf

    from pipeline import PipelineSpec, build_dataset

    spec = PipelineSpec.from_manifest(data, batch_size=64, shuffle_buffer=1000, seed=42, epochs=None)
    train = build_dataset(spec)                          # (features, label) batches, forever

    ids = tf.keras.Input(shape=(3,), dtype=tf.int64, name="ids")
    values = tf.keras.Input(shape=(3,), dtype=tf.float32, name="values")
    emb = tf.keras.layers.Embedding(input_dim=N + 3, output_dim=4)(ids)
    weights = tf.keras.layers.Reshape((3, 1))(values)
    x = tf.keras.layers.Flatten()(tf.keras.layers.Multiply()([emb, weights]))
    out = tf.keras.layers.Dense(1)(x)
    model = tf.keras.Model({"ids": ids, "values": values}, out)
    model.compile(optimizer="adam", loss="mse")
    history = model.fit(train, epochs=2, steps_per_epoch=5, verbose=0, shuffle=False)
    assert len(history.history["loss"]) == 2


def test_readme_distribute_datasets_from_function(data):
    import tensorflow as tf

    from pipeline import distributed_dataset_fn

    strategy = tf.distribute.MirroredStrategy(["/cpu:0"])
    dataset_fn = distributed_dataset_fn(data, global_batch_size=64)
    dist = strategy.distribute_datasets_from_function(dataset_fn)
    n = 0
    for features, label in dist:
        n += int(strategy.experimental_local_results(label)[0].shape[0])
    assert n == N

    # what each input pipeline gets: shard(num_input_pipelines, input_pipeline_id), equal steps
    ctx = tf.distribute.InputContext(num_input_pipelines=2, input_pipeline_id=1, num_replicas_in_sync=2)
    per_pipeline = labels_of(dataset_fn(ctx))
    assert per_pipeline and all(x % 2 == 1 for x in per_pipeline)


def test_nondeterministic_option_still_exactly_once(data):
    spec = PipelineSpec.from_manifest(data, B, deterministic=False)
    assert sorted(labels_of(build_dataset(spec))) == list(range(N))


@settings(max_examples=8, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(n=st.integers(1, 400), shard_kib=st.integers(1, 8), ranks=st.integers(1, 4), batch=st.integers(1, 50),
       shuffle=st.sampled_from([0, 7]), drop=st.booleans())
def test_property_ranks_partition_the_set(tmp_path_factory, n, shard_kib, ranks, batch, shuffle, drop):
    d = tmp_path_factory.mktemp("prop")
    write_indexed_set(d, n, shard_bytes=shard_kib << 10)
    seen = Counter()
    steps = set()
    for i in range(ranks):
        spec = PipelineSpec.from_manifest(str(d), batch, num_shards=ranks, shard_index=i, shuffle_buffer=shuffle,
                                          seed=1, drop_remainder=drop)
        batches = batches_of(build_dataset(spec))
        steps.add(len(batches))
        seen.update(x for b in batches for x in b)
        if drop:
            assert all(len(b) == batch for b in batches)
    assert len(steps) == 1                                   # equal steps on every rank
    assert max(seen.values(), default=1) == 1                # never a duplicate
    assert set(seen) <= set(range(n))
    if ranks == 1 and not drop:
        assert len(seen) == n                                # nothing lost


# -- variable-length features (a sparse LibSVM set) --------------------------------------------------------------

SPARSE_N = 600


@pytest.fixture(scope="module")
def sparse_set(tmp_path_factory):
    """A sparse set whose label is the row number: rows of 0-9 pairs, qid = row // 5, several shards."""
    from converters.libsvm.convert import convert_libsvm

    d = tmp_path_factory.mktemp("sparse")
    rng = np.random.default_rng(5)
    want = {}
    lines = []
    for i in range(SPARSE_N):
        ids = np.sort(rng.choice(50, size=int(rng.integers(0, 10)), replace=False))
        vals = rng.integers(-9, 9, ids.size).astype(float)
        want[i] = (ids.tolist(), vals.tolist())
        lines.append(" ".join([str(i), f"qid:{i // 5}"] + [f"{j + 1}:{v:g}" for j, v in zip(ids, vals)]))
    (d / "in.txt").write_text("\n".join(lines) + "\n")
    m = convert_libsvm(d / "in.txt", d / "set", sparse=True, keep_qid=True, shard_size=4 << 10, workers=1)
    assert len(m.shards) > 2
    return str(d / "set"), want, m.extra["num_features"]


def _sparse_rows(dataset, num_features):
    """label -> (ids, values) from (features, label) batches of SparseTensors, checking their shape."""
    got = {}
    for feats, label in dataset:
        sp, n = feats["values"], int(label.shape[0])
        assert isinstance(sp, tf.SparseTensor) and sp.dense_shape.numpy().tolist() == [n, num_features]
        assert (feats["ids"].values.numpy() == sp.indices[:, 1].numpy()).all()
        assert (feats["qid"].numpy() == label.numpy().astype(int) // 5).all()
        for r in range(n):
            keep = sp.indices[:, 0].numpy() == r
            got[int(label[r])] = (sp.indices[:, 1].numpy()[keep].tolist(), sp.values.numpy()[keep].tolist())
    return got


@pytest.mark.parametrize("kw", [{}, {"read": "sequential"}, {"read": "parallel_reads"},
                                {"shuffle_buffer": 50, "seed": 1}, {"num_shards": 2, "shard_index": 1,
                                                                    "read": "sequential"}])
def test_sparse_set_parses_to_one_sparse_matrix_per_batch(sparse_set, kw):
    path, want, nf = sparse_set
    spec = PipelineSpec.from_manifest(path, 32, cores=2, **kw)
    assert spec.sparse_features == ("ids", "values") and spec.num_features == nf == 50
    got = _sparse_rows(build_dataset(spec), nf)
    rows = range(SPARSE_N) if "num_shards" not in kw else range(1, SPARSE_N, 2)
    assert got == {i: want[i] for i in rows}


def test_sparse_matrix_feeds_sparse_dense_matmul_and_embedding_lookup(sparse_set):
    path, want, nf = sparse_set
    feats, label = next(iter(build_dataset(PipelineSpec.from_manifest(path, 16, read="sequential"))))
    w = tf.reshape(tf.range(nf, dtype=tf.float32), [nf, 1])
    dense = tf.sparse.sparse_dense_matmul(feats["values"], w).numpy().ravel()
    emb = tf.nn.embedding_lookup_sparse(w, feats["ids"], feats["values"], combiner="sum").numpy().ravel()
    expect = [sum(j * v for j, v in zip(*want[i])) for i in range(16)]
    assert dense.tolist() == expect
    assert all(emb[i] == expect[i] for i in range(len(emb)))  # rows without a pair are left out


def test_sparse_as_ragged(sparse_set):
    path, want, _ = sparse_set
    spec = PipelineSpec.from_manifest(path, 64, sparse_as="ragged", output="dict", read="sequential")
    assert "as tf.RaggedTensor [batch, None] (sparse_as='ragged')" in describe(spec)
    got = {}
    for b in build_dataset(spec):
        assert isinstance(b["ids"], tf.RaggedTensor) and isinstance(b["values"], tf.RaggedTensor)
        for i, ids, vals in zip(b["label"].numpy(), b["ids"].to_list(), b["values"].to_list()):
            got[int(i)] = (ids, vals)
    assert got == want


def test_multilabel_label_is_variable_length(tmp_path):
    from converters.libsvm.convert import convert_libsvm

    (tmp_path / "in.txt").write_bytes(b"3,1 1:1\n 2:1\n2 3:1\n")
    convert_libsvm(tmp_path / "in.txt", tmp_path / "o", sparse=True, multilabel=True)
    feats, label = next(iter(build_dataset(PipelineSpec.from_manifest(tmp_path / "o", 8))))
    assert isinstance(label, tf.SparseTensor)
    assert tf.sparse.to_dense(label, default_value=-1.0).numpy().tolist() == [[1, 3], [-1, -1], [2, -1]]
    d = next(iter(build_dataset(PipelineSpec.from_manifest(tmp_path / "o", 8, sparse_as="ragged", output="dict"))))
    assert d["label"].to_list() == [[1.0, 3.0], [], [2.0]]


def test_keras_fit_and_distribute_on_a_sparse_set(sparse_set):
    import keras

    from pipeline import distributed_dataset_fn, keras_dataset

    path, _, nf = sparse_set
    values = keras.Input(shape=(nf,), sparse=True, name="values")
    model = keras.Model({"values": values}, keras.layers.Dense(1)(values))
    model.compile(optimizer="sgd", loss="mse")
    train = keras_dataset(path, 64, epochs=None).map(lambda f, y: ({"values": f["values"]}, y))
    assert len(model.fit(train, epochs=2, steps_per_epoch=3, verbose=0, shuffle=False).history["loss"]) == 2

    strategy = tf.distribute.MirroredStrategy(["/cpu:0"])
    dist = strategy.distribute_datasets_from_function(distributed_dataset_fn(path, global_batch_size=64))
    n = 0
    for feats, label in dist:
        n += int(strategy.experimental_local_results(label)[0].shape[0])
    assert n == SPARSE_N


def test_sparse_set_in_pipe_mode(sparse_set, tmp_path):
    from converters.shardset.reader import read_manifest
    from pipeline.graph.pipesource import simulate_channel

    path, want, nf = sparse_set
    writer = simulate_channel(str(tmp_path), "train", read_manifest(path).shard_paths(), epochs=1)
    spec = PipelineSpec.from_manifest(path, 32, mode="pipe", channel="train", pipe_dir=str(tmp_path),
                                      pipe_timeout=20)
    assert _sparse_rows(build_dataset(spec), nf) == want
    writer.join(10)
    assert writer.error is None


_NOTICE = "which is overridden by the user specified `buffer_size`"


def test_read_buffer_notice_is_not_printed_by_tfpipe(data):
    """With TensorFlow's INFO logs on (a Python user's default), a TFRecordDataset with tfpipe's 8 MiB buffer
    makes TensorFlow print its one-time buffer notice on file descriptor 2; in a real process, tfpipe's
    build_dataset lets TensorFlow print it into tfpipe's capture of that descriptor (the control: TensorFlow
    printed the notice, in this very process) and the process's stderr never shows it; the data still
    arrive."""
    import os
    import subprocess
    import sys
    import textwrap

    code = """
        import pipeline.graph.buffernotice as notice
        captured = []
        read_captured = notice._read_with_fd2_captured

        def spy(fn):
            captured.append(read_captured(fn))
            return captured[-1]

        notice._read_with_fd2_captured = spy
        from pipeline import PipelineSpec, build_dataset
        n = sum(int(b[1].shape[0]) for b in build_dataset(PipelineSpec.from_manifest(DATA, 64)))
        print('records', n)
        print('captured', len(captured), sum(NOTICE in c for c in captured))
    """
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    env = {**os.environ, "PYTHONPATH": root, "TF_CPP_MIN_LOG_LEVEL": "0"}
    script = f"DATA = {data!r}\nNOTICE = {_NOTICE!r}\n" + textwrap.dedent(code)
    r = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=300, env=env)
    assert r.returncode == 0, r.stdout + r.stderr[-3000:]
    records, captured = r.stdout.splitlines()
    assert records == f"records {N}"
    assert captured == "captured 1 1", r.stderr[-3000:]      # one capture, and TensorFlow printed the notice there
    assert _NOTICE not in r.stderr, r.stderr[-3000:]          # and not where anyone sees it


def test_rule_rebatches_then_parses_per_batch_with_the_same_batches_as_a_chunk_parse(data):
    """The rule reads in chunks but parses per batch (it holds its CPU share on a busy host); an asked-for
    chunk is parsed in one call. Both give the same batches in the same order."""
    rule = PipelineSpec.from_manifest(data, 16)  # small records: chunks of many batches
    plan = rule.with_()
    from pipeline.plan.readplan import read_plan

    chunk = read_plan(rule).config.chunk_records
    assert chunk > 16 and read_plan(rule).source == "rule"
    asked = rule.with_(chunk_records=chunk)
    how = {s.name: s for s in plan_stages(rule)}["batch"].settings["how"]
    assert "read as batches, parsed per batch" in how, how
    assert "parsed in one call each" in {s.name: s for s in plan_stages(asked)}["batch"].settings["how"]
    got, want = batches_of(build_dataset(plan)), batches_of(build_dataset(asked))
    assert got == want and [len(b) for b in got[:-1]] == [16] * (len(got) - 1)


@pytest.mark.parametrize("local_size, sized", [("1", False), ("2", True)])
def test_tf_data_threads_sized_to_this_rank_share(data, monkeypatch, local_size, sized):
    """With two local ranks on this host, tf.data's pool and autotune's budget are this rank's share of the
    vCPUs (none of that with one rank on a host whose CPUs are all usable); the records are the same."""
    import os

    cpus = os.cpu_count()
    if sized and cpus < 2:
        pytest.skip("needs 2 vCPUs")
    monkeypatch.setenv("OMPI_COMM_WORLD_RANK", "0")
    monkeypatch.setenv("OMPI_COMM_WORLD_SIZE", local_size)
    monkeypatch.setenv("OMPI_COMM_WORLD_LOCAL_SIZE", local_size)
    monkeypatch.setattr("pipeline.plan.cpushare.cpu_count", lambda: cpus)
    ds = build_dataset(PipelineSpec.from_manifest(data, B))
    opts = ds.options()
    want = cpus // int(local_size) if sized else None
    assert opts.threading.private_threadpool_size == want
    assert opts.autotune.cpu_budget == want
    assert sorted(labels_of(ds)) == list(range(N))


@pytest.mark.parametrize("blocks", [1, 3, 5])
@pytest.mark.parametrize("drop", [False, True])
def test_rule_chunks_read_as_runs_of_batches_keep_the_chunk_order(data, monkeypatch, blocks, drop):
    """Chunks smaller than a file: the rule's runs of ``blocks`` batches per file give the same batches, in the
    same order, as chunks of ``blocks × batch`` records parsed whole and rebatched."""
    import pipeline.plan.readplan as read

    spec = PipelineSpec.from_manifest(data, 16, drop_remainder=drop)
    monkeypatch.setattr(read, "CHUNK_BYTES", int(spec.record_bytes * 16 * blocks) + 1)
    chunk = read.read_plan(spec).config.chunk_records if blocks > 1 else None
    if blocks > 1:
        assert chunk == 16 * blocks and read.read_plan(spec).config.read == "interleave"
    got = batches_of(build_dataset(spec))
    want = batches_of(build_dataset(spec.with_(chunk_records=chunk or 16)))
    assert got == want and len({len(b) for b in got[:-1]}) == 1


def test_a_stored_result_that_kept_the_rule_builds_the_rule_and_tune_times_the_rule_as_built(data):
    """A tuning result whose winner is the rule's config builds the rule's graph (parsed per batch), not a chunk
    parse of the same config; and `tune` times its rule candidate as build_dataset builds it (no options set)."""
    from pipeline.plan.readplan import ReadConfig, data_fingerprint, read_plan, rule_config
    from pipeline.plan.tunestore import TuneLookup
    from pipeline.plan.tuning import tune_read

    spec = PipelineSpec.from_manifest(data, 16, tune="off")
    rule = rule_config(spec)[0]
    kept = spec.with_(tuning=TuneLookup(rule, "kept the rule", tuple(sorted(data_fingerprint(spec).items()))))
    assert read_plan(kept).source == "tuned" and read_plan(kept).config == rule
    assert "parsed per batch" in {s.name: s for s in plan_stages(kept)}["batch"].settings["how"]
    other = spec.with_(tuning=TuneLookup(ReadConfig("sequential", chunk_records=rule.chunk_records * 2),
                                         "a chunk", tuple(sorted(data_fingerprint(spec).items()))))
    assert "parsed in one call each" in {s.name: s for s in plan_stages(other)}["batch"].settings["how"]
    built = []

    def build(s):
        built.append(s)
        return build_dataset(s)

    tune_read(spec, build, seconds=1.0, rounds=1, store=False, quick=True)
    rule_specs = [s for s in built if s.read == "auto"]
    assert rule_specs and all(s.chunk_records is None and s.num_parallel_reads is None for s in rule_specs)
    assert "parsed per batch" in {s.name: s for s in plan_stages(rule_specs[0])}["batch"].settings["how"]
