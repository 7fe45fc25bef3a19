"""convert tabular against an independent per-row reference (tests/converters/tabularref.py): DeepFM rows
parsed with plain tf.io.parse_example, DLRM columnar rows through build_dataset, --vocab-from, --min-count,
min-max, negative downsampling; the same shard bytes from gzip, CRLF, CSV and Parquet copies."""
from __future__ import annotations

import gzip
import os

import numpy as np
import pytest
import tabularref as R
from tfread import read_back

from converters.engines.inprocess import run_job
from converters.shardset.manifest import MANIFEST_NAME
from converters.shardset.options import ShardOutputOptions
from converters.shardset.verify import verify
from converters.tabular.job import TabularJob
from converters.tabular.options import TabularOptions

SMALL = {"block_bytes": 4096, "chunk_rows": 97}  # many blocks, chunks and shards from a few hundred rows


def convert(inputs, out, shard_size=20_000, layout="example", lookup_memory=None, **kw) -> object:
    block_rows = 64 if layout == "columnar" else None
    opts = TabularOptions(output=ShardOutputOptions(shard_size=shard_size, layout=layout, block_rows=block_rows),
                          **kw)
    return run_job(TabularJob.create([str(i) for i in inputs], str(out), opts, lookup_memory=lookup_memory,
                                     **SMALL))


@pytest.fixture(scope="module")
def days(tmp_path_factory):
    d = tmp_path_factory.mktemp("days")
    lines = [R.day_lines(10 + k, 300) for k in range(3)]
    for k, ls in enumerate(lines):
        R.write_day(d / f"day_{k}", ls)
    return d, lines


def shard_bytes(m) -> list[bytes]:
    return [open(p, "rb").read() for p in m.shard_paths()]


def test_deepfm_rows_match_the_reference(days, tmp_path):
    d, lines = days
    m = convert([d / "day_0", d / "day_1"], tmp_path / "s")
    train = lines[0] + lines[1]
    vocab = R.vocabularies(train)
    got = read_back(m)
    ref = R.deepfm_rows(train, vocab)
    assert len(m.shards) > 3 and m.records == len(train)
    np.testing.assert_array_equal(got["ids"], np.array([r[0] for r in ref], np.int64))
    assert got["values"].tobytes() == np.array([r[1] for r in ref], np.float32).tobytes()
    np.testing.assert_array_equal(got["label"], np.array([r[2] for r in ref], np.float32))
    sizes = [len(v) + 1 for v in vocab]
    assert m.extra["feature_size"] == 13 + sum(sizes)
    assert [e["column"] for e in m.extra["categorical"]] == [f"C{c + 1}" for c in range(26)]  # schema order
    offsets = 13 + np.cumsum([0] + [e["table_size"] for e in m.extra["categorical"]])[:-1]  # as docs/tabular.md
    assert (got["ids"][:, 13:] >= offsets).all() and (got["ids"][:, 13:] < offsets + sizes).all()
    for c in range(26):
        entry = m.extra["categorical"][c]
        assert entry["table_size"] == sizes[c]
        assert open(tmp_path / "s" / "vocab" / f"C{c + 1}.txt").read().splitlines() == vocab[c]
    verify(str(tmp_path / "s"))


def test_dlrm_columnar_through_build_dataset(days, tmp_path):
    from pipeline import PipelineSpec, build_dataset

    d, lines = days
    m = convert([d / "day_0"], tmp_path / "s", layout="columnar", target="dlrm", min_count=2)
    vocab = R.vocabularies(lines[0], 2)
    ref = R.dlrm_rows(lines[0], vocab)
    assert m.layout.columnar and len(m.shards) > 1
    feats, labels = [], []
    for f, y in build_dataset(PipelineSpec.from_manifest(str(tmp_path / "s"), 50)):
        feats.append({k: v.numpy() for k, v in f.items()})
        labels.append(y.numpy())
    dense = np.concatenate([f["dense"] for f in feats])
    sparse = np.concatenate([f["sparse"] for f in feats])
    assert dense.tobytes() == np.array([r[0] for r in ref], np.float32).tobytes()
    np.testing.assert_array_equal(sparse, np.array([r[1] for r in ref], np.int64))
    np.testing.assert_array_equal(np.concatenate(labels).reshape(-1), [r[2] for r in ref])
    verify(str(tmp_path / "s"))


