import os
import stat

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from converters.libsvm.options import libsvm_schema
from converters.libsvm.synthetic import criteo_arrays
from converters.shardset.cuts import plan_cuts
from converters.shardset.manifest import InputStats
from converters.shardset.options import ShardOutputOptions
from converters.shardset.reader import read_manifest
from converters.shardset.writer import ShardSetWriter
from converters.storage import CLAIM_NAME, TMP_PREFIX
from converters.tfrecord.examples import serialize_batch
from converters.tfrecord.reader import read_records
from converters.util.errors import OutputError, OutputExistsError, OutputInUseError


def _segments(lengths, used, limit):
    cuts = plan_cuts(np.asarray(lengths), used, limit)
    bounds = [0] + [c for c in cuts if c > 0] + [len(lengths)]
    return cuts, [list(lengths[a:b]) for a, b in zip(bounds, bounds[1:])]


@pytest.mark.parametrize("lengths,used,limit,cuts", [
    ([10, 10, 10, 10, 10], 0, 25, [2, 4]),
    ([10, 10, 10, 10, 10], 0, 30, [3]),
    ([10, 10, 10, 10, 10], 0, 50, []),
    ([10, 10, 10, 10, 10], 20, 25, [0, 2, 4]),
    ([50, 10], 0, 25, [1]),          # an oversized record gets a shard of its own
    ([50, 10], 5, 25, [0, 1]),
    ([], 0, 10, []),
])
def test_plan_cuts_table(lengths, used, limit, cuts):
    assert plan_cuts(np.asarray(lengths, dtype=np.int64), used, limit) == cuts


@settings(max_examples=300, deadline=None)
@given(st.lists(st.integers(1, 40), max_size=60), st.integers(0, 60), st.integers(1, 60))
def test_plan_cuts_never_crosses_the_limit(lengths, used, limit):
    used = min(used, limit)
    lengths = np.asarray(lengths, dtype=np.int64)
    cuts = plan_cuts(lengths, used, limit)
    assert cuts == sorted(set(cuts))
    bounds = [0] + [c for c in cuts if c > 0] + [len(lengths)]
    starts_new = bool(cuts and cuts[0] == 0)
    for k, (a, b) in enumerate(zip(bounds, bounds[1:])):
        seg = int(lengths[a:b].sum())
        base = used if (k == 0 and not starts_new) else 0
        assert base + seg <= limit or b - a == 1, (a, b, seg, base)
        # the shard was closed only because the next record would cross the limit
        if b < len(lengths):
            assert base + seg + lengths[b] > limit


def _write(out, n, shard_bytes, compression=None, batches=3, **kw):
    schema = libsvm_schema(39)
    cols = criteo_arrays(n, seed=3)
    framed, lengths = serialize_batch(schema, cols)
    offs = np.concatenate([[0], np.cumsum(lengths)])
    with ShardSetWriter(str(out), ShardOutputOptions(shard_size=shard_bytes, compression=compression), **kw) as w:
        for part in np.array_split(np.arange(n), batches):
            if len(part):
                w.write(framed[offs[part[0]]:offs[part[-1] + 1]], lengths[part])
        m = w.finish(schema=schema, inputs=[InputStats("mem", n, n)], options={"x": 1})
    return m, framed, lengths


@pytest.mark.parametrize("compression", [None, "gzip"])
def test_shards_bounded_named_and_complete(tmp_path, compression):
    limit = 20_000
    m, framed, lengths = _write(tmp_path / "out", 500, limit, compression)
    n = len(m.shards)
    assert n > 3
    names = sorted(os.listdir(tmp_path / "out"))
    suffix = ".tfrecord.gz" if compression else ".tfrecord"
    assert names == sorted([f"train-{i:05d}-of-{n:05d}{suffix}" for i in range(n)] + ["index.json"])
    got = []
    for s in m.shards:
        recs = list(read_records(tmp_path / "out" / s.name))
        assert len(recs) == s.records
        assert sum(len(r) + 16 for r in recs) <= limit
        got.extend(recs)
    pos, expected = 0, []
    for ln in lengths:
        expected.append(framed[pos + 12:pos + ln - 4].tobytes())
        pos += ln
    assert got == expected
    assert read_manifest(tmp_path / "out") == m


def test_shards_closed_before_crossing(tmp_path):
    m, _, lengths = _write(tmp_path / "o", 300, 10_000)
    # each shard except the last would have crossed the limit with its successor's first record
    i = 0
    for s in m.shards[:-1]:
        used = int(lengths[i:i + s.records].sum())
        assert used <= 10_000 < used + lengths[i + s.records]
        i += s.records


def test_rerun_is_byte_identical(tmp_path):
    m1, *_ = _write(tmp_path / "a", 200, 15_000, "gzip")
    m2, *_ = _write(tmp_path / "b", 200, 15_000, "gzip", batches=7)
    assert [s.sha256 for s in m1.shards] == [s.sha256 for s in m2.shards]
    assert (tmp_path / "a" / "index.json").read_bytes() == (tmp_path / "b" / "index.json").read_bytes()


