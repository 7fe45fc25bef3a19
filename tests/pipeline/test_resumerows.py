"""pipeline.graph.resumerows: ``resumable=True`` on a columnar set, positions in rows. A run stopped at any
step (in the first epoch or the second) and resumed from ``input_state`` yields the uninterrupted run's batches
bit for bit (dtypes and shapes too), for batch sizes that are not multiples of the block and blocks cut at odd
places; ranks take batches of one global row order; the rows are the Example set's; unshuffled, the order is
the Example set's resumable order over the same rows, shuffled it permutes rows within windows of whole blocks;
text windows resume too (how far rows move: tests/pipeline/test_columnar.py,
both columnar graphs against shuffle(B) on the Example set)."""
from __future__ import annotations

import numpy as np
import pytest
from columnar_data import indexed_columns, write_columnar_set, write_example_set

from converters.libsvm.convert import convert_libsvm
from pipeline import PipelineSpec, build_dataset, describe, input_state

N = 1000
BLOCK = 7           # blocks cut at odd places: 1,000 rows = 142 blocks of 7 and one of 6


@pytest.fixture(scope="module")
def sets(tmp_path_factory):
    """The same 1,000 LibSVM lines (label = line number) converted as a 2-shard columnar set and as Examples."""
    d = tmp_path_factory.mktemp("resumerows")
    src = d / "in.libsvm"
    src.write_text("".join(f"{i} " + " ".join(f"{i + j + 1}:{(i % 7 + j) / 4}" for j in range(3)) + "\n"
                           for i in range(N)))
    col = convert_libsvm([str(src)], str(d / "col"), field_size=3, layout="columnar", block_rows=BLOCK,
                         shard_size=20_000, workers=1)
    assert [s.records for s in col.shards] == [686, 314] and col.layout.block_rows == BLOCK
    convert_libsvm([str(src)], str(d / "ex"), field_size=3, workers=1)
    return str(d / "col"), str(d / "ex")


def _arrays(ds) -> list[dict[str, np.ndarray]]:
    """Every batch as {name: array} (the label as ``__label``)."""
    out = []
    for b in ds:
        feats, label = b if isinstance(b, tuple) else (b, None)
        arrays = {k: v.numpy() for k, v in feats.items()}
        if label is not None:
            arrays["__label"] = label.numpy()
        out.append(arrays)
    return out


def _assert_same(got: list[dict], want: list[dict]) -> None:
    """Batch for batch: the same names, dtypes, shapes and bits."""
    assert len(got) == len(want)
    for n, (a, b) in enumerate(zip(got, want)):
        assert sorted(a) == sorted(b), n
        for k in a:
            assert a[k].dtype == b[k].dtype and a[k].shape == b[k].shape, (n, k, a[k].shape, b[k].shape)
            assert a[k].tobytes() == b[k].tobytes(), (n, k)


CONFIGS = {   # name -> (batch_size, shuffle_buffer, drop_remainder): no batch size a multiple of the block
    "b24-shuffled": (24, 100, False),
    "b10-unshuffled": (10, 0, False),
    "b100-drop": (100, 300, True),
    "b64-buffer-past-the-epoch": (64, 1500, False),
}
_FULL: dict = {}


def _spec(col, name, **kw):
    batch, buffer, drop = CONFIGS[name]
    return PipelineSpec.from_manifest(col, batch, shuffle_buffer=buffer, seed=7 if buffer else None, epochs=2,
                                      drop_remainder=drop, resumable=True, **kw)


def _full(col, name):
    if name not in _FULL:
        _FULL[name] = _arrays(build_dataset(_spec(col, name)))
    return _FULL[name]


@pytest.fixture(scope="module")
def example_rows(sets):
    """The Example set's rows in the stored order: {name: array} (the label as ``__label``)."""
    _, ex = sets
    batches = _arrays(build_dataset(PipelineSpec.from_manifest(ex, 1000, read="sequential")))
    return {k: np.concatenate([b[k] for b in batches]) for k in batches[0]}


