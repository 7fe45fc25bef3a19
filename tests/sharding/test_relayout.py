"""reshard --layout (sharding.relayout): example sets re-laid as columnar blocks and back, adopted sets
(``tfpipe index``) with fixed-shape features such as the DeepFM sample, text windows; rows compared bit for bit
(dtypes and shapes too) through real TensorFlow, stored types from the first pass, blocks full but a shard's
last, and what has no columnar form refused in one line."""
from __future__ import annotations

import numpy as np
import pytest
from tfread import read_back

from converters.cli import main
from converters.libsvm.convert import convert_libsvm
from converters.libsvm.synthetic import write_criteo_shards, write_sparse_libsvm
from converters.shardset.index import index_set
from converters.shardset.reader import read_manifest
from converters.text.convert import convert_text
from converters.text.synthetic import write_pile_jsonl
from converters.tfrecord.columnar import decode_block
from converters.tfrecord.layout import DEFAULT_BLOCK_ROWS
from converters.tfrecord.reader import read_records
from converters.util.errors import IntegrityError, TfpipeError
from sharding import reshard


@pytest.fixture(scope="module")
def criteo(tmp_path_factory):
    out = str(tmp_path_factory.mktemp("relayout") / "src")
    m = write_criteo_shards(out, 2503, shard_bytes=300 << 10)
    return out, m


def columnar_rows(m) -> dict[str, np.ndarray]:
    """A columnar set read by real TensorFlow: each column ``decode_raw`` in its stored type, cast to the
    schema's dtype, in the schema's shape (the contract's read path)."""
    import tensorflow as tf

    spec = {f.name: tf.io.FixedLenFeature([], tf.string) for f in m.schema.features}
    out = {f.name: [] for f in m.schema.features}
    ds = tf.data.TFRecordDataset(m.shard_paths(), compression_type="GZIP" if m.compression else "")
    for batch in ds.batch(4).map(lambda x: tf.io.parse_example(x, spec)):
        for f in m.schema.features:
            raw = tf.io.decode_raw(tf.strings.reduce_join(batch[f.name]), m.layout.stored_type(f.name))
            out[f.name].append(tf.cast(tf.reshape(raw, [-1, *f.shape]), f.dtype).numpy())
    return {k: np.concatenate(v) for k, v in out.items()}


def assert_same_rows(got: dict, want: dict) -> None:
    assert sorted(got) == sorted(want)
    for k in want:
        assert got[k].dtype == want[k].dtype and got[k].shape == want[k].shape, k
        assert got[k].tobytes() == want[k].tobytes(), k   # bit for bit (float32 too)


def block_rows_per_shard(m) -> list[list[int]]:
    first = m.schema.features[0].name
    return [[len(decode_block(r, m.schema, m.layout)[first]) for r in read_records(p)] for p in m.shard_paths()]


def assert_blocks_full_but_last(m) -> None:
    br = m.layout.block_rows
    for info, rows in zip(m.shards, block_rows_per_shard(m)):
        assert rows[:-1] == [br] * (len(rows) - 1) and 1 <= rows[-1] <= br
        assert sum(rows) == info.records


@pytest.mark.parametrize("kwargs", [
    {"num_shards": 4, "block_rows": 100},
    {"num_shards": 1},
    {"shard_size": 60 << 10, "block_rows": 64, "compression": "gzip"},
    {"num_shards": 26, "block_rows": 100},        # one block a shard (26 blocks, the last of 3 rows)
])
def test_example_to_columnar_and_back(criteo, tmp_path, kwargs):
    src, m = criteo
    col = reshard(src, str(tmp_path / "col"), layout="columnar", **kwargs)
    assert col.layout.columnar and col.records == m.records
    assert dict(col.layout.stored) == {"ids": "int32", "label": "uint8", "values": "float32"}
    assert col.layout.block_rows == kwargs.get("block_rows", DEFAULT_BLOCK_ROWS)
    assert col.options["reshard"]["layout"] == "columnar"
    want = read_back(m)
    assert_same_rows(columnar_rows(col), want)
    assert_blocks_full_but_last(col)
    if "num_shards" in kwargs:
        blocks = [len(r) for r in block_rows_per_shard(col)]
        assert len(blocks) == kwargs["num_shards"] and max(blocks) - min(blocks) <= 1
    back = reshard(str(tmp_path / "col"), str(tmp_path / "back"), num_shards=3, layout="example",
                   compression=None)
    assert not back.layout.columnar and back.records == m.records
    assert_same_rows(read_back(back), want)
    same = reshard(src, str(tmp_path / "same"), num_shards=3)   # the byte copy
    assert [open(p, "rb").read() for p in back.shard_paths()] == [open(p, "rb").read() for p in same.shard_paths()]