def test_refuses_non_empty_output_unless_overwrite(tmp_path):
    out = tmp_path / "o"
    _write(out, 50, 1 << 20)
    with pytest.raises(OutputExistsError, match="overwrite=True"):
        _write(out, 50, 1 << 20)
    m, *_ = _write(out, 60, 1 << 20, overwrite=True)
    assert m.records == 60 and read_manifest(out).records == 60


def test_overwrite_refuses_foreign_files(tmp_path):
    out = tmp_path / "o"
    out.mkdir()
    (out / "precious.txt").write_text("mine")
    with pytest.raises(OutputExistsError, match="precious.txt"):
        _write(out, 10, 1 << 20, overwrite=True)
    assert (out / "precious.txt").exists()


def test_failure_leaves_no_final_names_and_no_manifest(tmp_path):
    out = tmp_path / "o"
    schema = libsvm_schema(39)
    framed, lengths = serialize_batch(schema, criteo_arrays(100))
    with pytest.raises(RuntimeError):
        with ShardSetWriter(str(out), ShardOutputOptions(shard_size=5000)) as w:
            w.write(framed, lengths)
            raise RuntimeError("boom")
    assert not out.exists()  # the writer made it: removed with the claim


def test_interrupted_leftovers_hint_and_clean_rerun(tmp_path):
    out = tmp_path / "o"
    out.mkdir()
    (out / f"{TMP_PREFIX}train-00000.tfrecord").write_bytes(b"partial")
    with pytest.raises(OutputExistsError, match="interrupted"):
        _write(out, 10, 1 << 20)
    m, *_ = _write(out, 10, 1 << 20, overwrite=True)
    assert sorted(os.listdir(out)) == ["index.json", "train-00000-of-00001.tfrecord"]


def test_write_rejects_mismatched_lengths(tmp_path):
    with ShardSetWriter(str(tmp_path / "o")) as w:
        with pytest.raises(ValueError, match="do not match"):
            w.write(np.zeros(10, np.uint8), [5, 6])


# -- hostile use: one writer per output, --overwrite proves ownership, OS errors, the manifest's permissions --

def test_temporary_names_are_the_runs_own(tmp_path):
    schema = libsvm_schema(39)
    framed, lengths = serialize_batch(schema, criteo_arrays(50))
    a = ShardSetWriter(str(tmp_path / "a"))
    b = ShardSetWriter(str(tmp_path / "b"))
    a.write(framed, lengths)
    b.write(framed, lengths)
    assert a.run_id != b.run_id
    assert [n for n in os.listdir(tmp_path / "a") if n != CLAIM_NAME] == [f"{TMP_PREFIX}{a.run_id}-train-00000.tfrecord"]
    a.abort()
    b.abort()
    assert not (tmp_path / "a").exists() and not (tmp_path / "b").exists()


def test_a_second_writer_on_the_same_output_fails_at_once(tmp_path):
    with ShardSetWriter(str(tmp_path / "o")):
        with pytest.raises(OutputInUseError, match=rf"in use by another run \(pid {os.getpid()}"):
            ShardSetWriter(str(tmp_path / "o"))
    _write(tmp_path / "o", 10, 1 << 20)  # released on exit: the next run may write


@pytest.mark.parametrize("files,match", [
    ({"index.json": '{"mine": 1}'}, "not a valid tfpipe manifest"),
    ({"index.json": "[" * 50_000}, "nested too deeply"),
    ({"eval-00000-of-00001.tfrecord": "mine"}, r"eval-00000-of-00001\.tfrecord; there is no tfpipe manifest"),
])
def test_overwrite_deletes_only_what_a_manifest_proves(tmp_path, files, match):
    out = tmp_path / "o"
    out.mkdir()
    for name, text in files.items():
        (out / name).write_text(text)
    with pytest.raises(OutputExistsError, match=match):
        _write(out, 10, 1 << 20, overwrite=True)
    assert {n: (out / n).read_text() for n in os.listdir(out)} == files


def test_overwrite_keeps_shard_named_files_the_manifest_does_not_list(tmp_path):
    out = tmp_path / "o"
    _write(out, 50, 1 << 20)
    (out / "train-00000-of-00002.tfrecord").write_text("not in the manifest")
    with pytest.raises(OutputExistsError, match=r"train-00000-of-00002\.tfrecord"):
        _write(out, 10, 1 << 20, overwrite=True)
    assert sorted(os.listdir(out)) == ["index.json", "train-00000-of-00001.tfrecord", "train-00000-of-00002.tfrecord"]


