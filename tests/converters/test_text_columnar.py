"""``convert text --layout columnar``: blocks of token windows as raw columns (converters.text.blocks). The
columnar set holds the very windows of the example set (read back by real TensorFlow through ``decode_raw``),
ids in uint16 for a vocabulary of at most 65,536, every block full but a shard's last, block lengths planned
exactly, and ``--shuffle`` refused in one line naming the way round."""
from __future__ import annotations

import numpy as np
import pytest
from tfread import read_back

from converters.cli import main
from converters.shardset.layoutopts import LayoutOptions
from converters.shardset.options import ShardOutputOptions
from converters.shardset.reader import read_manifest
from converters.text.blocks import COLUMNAR_SHUFFLE, text_layout
from converters.text.convert import convert_text
from converters.text.job import TextJob
from converters.text.options import TextOptions, text_schema
from converters.text.synthetic import write_pile_jsonl
from converters.tfrecord.columnar import decode_block
from converters.tfrecord.reader import read_records


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    d = tmp_path_factory.mktemp("corpus")
    return [write_pile_jsonl(d / "a.jsonl", 80, seed=3, mean_words=50),
            write_pile_jsonl(d / "b.jsonl.zst", 40, seed=4, mean_words=30, frame_docs=10)]


def blocks_of(manifest) -> list[list[dict[str, np.ndarray]]]:
    """Every shard's blocks, decoded by the strict NumPy decoder."""
    return [[decode_block(r, manifest.schema, manifest.layout) for r in read_records(p)]
            for p in manifest.shard_paths()]


def tf_columnar(manifest) -> dict[str, np.ndarray]:
    """The set read by real TensorFlow as the contract says: parse the blocks' bytes, ``decode_raw`` each column in
    its stored type, cast to the schema's dtype."""
    import tensorflow as tf

    names = [f.name for f in manifest.schema.features]
    spec = {n: tf.io.FixedLenFeature([], tf.string) for n in names}
    out = {n: [] for n in names}
    ds = tf.data.TFRecordDataset(manifest.shard_paths(), compression_type="GZIP" if manifest.compression else "")
    for batch in ds.batch(3).map(lambda x: tf.io.parse_example(x, spec)):
        for f in manifest.schema.features:
            raw = tf.io.decode_raw(tf.strings.reduce_join(batch[f.name]), manifest.layout.stored_type(f.name))
            out[f.name].append(tf.cast(tf.reshape(raw, [-1, f.width]), f.dtype).numpy())
    return {n: np.concatenate(v) for n, v in out.items()}


@pytest.mark.parametrize("kwargs", [
    {"seq_len": 63, "shard_size": 20_000, "block_rows": 8},
    {"seq_len": 9, "shard_size": 3_000, "block_rows": 5, "pad_last": True},
    {"seq_len": 40, "no_cross_doc": True, "block_rows": 16, "compression": "gzip", "shard_size": 9_000},
    {"seq_len": 31, "block_rows": 256},                      # fewer windows than a block: one short block
])
def test_columnar_holds_the_example_sets_windows(corpus, tmp_path, kwargs):
    block_rows = kwargs.pop("block_rows")
    ex = convert_text(corpus, str(tmp_path / "ex"), workers=2, **kwargs)
    col = convert_text(corpus, str(tmp_path / "col"), workers=1, layout="columnar", block_rows=block_rows,
                       **kwargs)
    assert col.layout.kind == "columnar" and col.layout.block_rows == block_rows
    assert col.layout.stored_type("input_ids") == "uint16"
    assert col.records == ex.records and col.extra == ex.extra and sum(s.records for s in col.shards) == col.records
    assert col.options == {**ex.options, "layout": "columnar", "block_rows": block_rows}
    want = read_back(ex)
    got = tf_columnar(col)
    assert sorted(got) == sorted(want)
    for k in want:
        assert got[k].dtype == want[k].dtype and np.array_equal(got[k], want[k])
    shards = blocks_of(col)
    for info, blocks in zip(col.shards, shards):   # every block full but a shard's last
        rows = [len(b["input_ids"]) for b in blocks]
        assert rows[:-1] == [block_rows] * (len(rows) - 1) and 1 <= rows[-1] <= block_rows
        assert sum(rows) == info.records


