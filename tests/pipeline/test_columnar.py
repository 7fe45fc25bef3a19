"""pipeline.graph.columnar / rowshuffle: a columnar set read through from_manifest + build_dataset gives the
same tensors as the Example set of the same rows (any batch size), ranks take blocks with equal steps, rows
are shuffled across blocks about as far as shuffle(B) moves Examples, Pipe mode and describe."""
from __future__ import annotations

import numpy as np
import pytest
from columnar_data import indexed_columns, write_columnar_set, write_example_set
from pipeline_data import labels_of

from bench.core.shufflemix import mix, read_order
from converters.shardset.reader import read_manifest
from pipeline import PipelineSpec, build_dataset, describe
from pipeline.graph.pipesource import simulate_channel

N = 1000
SHARDS = [300, 300, 300, 100]       # 300 rows = 18 blocks of 16 + one of 12: a short last block per shard


@pytest.fixture(scope="module")
def sets(tmp_path_factory):
    d = tmp_path_factory.mktemp("layouts")
    cols = indexed_columns(N)
    write_columnar_set(d / "c", cols, block_rows=16, shard_rows=SHARDS)
    write_example_set(d / "e", cols, shard_rows=300)
    return str(d / "c"), str(d / "e")


def _rows(ds):
    """All rows of a dataset, in read order: {name: array}, plus each feature's (dtype, shape per row)."""
    batches = list(ds)
    first = batches[0]
    feats, label = first if isinstance(first, tuple) else (first, None)
    out = {k: np.concatenate([(b[0] if isinstance(b, tuple) else b)[k].numpy() for b in batches]) for k in feats}
    if label is not None:
        out["__label"] = np.concatenate([b[1].numpy() for b in batches])
    kinds = {k: (v.dtype, tuple(v.shape[1:])) for k, v in feats.items()}
    if label is not None:
        kinds["__label"] = (label.dtype, tuple(label.shape[1:]))
    return out, kinds, [len(b[1] if isinstance(b, tuple) else b[next(iter(feats))]) for b in batches]


@pytest.fixture(scope="module")
def example_rows(sets):
    """``example_rows(output)``: the Example set's rows in the stored order, and each feature's (dtype, shape
    per row), read once per output (a module's cases share them)."""
    _, ex = sets
    done = {}

    def rows(output):
        if output not in done:
            done[output] = _rows(build_dataset(PipelineSpec.from_manifest(ex, N, output=output, read="sequential")))
        return done[output]
    return rows


@pytest.mark.parametrize("batch_size", [1, 7, 16, 100, 1000, 4096])
@pytest.mark.parametrize("output", ["keras", "dict"])
def test_same_tensors_as_the_example_set_for_any_batch_size(sets, example_rows, batch_size, output):
    """Batch for batch the Example set's rows: batch k holds its rows k*B .. k*B + B - 1 (the last one the
    rest), with the same names, dtypes and shapes per row."""
    col, _ = sets
    a, ka, sa = _rows(build_dataset(PipelineSpec.from_manifest(col, batch_size, output=output)))
    b, kb, _ = example_rows(output)
    assert ka == kb
    assert sa == [min(batch_size, N - i) for i in range(0, N, batch_size)]    # the Example set's batches
    for k in a:
        assert a[k].dtype == b[k].dtype and np.array_equal(a[k], b[k]), k   # bit for bit, in the stored order


@pytest.mark.parametrize("drop", [False, True])
def test_drop_remainder_and_epochs(sets, drop):
    col, _ = sets
    got = labels_of(build_dataset(PipelineSpec.from_manifest(col, 64, drop_remainder=drop, epochs=2)))
    per_epoch = N // 64 * 64 if drop else N
    assert got == [float(i) for i in range(per_epoch)] * 2