def test_columnar_to_columnar_keeps_stored_types_and_takes_a_new_block_size(criteo, tmp_path):
    src, m = criteo
    a = reshard(src, str(tmp_path / "a"), num_shards=3, layout="columnar", block_rows=50)
    b = reshard(str(tmp_path / "a"), str(tmp_path / "b"), num_shards=2, block_rows=128)   # layout "same"
    c = reshard(str(tmp_path / "a"), str(tmp_path / "c"), num_shards=5)                     # block size too
    assert (b.layout.block_rows, c.layout.block_rows) == (128, 50) and b.layout.stored == a.layout.stored
    for x in (b, c):
        assert_blocks_full_but_last(x)
        assert_same_rows(columnar_rows(x), read_back(m))


def test_deepfm_sample_adopted_with_index(tmp_path):
    from deepfm_sample import parse_all, sample_arrays, write_sample

    data = tmp_path / "data"
    data.mkdir()
    write_sample(data / "val.tfrecords", sample_arrays())
    index_set(str(data))
    col = reshard(str(data), str(tmp_path / "col"), num_shards=2, layout="columnar")
    assert dict(col.layout.stored) == {"ids": "int32", "label": "uint8", "values": "float32"}
    assert col.kind == "adopted" and col.records == 10_000
    want = parse_all([data / "val.tfrecords"])
    assert_same_rows(columnar_rows(col), want)
    back = reshard(str(tmp_path / "col"), str(tmp_path / "back"), num_shards=1, layout="example")
    assert_same_rows(parse_all(back.shard_paths()), want)


def test_text_windows_reshard_to_the_converters_columnar_shards(tmp_path):
    doc = write_pile_jsonl(tmp_path / "a.jsonl", 60, seed=5, mean_words=50)
    ex = convert_text([doc], str(tmp_path / "ex"), seq_len=31, shard_size=1 << 40)
    conv = convert_text([doc], str(tmp_path / "conv"), seq_len=31, shard_size=1 << 40, layout="columnar",
                        block_rows=16)
    res = reshard(str(tmp_path / "ex"), str(tmp_path / "res"), num_shards=1, layout="columnar", block_rows=16)
    assert res.layout == conv.layout and res.records == conv.records == ex.records
    assert [open(p, "rb").read() for p in res.shard_paths()] == [open(p, "rb").read() for p in conv.shard_paths()]
    assert "layout" not in reshard(str(tmp_path / "conv"), str(tmp_path / "back"), num_shards=1,
                                   layout="example").options


def test_shuffle_moves_rows_across_blocks(criteo, tmp_path):
    from converters.prep.shuffle import WriteShuffleOptions

    src, m = criteo
    col = reshard(src, str(tmp_path / "col"), num_shards=2, layout="columnar", block_rows=64,
                  shuffle=WriteShuffleOptions(seed=7))
    got, want = columnar_rows(col), read_back(m)
    order = np.lexsort(got["ids"].T[::-1])
    worder = np.lexsort(want["ids"].T[::-1])
    for k in want:   # the same rows, in another order
        assert got[k][order].tobytes() == want[k][worder].tobytes()
    assert not np.array_equal(got["ids"], want["ids"])
    assert abs(col.extra["shuffle"]["rank_correlation"]) < 0.1
    assert_blocks_full_but_last(col)