def _lengthened(line: str, k: int) -> str:
    """Column C3 of every third row longer than 8 bytes (C3 mixes both lengths; a block may too)."""
    f = line.split("\t")
    if k % 3 == 0 and f[1 + 13 + 2]:
        f[1 + 13 + 2] += "-and-longer"
    return "\t".join(f)


@pytest.mark.parametrize("min_count", [1, 2])
def test_vocabularies_past_their_memory_are_looked_up_on_disk_with_the_same_ids(days, tmp_path, caplog, min_count):
    """Every column's lookup over the memory it may hold (a 1-byte budget: one block of its sorted table at a
    time) gives the reference's ids and the same shard bytes as the lookups in memory; C3 has values longer
    than 8 bytes (a table of values on disk, a sorted copy in memory), the other columns' tables have keys."""
    import logging

    d, lines = days
    mixed = [_lengthened(ln, k) for k, ln in enumerate(lines[0] + lines[1])]
    R.write_day(tmp_path / "day", mixed)
    with caplog.at_level(logging.DEBUG, logger="converters.tabular.lookups"):
        disk = convert([tmp_path / "day"], tmp_path / "disk", min_count=min_count, lookup_memory=1)
    assert caplog.text.count("looked up in its sorted table on disk") == 26       # C3 too: a table of values
    memory = convert([tmp_path / "day"], tmp_path / "memory", min_count=min_count)
    assert shard_bytes(disk) == shard_bytes(memory)
    vocab = R.vocabularies(mixed, min_count)
    assert any(len(v) > 8 for v in vocab[2]) and any(len(v) <= 8 for v in vocab[2])
    ref = R.deepfm_rows(mixed, vocab)
    np.testing.assert_array_equal(read_back(disk)["ids"], np.array([r[0] for r in ref], np.int64))
    for c in range(26):
        assert (tmp_path / "disk" / "vocab" / f"C{c + 1}.txt").read_text().splitlines() == vocab[c]
    verify(str(tmp_path / "disk"))
    again = convert([tmp_path / "day"], tmp_path / "again", vocab_from=str(tmp_path / "disk"), lookup_memory=1)
    assert shard_bytes(again) == shard_bytes(disk)           # --vocab-from's tables: the same ids


LONG_VALUES = ["a" * 127 + "b", "a" * 128, "a" * 129, "a" * 128 + "\x00b", "a" * 129 + "\x00\x7f", "b" * 3000,
               "b" * 3000 + "c", "b" * 70_000, "~" * 129, "a" * 100]  # around vocablong.LONG, shared prefixes