@pytest.mark.parametrize("ranks", [2, 3, 5])
def test_ranks_take_blocks_with_equal_steps(sets, ranks):
    col, _ = sets
    seen, steps = [], set()
    for i in range(ranks):
        spec = PipelineSpec.from_manifest(col, 32, num_shards=ranks, shard_index=i)
        batches = list(build_dataset(spec))
        steps.add(len(batches))
        assert len(batches) == spec.take_steps
        seen += [int(x) for _, lab in batches for x in lab.numpy()]
    assert len(steps) == 1
    assert len(seen) == len(set(seen))           # no row on two ranks
    unequal = [PipelineSpec.from_manifest(col, 32, num_shards=ranks, shard_index=i, equal_steps=False)
               for i in range(ranks)]
    every = sorted(int(x) for s in unequal for x in labels_of(build_dataset(s)))
    assert every == list(range(N))               # without equal steps every row once
    assert sum(s.rank_records for s in unequal) == N


def test_shuffle_is_a_seeded_permutation_per_epoch(sets):
    col, _ = sets

    def read(seed):
        return [int(x) for x in labels_of(build_dataset(PipelineSpec.from_manifest(
            col, 50, shuffle_buffer=300, seed=seed, epochs=2)))]

    one = read(7)
    assert sorted(one[:N]) == list(range(N)) and sorted(one[N:]) == list(range(N))
    assert one[:N] != one[N:]                    # a new order each epoch
    assert read(7) == one                        # the same orders with the same seed
    assert read(8) != one


@pytest.fixture(scope="module")
def big_sets(tmp_path_factory):
    """20,000 rows as a columnar set (blocks of 256) and as an Example set, written once, read only; and as a
    columnar set of four shards of 5,000 rows (``c4``: the window order keeps windows within its files)."""
    d = tmp_path_factory.mktemp("big")
    cols = indexed_columns(20_000)
    write_columnar_set(d / "c", cols, block_rows=256)
    write_columnar_set(d / "c4", cols, block_rows=256, shard_rows=[5_000] * 4)
    write_example_set(d / "e", cols)
    return d