@pytest.mark.parametrize("mask", [0o022, 0o027, 0o077])
def test_manifest_is_as_readable_as_the_shards(tmp_path, mask):
    old = os.umask(mask)
    try:
        _write(tmp_path / "o", 20, 1 << 20)
    finally:
        os.umask(old)
    modes = {n: stat.S_IMODE(os.stat(tmp_path / "o" / n).st_mode) for n in os.listdir(tmp_path / "o")}
    assert set(modes.values()) == {0o666 & ~mask}, modes


def test_output_under_a_file_is_one_error_naming_it(tmp_path):
    (tmp_path / "f").write_text("x")
    with pytest.raises(OutputError, match=r"cannot prepare the output .*f/o: Not a directory"):
        _write(tmp_path / "f" / "o", 10, 1 << 20)


def test_manifest_that_cannot_be_written_takes_the_shards_back(tmp_path, mounted):
    """Disk full at the very end: the shards were renamed, the manifest does not fit. No shard may stay under
    its final name (a 64 KiB tmpfs, filled by a file beside the output just before ``finish``)."""
    disk = tmp_path / "disk"
    disk.mkdir()
    mounted(["-t", "tmpfs", "-o", "size=64k", "tmpfs"], disk)
    schema = libsvm_schema(39)
    framed, lengths = serialize_batch(schema, criteo_arrays(60))
    w = ShardSetWriter(str(disk / "o"), ShardOutputOptions(shard_size=8_000))
    w.write(framed, lengths)
    w.close_shard()
    with open(disk / "filler", "wb", buffering=0) as f:  # take every block left
        try:
            while True:
                f.write(b"\0" * 4096)
        except OSError:
            pass
    with pytest.raises(OutputError, match=r"cannot write .*: No space left on device"):
        w.finish(schema=schema)
    assert not (disk / "o").exists()


def test_abort_sweeps_an_unrecorded_temporary_of_its_run(tmp_path):
    """A signal can land between creating a temporary shard and recording it: abort removes every file with the
    run's temporary prefix, and nothing of another run."""
    from converters.storage import TMP_PREFIX

    out = tmp_path / "o"
    w = ShardSetWriter(str(out), ShardOutputOptions(shard_size=5000))
    (out / f"{TMP_PREFIX}{w.run_id}-train-00007.tfrecord").write_bytes(b"half")    # created, not recorded
    (out / f"{TMP_PREFIX}someoneelse-train-00000.tfrecord").write_bytes(b"theirs")
    w.abort()
    assert sorted(os.listdir(out)) == [f"{TMP_PREFIX}someoneelse-train-00000.tfrecord"]


@pytest.mark.parametrize("compression", [None, "gzip"])
def test_a_suspended_shard_reopens_to_the_same_bytes(tmp_path, compression):
    """``suspend`` closes the open shard's descriptor between writes (a writer of many parts does it to keep
    open files bounded); the shards are byte for byte those written without it."""
    schema = libsvm_schema(39)
    framed, lengths = serialize_batch(schema, criteo_arrays(300, seed=5))
    offs = np.concatenate([[0], np.cumsum(lengths)])
    outs = {}
    for suspend in (False, True):
        out = tmp_path / f"s{int(suspend)}"
        with ShardSetWriter(str(out), ShardOutputOptions(shard_size=15_000, compression=compression)) as w:
            for part in np.array_split(np.arange(300), 12):
                w.write(framed[offs[part[0]]:offs[part[-1] + 1]], lengths[part])
                if suspend:
                    w.suspend()
                    assert w._file.raw.closed
            m = w.finish(schema=schema)
        outs[suspend] = [(out / s.name).read_bytes() for s in m.shards]
        assert len(m.shards) > 1
    assert outs[False] == outs[True]


@pytest.mark.parametrize("rows, limit, shard_rows", [
    ([4, 4, 4, 1], 1 << 20, [13]),     # one shard: every record's rows counted
    ([4, 4, 4, 1], 60, [8, 5]),        # records of 30 bytes: two per shard
    ([4, 4, 4, 1], 30, [4, 4, 4, 1]),
])
def test_rows_of_columnar_blocks_are_what_shards_count(tmp_path, rows, limit, shard_rows):
    from converters.tfrecord.layout import RecordLayout

    schema = libsvm_schema(1)
    layout = RecordLayout("columnar", 4, (("ids", "uint8"), ("label", "uint8"), ("values", "uint8")))
    lengths = np.full(len(rows), 30, np.int64)
    with ShardSetWriter(str(tmp_path / "o"), ShardOutputOptions(shard_size=limit)) as w:
        w.write(np.zeros(int(lengths.sum()), np.uint8), lengths, rows)
        with pytest.raises(ValueError, match="rows"):
            w.write(np.zeros(30, np.uint8), [30], [1, 2])
        m = w.finish(schema=schema, layout=layout)
    assert [s.records for s in m.shards] == shard_rows
    assert m.records == sum(rows) and m.layout == layout