@pytest.mark.parametrize("name", list(CONFIGS))
def test_every_epoch_is_the_example_sets_rows_once(sets, example_rows, name):
    col, _ = sets
    batch, buffer, drop = CONFIGS[name]
    full = _full(col, name)
    per_epoch = len(full) // 2
    rows = example_rows
    assert sorted(rows) == sorted(full[0])
    for epoch in (full[:per_epoch], full[per_epoch:]):
        got = {k: np.concatenate([b[k] for b in epoch]) for k in epoch[0]}
        labels = got["__label"].astype(np.int64)
        assert len(labels) == (N // batch * batch if drop else N) and len(set(labels.tolist())) == len(labels)
        if buffer:
            assert labels.tolist() != sorted(labels.tolist())           # shuffled
        else:
            assert labels.tolist() == list(range(N))                    # the stored order
        for k in got:   # each row bit for bit the Example set's row with its label, in the same dtype and shape
            assert got[k].dtype == rows[k].dtype and got[k].shape[1:] == rows[k].shape[1:], k
            assert got[k].tobytes() == rows[k][labels].tobytes(), k
    if buffer:
        assert full[0]["__label"].tolist() != full[per_epoch]["__label"].tolist()   # a new order each epoch


@pytest.mark.parametrize("name", list(CONFIGS))
def test_resume_in_the_first_and_the_second_epoch_equals_the_uninterrupted_run(sets, name):
    col, _ = sets
    spec = _spec(col, name)
    full = _full(col, name)
    per_epoch = len(full) // 2
    for steps in (3, per_epoch - 1, per_epoch, per_epoch + 5, len(full) - 1):
        state = input_state(spec, steps)
        epoch, step = divmod(steps, per_epoch)
        assert (state["epoch"], state["position"]) == (epoch, step * spec.batch_size)   # positions are rows
        _assert_same(_arrays(build_dataset(spec, resume=state)), full[steps:])


@pytest.mark.parametrize("name,within", [("b24-shuffled", True), ("b100-drop", False),
                                         ("b64-buffer-past-the-epoch", False)])
def test_the_shuffled_configs_read_windows_within_and_across_files(sets, name, within):
    """The resume tests above cover both window orders: shards of 98 and 45 blocks of 7 rows hold windows of
    their own at a window of 36 blocks, not at 108 or 536."""
    from pipeline.resume.windoworder import within_files

    assert within_files(_spec(sets[0], name)) is within


def test_under_a_rank_plans_file_lists_windows_stay_across_files(sets):
    """Each rank of a plan with its own file lists would decide from its own files; windows stay across files,
    so every rank's state names the one order."""
    from pipeline.resume.windoworder import within_files

    spec = _spec(sets[0], "b24-shuffled")
    planned = spec.with_(plan_fingerprint="plan")
    assert within_files(spec) and not within_files(planned)
    assert input_state(spec, 3)["order"] == "window-within-files" and input_state(planned, 3)["order"] == "window"


def test_a_resumed_run_resumes_again(sets):
    col, _ = sets
    spec = _spec(col, "b24-shuffled")
    first = input_state(spec, 20)
    second = input_state(spec, 30, start=first)
    assert second == input_state(spec, 50)
    _assert_same(_arrays(build_dataset(spec, resume=second)), _full(col, "b24-shuffled")[50:])


@pytest.mark.parametrize("name, order", [("b24-shuffled", "window-within-files"), ("b100-drop", "window"),
                                         ("b10-unshuffled", None)])
def test_a_state_names_the_window_order_and_one_without_it_resumes_only_at_an_epoch_boundary(sets, name, order):
    """A shuffled columnar set's positions count rows of the window order (windows within files or across
    them): its state says which, and a state that does not (saved under the records' order) or names the other
    is refused mid-epoch; one without an order is taken at an epoch's start."""
    from pipeline import ResumeError

    col, _ = sets
    spec = _spec(col, name)
    mid, boundary = input_state(spec, 3), input_state(spec, len(_full(col, name)) // 2)
    assert mid.get("order") == order and boundary.get("order") == order
    if order is None:
        with pytest.raises(ResumeError, match="another row order|window order"):
            build_dataset(spec, resume={**mid, "order": "window"})
        return
    other = "window" if order == "window-within-files" else "window-within-files"
    with pytest.raises(ResumeError, match=rf"in {other} order and this spec reads {order} order.*epoch boundary"):
        build_dataset(spec, resume={**mid, "order": other})
    legacy_mid = {k: v for k, v in mid.items() if k != "order"}
    with pytest.raises(ResumeError, match=rf"the records' order .* reads {order} order.*epoch boundary"):
        build_dataset(spec, resume=legacy_mid)
    legacy_boundary = {k: v for k, v in boundary.items() if k != "order"}
    _assert_same(_arrays(build_dataset(spec, resume=legacy_boundary)), _full(col, name)[len(_full(col, name)) // 2:])


@pytest.mark.parametrize("shard_rows,within", [([404, 596], False), ([800, 1200], True)])
def test_the_unshuffled_order_is_the_example_sets_and_a_shuffled_one_permutes_within_windows(tmp_path, shard_rows,
                                                                                           within):
    """Shards of the same rows in both layouts (each ending in a short block): unshuffled, the columnar set's
    resumable order is the Example set's, batch for batch; shuffled, it is the window order
    (``pipeline.resume.windoworder``): each window of whole blocks holds the rows of those blocks, permuted —
    windows of 54 blocks across the shard boundary where the shards are small next to a window (404 and 596
    rows: 58 and 86 blocks), each shard's blocks in windows of their own where they are large enough (800 and
    1,200 rows: 54 + 54 + 7 and 54 + 54 + 54 + 10 blocks)."""
    from pipeline.resume.windoworder import within_files
    from pipeline.resume.windoworder import window_blocks

    n = sum(shard_rows)
    cols = indexed_columns(n)
    write_columnar_set(tmp_path / "c", cols, block_rows=BLOCK, shard_rows=shard_rows)
    write_example_set(tmp_path / "e", cols, shard_rows=shard_rows)
    a, b = (PipelineSpec.from_manifest(str(tmp_path / p), 33, epochs=2, resumable=True, shuffle_buffer=0)
            for p in "ce")
    _assert_same(_arrays(build_dataset(a)), _arrays(build_dataset(b)))
    _assert_same(_arrays(build_dataset(a, resume=input_state(a, 40))),
                 _arrays(build_dataset(b, resume=input_state(b, 40))))
    spec = PipelineSpec.from_manifest(str(tmp_path / "c"), 33, shuffle_buffer=150, seed=5, resumable=True)
    k = window_blocks(150, BLOCK)
    assert k == 54                                              # 2.5 x 150 rows in whole blocks of 7
    assert within_files(spec) is within
    files = [[(s, min(s + BLOCK, e)) for s in range(s0, e, BLOCK)]
             for s0, e in zip(np.cumsum([0] + shard_rows[:-1]).tolist(), np.cumsum(shard_rows).tolist())]
    got = np.concatenate([b["__label"] for b in _arrays(build_dataset(spec))]).astype(np.int64)
    order = [1, 0] if got[0] >= shard_rows[0] else [0, 1]       # the epoch's file order is seeded
    if within:
        windows = [f[w:w + k] for f in (files[i] for i in order) for w in range(0, len(f), k)]
        assert [len(w) for w in windows if len(w) < k] == ([7, 10] if order == [0, 1] else [10, 7])
    else:
        blocks = [blk for i in order for blk in files[i]]
        windows = [blocks[w:w + k] for w in range(0, len(blocks), k)]
    start = 0
    for w, blocks in enumerate(windows):
        rows = sorted(r for s, e in blocks for r in range(s, e))
        assert sorted(got[start:start + len(rows)].tolist()) == rows, w
        assert got[start:start + len(rows)].tolist() != rows     # permuted
        start += len(rows)
    assert start == n
    state = input_state(spec, 20)                               # a resume in the middle of a window
    want = _arrays(build_dataset(spec))[20:]
    _assert_same(_arrays(build_dataset(spec, resume=state)), want)


def _rank_runs(spec, ranks, resume=None):
    return [_arrays(build_dataset(spec.with_(num_shards=ranks, shard_index=i), resume=resume))
            for i in range(ranks)]


def test_two_ranks_take_batches_of_one_row_order_and_resume(sets):
    col, _ = sets
    spec = PipelineSpec.from_manifest(col, 20, shuffle_buffer=200, seed=3, epochs=2, resumable=True)
    one = _arrays(build_dataset(spec))               # one rank: the global order cut in batches of 20
    runs = _rank_runs(spec, 2)
    steps = N // 40                                  # equal steps: whole global batches of 2 x 20 rows
    assert [len(r) for r in runs] == [2 * steps, 2 * steps]
    for e in range(2):
        for t in range(steps):                       # rank i's step t is the global order's batch 2t + i
            for i in range(2):
                _assert_same([runs[i][e * steps + t]], [one[e * (N // 20) + 2 * t + i]])
    for stop in (7, steps + 4):                      # stopped in the first epoch and in the second
        state = input_state(spec.with_(num_shards=2, shard_index=0), stop)
        assert state == input_state(spec.with_(num_shards=2, shard_index=1), stop)
        for i, got in enumerate(_rank_runs(spec, 2, resume=state)):
            _assert_same(got, runs[i][stop:])


def test_text_windows_resume(tmp_path):
    """The token-window layout (``convert text --layout columnar``): the same resume, the same windows as
    its Example set."""
    from converters.text.convert import convert_text
    from converters.text.synthetic import write_pile_jsonl

    src = write_pile_jsonl(tmp_path / "docs.jsonl", 40, seed=1, mean_words=60)
    m = convert_text([src], str(tmp_path / "col"), seq_len=15, layout="columnar", block_rows=BLOCK,
                     shard_size=9000, workers=1)
    assert len(m.shards) > 2 and any(s.records % BLOCK for s in m.shards)
    convert_text([src], str(tmp_path / "ex"), seq_len=15, workers=1)
    spec = PipelineSpec.from_manifest(str(tmp_path / "col"), 24, shuffle_buffer=50, seed=3, epochs=2,
                                      resumable=True)
    full = _arrays(build_dataset(spec))
    windows = np.concatenate([b["input_ids"] for b in _arrays(build_dataset(
        PipelineSpec.from_manifest(str(tmp_path / "ex"), 64)))])
    got = np.concatenate([b["input_ids"] for b in full[:len(full) // 2]])
    assert got.dtype == windows.dtype == np.int64 and got.shape == windows.shape == (m.records, 16)
    assert sorted(map(bytes, got)) == sorted(map(bytes, windows))       # every window once, bit for bit
    for steps in (5, len(full) // 2 + 3):
        _assert_same(_arrays(build_dataset(spec, resume=input_state(spec, steps))), full[steps:])


def test_a_deep_resume_enters_a_block_by_the_offsets_index(sets, tmp_path, monkeypatch, caplog):
    """``tfpipe pipeline offsets`` indexes a columnar set's blocks (its records); a resume then enters the
    block holding its row by a seek, and the batches are still the uninterrupted run's."""
    import logging

    from pipeline.resume.setoffsets import index_offsets

    col, _ = sets
    monkeypatch.setenv("TFPIPE_CACHE", str(tmp_path / "cache"))
    report = index_offsets(col, progress=False)
    assert report.indexed == 2 and report.records == N
    spec = _spec(col, "b10-unshuffled")
    full = _full(col, "b10-unshuffled")
    with caplog.at_level(logging.DEBUG, logger="pipeline"):
        got = _arrays(build_dataset(spec, resume=input_state(spec, 55)))   # row 550: block 78 of shard 1, row 4
    _assert_same(got, full[55:])
    assert "entering record 78" in caplog.text


def test_a_streamed_columnar_set_resumes(sets, s3, tmp_path):
    import os

    col, _ = sets
    for name in sorted(os.listdir(col)):
        s3.client.upload_file(os.path.join(col, name), s3.bucket, f"col/{name}")
    spec = PipelineSpec.from_manifest(f"{s3.url}/col", 24, shuffle_buffer=100, seed=7, epochs=2, resumable=True,
                                      stream_cache_dir=str(tmp_path / "cache"))
    assert spec.stream is not None and spec.layout is not None
    from pipeline.resume.windoworder import within_files

    assert within_files(spec)                        # each streamed shard's blocks in windows of its own
    full = _full(col, "b24-shuffled")
    _assert_same(_arrays(build_dataset(spec)), full)
    for steps in (10, 50):
        _assert_same(_arrays(build_dataset(spec, resume=input_state(spec, steps))), full[steps:])


def test_describe_shows_the_decode_and_rows(sets):
    col, _ = sets
    text = describe(_spec(col, "b24-shuffled"))
    for want in ("layout=columnar", "block_rows=7", "position=row", "decode", "tf.io.decode_raw", "unit=row",
                 "order=window", "window_blocks=", "windows_at_a_time=2", "rebatch of decoded rows",
                 "windows=within files", "each file's blocks in windows of its own"):
        assert want in text, want
    assert "parse_example num_parallel" not in text and "7. parse" not in text
    across = describe(_spec(col, "b100-drop"))
    assert "windows=across files" in across and "too small for windows of their own" in across