def test_refusals(criteo, tmp_path):
    src, m = criteo
    write_sparse_libsvm(tmp_path / "s.txt", 50)
    convert_libsvm(str(tmp_path / "s.txt"), tmp_path / "sparse", sparse=True)
    with pytest.raises(ValueError, match="cannot re-lay as columnar: feature '(ids|values)' has variable length"):
        reshard(str(tmp_path / "sparse"), str(tmp_path / "o1"), num_shards=1, layout="columnar")
    with pytest.raises(TfpipeError, match="cannot make 5 non-empty shards from 2503 records in 3 blocks of 1000"):
        reshard(src, str(tmp_path / "o2"), num_shards=5, layout="columnar", block_rows=1000)
    with pytest.raises(ValueError, match="block_rows applies to the columnar layout only"):
        reshard(src, str(tmp_path / "o3"), num_shards=5, block_rows=10)
    with pytest.raises(ValueError, match="layout must be one of"):
        reshard(src, str(tmp_path / "o4"), num_shards=5, layout="rows")
    for o in ("o1", "o2", "o3", "o4"):
        assert not (tmp_path / o).exists() or not any((tmp_path / o).iterdir())


def test_cli(criteo, tmp_path, capsys):
    src, _ = criteo
    assert main(["reshard", src, "--out", str(tmp_path / "c"), "--num-shards", "2", "--layout", "columnar",
                 "--block-rows", "500", "--no-progress"]) == 0
    out = capsys.readouterr().out
    assert "layout columnar: blocks of 500 rows, ids stored as int32, label stored as uint8, values stored as " \
           "float32" in out
    assert read_manifest(str(tmp_path / "c")).layout.block_rows == 500
    assert main(["reshard", src, "--out", str(tmp_path / "d"), "--num-shards", "2", "--block-rows", "5"]) == 2
    assert "block_rows applies to the columnar layout only" in capsys.readouterr().err


@pytest.mark.parametrize("damage, message", [
    (lambda data: data[:-1], "runs past the record's end"),                # the block cut short
    (lambda data: data.replace(b"label", b"lebal", 1), "column 'lebal' where 'label' was expected"),
])
def test_a_malformed_block_with_a_matching_sha256_is_caught(criteo, tmp_path, damage, message):
    """A block whose bytes were rewritten together with the manifest's sha256 and size (no checksum catches it):
    re-laying it is one IntegrityError naming the set and what is wrong with the block, and no manifest."""
    import json

    from converters.tfrecord.crc import frame_payloads
    from converters.util.digest import file_digest

    src, _ = criteo
    col = reshard(src, str(tmp_path / "col"), num_shards=1, layout="columnar", block_rows=500)
    path = col.shard_paths()[0]
    records = list(read_records(path))
    records[2] = damage(records[2])
    offsets = np.cumsum([0] + [len(r) for r in records])
    framed, _ = frame_payloads(np.frombuffer(b"".join(records), np.uint8), offsets)
    with open(path, "wb") as f:
        f.write(framed.tobytes())
    index = tmp_path / "col" / "index.json"
    doc = json.loads(index.read_text())
    doc["shards"][0]["bytes"], doc["shards"][0]["sha256"] = file_digest(path)
    index.write_text(json.dumps(doc))
    with pytest.raises(IntegrityError, match=f"col/train-00000-of-00001.tfrecord: block 2: a malformed columnar "
                                             f"block: .*{message}"):
        reshard(str(tmp_path / "col"), str(tmp_path / "back"), num_shards=1, layout="example")
    assert not (tmp_path / "back" / "index.json").exists()


def test_relayout_imports_no_tensorflow(criteo, tmp_path):
    """sharding never imports TensorFlow: rows are parsed by converters.tfrecord.parse."""
    import subprocess
    import sys

    src, _ = criteo
    code = (f"import sys\nfrom sharding import reshard\n"
            f"reshard({src!r}, {str(tmp_path / 'c')!r}, num_shards=2, layout='columnar')\n"
            f"reshard({str(tmp_path / 'c')!r}, {str(tmp_path / 'e')!r}, num_shards=1, layout='example')\n"
            "assert 'tensorflow' not in sys.modules, 'tensorflow imported'\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    assert read_manifest(str(tmp_path / "e")).records == 2503