@pytest.mark.parametrize("min_count", [1, 2])
def test_long_values_get_the_reference_ids_in_memory_and_on_disk(days, tmp_path, min_count):
    """C3 of every fifth row one of ``LONG_VALUES`` (values of at most and of more than 128 bytes, sorting
    between each other): counted in runs spilled within 1 MiB of ``--memory``, looked up in memory, on disk (a
    1-byte budget) and on disk through an index of their first 8 bytes (4 KiB), copied by ``--vocab-from``: the
    reference's vocabulary and ids, the same shards."""
    d, lines = days
    rows = [ln.split("\t") for ln in lines[0] + lines[1]]
    for k in range(0, len(rows), 5):
        rows[k][1 + 13 + 2] = LONG_VALUES[(k // 5) % len(LONG_VALUES) if k % 3 else 7]
    mixed = ["\t".join(f) for f in rows]
    R.write_day(tmp_path / "day", mixed)
    memory = convert([tmp_path / "day"], tmp_path / "memory", min_count=min_count, memory=1 << 20)
    disk = convert([tmp_path / "day"], tmp_path / "disk", min_count=min_count, lookup_memory=1)
    index = convert([tmp_path / "day"], tmp_path / "index", min_count=min_count, lookup_memory=1 << 12)
    assert shard_bytes(disk) == shard_bytes(memory) == shard_bytes(index)
    vocab = R.vocabularies(mixed, min_count)
    assert sum(len(v) > 128 for v in vocab[2]) >= 4
    np.testing.assert_array_equal(read_back(disk)["ids"], np.array([r[0] for r in R.deepfm_rows(mixed, vocab)]))
    for out in ("memory", "disk"):
        assert (tmp_path / out / "vocab" / "C3.txt").read_bytes().decode().splitlines() == vocab[2]
    again = convert([tmp_path / "day"], tmp_path / "again", vocab_from=str(tmp_path / "disk"), lookup_memory=1)
    assert shard_bytes(again) == shard_bytes(disk)


def test_vocab_from_converts_a_later_day_with_the_training_ids(days, tmp_path):
    d, lines = days
    convert([d / "day_0", d / "day_1"], tmp_path / "train", min_count=2)
    m = convert([d / "day_2"], tmp_path / "test", vocab_from=str(tmp_path / "train"))
    vocab = R.vocabularies(lines[0] + lines[1], 2)
    ref = R.deepfm_rows(lines[2], vocab)
    np.testing.assert_array_equal(read_back(m)["ids"], np.array([r[0] for r in ref], np.int64))
    for c in (1, 26):
        a = (tmp_path / "train" / "vocab" / f"C{c}.txt").read_bytes()
        assert (tmp_path / "test" / "vocab" / f"C{c}.txt").read_bytes() == a
    assert m.options["vocab_from"] == "train"


def test_minmax_is_fitted_on_the_counting_pass(days, tmp_path):
    d, lines = days
    dense = [_with_counts(ln) for ln in lines[0]]  # I1 never missing nor 0: its minimum is fitted too
    R.write_day(tmp_path / "day", dense)
    m = convert([tmp_path / "day"], tmp_path / "s", numeric="minmax", target="dlrm")
    raw = np.array([[max(int(v or 0), 0) for v in R.fields(ln)[1:14]] for ln in dense], np.float64)
    lo, hi = raw.min(axis=0), raw.max(axis=0)
    assert lo[0] >= 5
    span = hi - lo
    want = np.where(span > 0, (raw - lo) / np.where(span > 0, span, 1), 0).astype(np.float32)
    assert read_back(m)["dense"].tobytes() == want.tobytes()
    assert m.extra["minmax"]["I1"] == [float(lo[0]), float(hi[0])]


def _with_counts(line: str) -> str:
    f = R.fields(line)
    f[1] = str(5 + abs(int(f[1] or 0)))
    return "\t".join(f)


def test_negative_rate_keeps_every_positive_and_the_recorded_fraction(days, tmp_path):
    d, lines = days
    m = convert([d / "day_0", d / "day_1"], tmp_path / "s", negative_rate=0.5, seed=3)
    labels = [int(R.fields(ln)[0]) for ln in lines[0] + lines[1]]
    got = read_back(m)["label"]
    assert int(got.sum()) == sum(labels)
    x = m.extra
    assert x["negatives_in"] == labels.count(0)
    assert m.records == sum(labels) + x["negatives_kept"]
    assert 0.35 < x["negative_kept_fraction"] < 0.65
    assert m.skipped == {"sampled_out": labels.count(0) - x["negatives_kept"]}
    again = convert([d / "day_0", d / "day_1"], tmp_path / "t", negative_rate=0.5, seed=3)
    assert shard_bytes(again) == shard_bytes(m)
    other = convert([d / "day_0", d / "day_1"], tmp_path / "u", negative_rate=0.5, seed=4)
    assert shard_bytes(other) != shard_bytes(m)


def test_gzip_crlf_csv_and_parquet_copies_give_the_same_shards(days, tmp_path):
    d, lines = days
    base = convert([d / "day_0"], tmp_path / "base")
    with gzip.open(tmp_path / "day.gz", "wt", newline="") as fh:
        fh.write("".join(ln + "\n" for ln in lines[0]))
    R.write_day(tmp_path / "crlf", lines[0], crlf=True)
    header = ",".join(["label", *(f"I{i}" for i in range(1, 14)), *(f"C{i}" for i in range(1, 27))])
    (tmp_path / "day.csv").write_text(header + "\n" + "".join(ln.replace("\t", ",") + "\n" for ln in lines[0]))
    R.write_parquet(tmp_path / "day.parquet", lines[0], row_group_size=100)
    for name in ("day.gz", "crlf", "day.csv", "day.parquet"):
        m = convert([tmp_path / name], tmp_path / f"o-{name}")
        assert shard_bytes(m) == shard_bytes(base), name
        assert (tmp_path / f"o-{name}" / "vocab" / "C7.txt").read_bytes() == (tmp_path / "base/vocab/C7.txt").read_bytes()


def test_input_order_is_kept(days, tmp_path):
    d, lines = days
    m = convert([d / "day_1", d / "day_0"], tmp_path / "s", target="dlrm")
    ref = R.dlrm_rows(lines[1] + lines[0], R.vocabularies(lines[1] + lines[0]))
    np.testing.assert_array_equal(read_back(m)["sparse"], np.array([r[1] for r in ref], np.int64))
    assert [os.path.basename(i.path) for i in m.inputs] == ["day_1", "day_0"]
    assert os.path.exists(tmp_path / "s" / MANIFEST_NAME)


def _tree(out) -> dict[str, bytes]:
    return {p.relative_to(out).as_posix(): p.read_bytes() for p in sorted(out.rglob("*")) if p.is_file()}


@pytest.mark.parametrize("second", [{"min_count": 2}, {"hash_buckets": 64}])
def test_overwrite_replaces_the_vocabularies_with_the_set(days, tmp_path, second):
    d, _ = days
    out = tmp_path / "out"
    convert([d / "day_0"], out)
    opts = TabularOptions(output=ShardOutputOptions(shard_size=20_000), **second)
    m = run_job(TabularJob.create([str(d / "day_1")], str(out), opts, overwrite=True, **SMALL))
    fresh = tmp_path / "fresh"
    run_job(TabularJob.create([str(d / "day_1")], str(fresh), opts, **SMALL))
    assert verify(str(out)).ok
    got, want = _tree(out), _tree(fresh)
    assert got.keys() == want.keys() and m.records > 0  # old vocabularies replaced, or retired under hashing
    assert all(got[k] == want[k] for k in want if k != MANIFEST_NAME)


@pytest.mark.parametrize("kw, stranger", [({}, "vocab/notes.txt"), ({"hash_buckets": 64}, "vocab/C1.txt")])
def test_overwrite_refuses_a_file_in_the_vocabulary_folder_the_manifest_does_not_list(days, tmp_path, kw, stranger):
    from converters.util.errors import OutputExistsError

    d, _ = days
    out = tmp_path / "out"
    convert([d / "day_0"], out, **kw)
    (out / "vocab").mkdir(exist_ok=True)
    (out / stranger).write_bytes(b"mine\n")
    before = _tree(out)
    opts = TabularOptions(output=ShardOutputOptions(shard_size=20_000))
    with pytest.raises(OutputExistsError, match="did not write"):
        TabularJob.create([str(d / "day_1")], str(out), opts, overwrite=True, **SMALL)
    assert _tree(out) == before


def test_an_s3_output_with_vocabularies_on_disk_is_the_local_set(days, tmp_path, s3):
    """Output (and so the temporary area) on S3, every lookup past its memory: the sorted tables are uploaded,
    fetched once per process and read from there; the shards and vocabularies are the local set's bytes."""
    from moto_s3 import keys

    d, lines = days
    local = convert([d / "day_0"], tmp_path / "local", min_count=2)
    remote = convert([d / "day_0"], f"{s3.url}/set", min_count=2, lookup_memory=1)
    got = {k.split("/", 1)[1]: s3.client.get_object(Bucket=s3.bucket, Key=k)["Body"].read()
           for k in keys(s3, "set/") if not k.endswith("index.json")}
    assert len(got) == len(local.shards) + 26 and not [k for k in keys(s3, "set/") if ".tfpipe-tmp-" in k]
    assert [got[os.path.basename(p)] for p in local.shard_paths()] == shard_bytes(local)
    for c in (1, 26):
        assert got[f"vocab/C{c}.txt"] == (tmp_path / "local" / "vocab" / f"C{c}.txt").read_bytes()
    assert remote.records == local.records