def test_bpe_windows_take_fewer_bytes_than_examples(corpus, tmp_path):
    """Ids of a real vocabulary are mostly >= 128, two- or three-byte varints: two bytes each in uint16, and no
    per-row keys and lengths. (Byte-tokenizer ids are mostly < 128, one-byte varints: there the columnar set is
    about 1.3x larger; docs/layout.md says so.)"""
    from converters.text.tokenizers import train_bpe

    tok = str(tmp_path / "tokenizer.json")
    train_bpe(corpus, 2000, tok)
    ex = convert_text(corpus, str(tmp_path / "ex"), seq_len=127, tokenizer=tok)
    col = convert_text(corpus, str(tmp_path / "col"), seq_len=127, tokenizer=tok, layout="columnar")
    assert col.records == ex.records > 10
    assert col.total_bytes < ex.total_bytes
    assert np.array_equal(tf_columnar(col)["input_ids"], read_back(ex)["input_ids"])


def test_same_bytes_whatever_the_workers_and_on_the_job(corpus, tmp_path):
    from engines_data import assert_same_output

    from converters.engines.inprocess import run_job

    opts = TextOptions(seq_len=20, output=ShardOutputOptions(shard_size=4_000, layout="columnar", block_rows=6))
    from converters.text.convert import run

    run(corpus, str(tmp_path / "a"), opts, workers=1, batch_chars=700)
    run(corpus, str(tmp_path / "b"), opts, workers=3)
    run_job(TextJob.create(corpus, tmp_path / "c", opts, chunk_tokens=500))
    assert_same_output(tmp_path / "a", tmp_path / "b")
    assert_same_output(tmp_path / "a", tmp_path / "c")
    assert len(read_manifest(str(tmp_path / "a")).shards) > 3


@pytest.mark.parametrize("max_id, ids", [(256, "uint16"), (65_535, "uint16"), (65_536, "int32"), (255, "uint8")])
def test_ids_stored_in_the_narrowest_type_of_the_vocabulary(max_id, ids):
    schema = text_schema(15, "loss_mask")
    layout = text_layout(LayoutOptions("columnar", 4), schema, max_id)
    assert dict(layout.stored) == {"input_ids": ids, "loss_mask": "uint8"}
    assert text_layout(LayoutOptions(), schema, max_id).kind == "example"


def test_shuffle_is_refused_in_one_line(corpus, tmp_path, capsys):
    from converters.prep.options import PrepOptions
    from converters.prep.shuffle import WriteShuffleOptions

    opts = TextOptions(seq_len=20, output=ShardOutputOptions(layout="columnar", block_rows=6))
    with pytest.raises(ValueError, match="reshard SET --out NEW --layout columnar"):
        TextJob.create(corpus, tmp_path / "j", opts, prep=PrepOptions(shuffle=WriteShuffleOptions(seed=1)))
    rc = main(["convert", "text", *corpus, "--out", str(tmp_path / "o"), "--seq-len", "20", "--layout", "columnar",
               "--shuffle", "--seed", "1"])
    err = capsys.readouterr().err
    assert rc != 0 and COLUMNAR_SHUFFLE in err and "Traceback" not in err
    assert not (tmp_path / "o").exists() or not any((tmp_path / "o").iterdir())


def test_cli_writes_columnar(corpus, tmp_path, capsys):
    rc = main(["convert", "text", *corpus, "--out", str(tmp_path / "o"), "--seq-len", "15", "--layout", "columnar",
               "--block-rows", "32", "--no-progress"])
    assert rc == 0
    m = read_manifest(str(tmp_path / "o"))
    assert (m.layout.kind, m.layout.block_rows, dict(m.layout.stored)) == ("columnar", 32, {"input_ids": "uint16"})
    assert "\nlayout      columnar: blocks of 32 windows, input_ids stored as uint16\n" in capsys.readouterr().out