def _moved(path, buffer, resumable, file_rows=None):
    """(mean displacement, rank correlation) of a shuffled read, the mean over seeds 1, 2 and 3; with
    ``file_rows`` (rows per file, a set of equal files read in a seeded file order), of each row within its
    file's span of the read, which must hold exactly that file's rows (windows within files)."""
    runs = []
    for s in (1, 2, 3):
        order = read_order(build_dataset(PipelineSpec.from_manifest(
            str(path), 256, shuffle_buffer=buffer, seed=s, resumable=resumable)))
        if file_rows:
            a = np.asarray(order, np.int64).reshape(-1, file_rows)
            assert (a // file_rows == a[:, :1] // file_rows).all()       # each file's rows in one span
            order = (a % file_rows).reshape(-1)
            runs += [mix(span) for span in order.reshape(-1, file_rows)]
        else:
            runs.append(mix(order))
    return np.mean([r["mean_displacement"] for r in runs]), np.mean([r["rank_correlation"] for r in runs])


@pytest.fixture(scope="module")
def shuffle_B_on_examples(big_sets):
    """``moved(buffer)``: ``_moved`` of the Example set's shuffle(B), measured once per buffer."""
    done = {}

    def moved(buffer):
        if buffer not in done:
            done[buffer] = _moved(big_sets / "e", buffer, False)
        return done[buffer]
    return moved


@pytest.mark.parametrize("buffer", [500, 2000])
@pytest.mark.parametrize("resumable,columnar", [(False, "c"), (True, "c"), (True, "c4")])
def test_shuffle_moves_rows_as_far_as_shuffle_B_on_examples(big_sets, shuffle_B_on_examples, buffer, resumable,
                                                            columnar):
    """The row shuffle and the resumable order over rows (the window order: one file, and four files with
    windows of their own, measured within each file's span of the read) move rows at least 0.95x as far as
    shuffle(B) on the one-file Example set."""
    file_rows = None
    if columnar == "c4":
        from pipeline.resume.windoworder import within_files

        assert within_files(PipelineSpec.from_manifest(str(big_sets / "c4"), 256, shuffle_buffer=buffer, seed=1))
        file_rows = 5_000
    (dc, rc), (de, re_) = _moved(big_sets / columnar, buffer, resumable, file_rows), shuffle_B_on_examples(buffer)
    assert dc >= 0.95 * de, (dc, de)
    assert rc <= re_ + 0.01, (rc, re_)
    assert dc > 256                              # rows left their blocks


@pytest.mark.parametrize("ranks,shuffle", [(1, 0), (2, 0), (2, 200)])
def test_pipe_mode(sets, tmp_path, ranks, shuffle):
    col, _ = sets
    seen = []
    for i in range(ranks):
        pipe_dir = tmp_path / f"rank{i}"
        writer = simulate_channel(str(pipe_dir), "train", read_manifest(col).shard_paths(), epochs=1)
        spec = PipelineSpec.from_manifest(col, 64, mode="pipe", channel="train", pipe_dir=str(pipe_dir),
                                          pipe_timeout=20, num_shards=ranks, shard_index=i, equal_steps=False,
                                          shuffle_buffer=shuffle, seed=3)
        got = [int(x) for x in labels_of(build_dataset(spec))]
        writer.join(10)
        assert writer.error is None
        if ranks == 1 and not shuffle:
            assert got == list(range(N))
        seen += got
    assert sorted(seen) == list(range(N))


def test_describe_shows_the_layout_and_the_decode_stage(sets):
    col, _ = sets
    text = describe(PipelineSpec.from_manifest(col, 100, shuffle_buffer=800, num_shards=2))
    for want in ("layout=columnar", "block_rows=16", "decode", "tf.io.decode_raw", "ids:uint16", "unit=block",
                 "unit=row", "pool=750", "take"):
        assert want in text, want


@pytest.mark.parametrize("kw,says", [
    ({"parse": False}, "a columnar set's records are blocks of rows"),
])
def test_what_a_columnar_read_refuses_is_one_line(sets, kw, says):
    col, _ = sets
    with pytest.raises(ValueError, match=says):
        PipelineSpec.from_manifest(col, 10, **kw)


def test_a_columnar_set_streams_from_s3(sets, s3, tmp_path):
    import os

    col, _ = sets
    for name in sorted(os.listdir(col)):
        s3.client.upload_file(os.path.join(col, name), s3.bucket, f"col/{name}")
    spec = PipelineSpec.from_manifest(f"{s3.url}/col", 64, stream_cache_dir=str(tmp_path / "cache"))
    assert spec.stream is not None and spec.layout is not None
    assert labels_of(build_dataset(spec)) == [float(i) for i in range(N)]
    assert "stream" in describe(spec)


def test_every_tune_candidate_reads_every_row_once(sets):
    from pipeline.plan.readplan import candidates
    from pipeline.spec.blocks import decode_rows_for

    col, _ = sets
    spec = PipelineSpec.from_manifest(col, 64, tune="off")
    cands = candidates(spec)
    assert cands[0].read == "sequential" and cands[0].chunk_records == decode_rows_for(spec.schema)   # the columnar rule first
    assert len(cands) > 3
    for c in cands:
        got = labels_of(build_dataset(spec.with_(**c.options())))
        assert sorted(got) == [float(i) for i in range(N)], c.label()


def test_tune_then_explain_a_columnar_set(sets, capsys, tmp_path, monkeypatch):
    from converters.cli import main

    col, _ = sets
    monkeypatch.setenv("TFPIPE_CACHE", str(tmp_path))
    assert main(["pipeline", "tune", col, "--batch-size", "32", "--seconds", "1", "--repeats", "1"]) == 0
    assert "(built-in rule)" in capsys.readouterr().out
    assert main(["pipeline", "explain", col, "--batch-size", "32"]) == 0
    out = capsys.readouterr().out
    assert "layout=columnar" in out and "chosen_by=tuned" in out and "decode" in out


@pytest.mark.parametrize("layout,error", [("columnar", "layout must be a converters.tfrecord.layout.RecordLayout"),
                                          (None, None)])
def test_the_layout_option_is_checked(sets, layout, error):
    spec = PipelineSpec.from_manifest(sets[0], 10)
    if error:
        with pytest.raises(ValueError, match=error):
            spec.with_(layout=layout)
    else:
        assert spec.with_(layout=layout).layout is None     # the example layout


def test_from_manifest_fills_the_layout_itself(sets):
    with pytest.raises(TypeError, match="sets layout from the manifest"):
        PipelineSpec.from_manifest(sets[0], 10, layout=None)
