"""pipeline.graph.blockcheck: a columnar block that lies (CRC-valid, its shard's size and sha256 put into the
manifest, so only a block check can tell) fails the read through build_dataset, the plain graph and the
resumable order alike, with one line naming the shard and the block; an honest set reads as before."""
from __future__ import annotations

import hashlib
import json
import re

import numpy as np
import pytest
from columnar_data import indexed_columns, write_columnar_set
from pipeline_data import labels_of

from converters.shardset.manifest import MANIFEST_NAME
from converters.tfrecord.columnar import _column_bytes, block_template, decode_block, encode_block
from converters.tfrecord.crc import frame_payloads
from converters.tfrecord.reader import read_records
from converters.util.protowire import field, varint
from pipeline import PipelineSpec, build_dataset

BR = 16
SHARDS = [100, 60]          # shard 0: 6 blocks of 16 + one of 4


@pytest.fixture
def cset(tmp_path):
    out = tmp_path / "c"
    m = write_columnar_set(out, indexed_columns(sum(SHARDS)), block_rows=BR, shard_rows=SHARDS)
    return out, m


def raw_block(cols: dict, schema, layout, length_varint: bytes | None = None) -> bytes:
    """A block as ``encode_block`` writes it, but with columns of any row counts and, when given, the first
    column's data length varint replaced."""
    entries = b""
    for i, f in enumerate(schema.features):
        data = _column_bytes(f.name, cols[f.name], layout.stored_type(f.name), f.width)
        value = field(1, data) if length_varint is None or i else b"\x0a" + length_varint + data
        entries += field(1, field(1, f.name.encode()) + field(2, field(1, value)))
    return field(1, entries)


def _rewrite(out, m, payloads: list[bytes]) -> None:
    """Shard 0 rewritten from ``payloads``, its size and sha256 (not its rows) put into the manifest."""
    offsets = np.concatenate([[0], np.cumsum([len(p) for p in payloads])])
    framed, _ = frame_payloads(np.frombuffer(b"".join(payloads), np.uint8), offsets)
    (out / m.shards[0].name).write_bytes(framed.tobytes())
    raw = json.loads((out / MANIFEST_NAME).read_text())
    raw["shards"][0]["bytes"] = len(framed)
    raw["shards"][0]["sha256"] = hashlib.sha256(framed.tobytes()).hexdigest()
    (out / MANIFEST_NAME).write_text(json.dumps(raw))


def _cols(m, records):
    blocks = [decode_block(r, m.schema, m.layout) for r in records]
    return {k: np.concatenate([b[k] for b in blocks]) for k in blocks[0]}


def _shifted_label(m, recs):      # label: 17 rows in block 1, 15 in block 2 (the others' 16 each)
    c = _cols(m, recs[1:3])
    one = {k: (v[:17] if k == "label" else v[:16]) for k, v in c.items()}
    two = {k: (v[17:] if k == "label" else v[16:]) for k, v in c.items()}
    return [recs[0], raw_block(one, m.schema, m.layout), raw_block(two, m.schema, m.layout), *recs[3:]], 1


def _big_block(m, recs):          # blocks 0-3 as one block of 64 rows (the rows add up)
    return [encode_block(_cols(m, recs[:4]), m.schema, m.layout), *recs[4:]], 0


def _short_middle(m, recs):       # block 2 left out: block 5 (the old last, 4 rows) stands where 16 are due
    return [*recs[:2], *recs[3:]], 5


def _one_block_short(m, recs):    # the last block left out: the shard ends a block early
    return recs[:-1], 6


def _extra_block(m, recs):        # a full block more than the manifest's rows make
    return [*recs[:-1], recs[0], recs[-1]], 6


def _truncated(m, recs):          # block 1 cut 10 bytes short (a fresh CRC)
    return [recs[0], recs[1][:-10], *recs[2:]], 1


def _huge_varint(m, recs):        # block 3's first column length: a ten-byte varint (-1 as protobuf writes it)
    bad = raw_block(decode_block(recs[3], m.schema, m.layout), m.schema, m.layout, varint(-1))
    return [*recs[:3], bad, *recs[4:]], 3


def _big_varint(m, recs):         # block 3's first column length: 2**40 (past the record's end)
    bad = raw_block(decode_block(recs[3], m.schema, m.layout), m.schema, m.layout, varint(1 << 40))
    return [*recs[:3], bad, *recs[4:]], 3


# a file smaller than one decode call may reach its end (and fail there: its block count) before the decode
COUNT = r"\d+ blocks, where the 100 rows in the manifest make 7 blocks"
LIES = {"shifted_label": (_shifted_label, "bytes, where a block of 16 rows"),
        "big_block": (_big_block, f"(bytes, where a block of 16 rows|{COUNT})"),
        "short_middle": (_short_middle, f"(bytes, where a block of 16 rows|{COUNT})"),
        "one_block_short": (_one_block_short, "6 blocks, where the 100 rows in the manifest make 7 blocks"),
        "extra_block": (_extra_block, f"(beyond the 7 blocks the 100 rows in the manifest make|where a block of 4 "
                                      f"rows|{COUNT})"),
        "truncated": (_truncated, "bytes, where a block of 16 rows"),
        "huge_varint": (_huge_varint, "bytes, where a block of 16 rows"),
        "big_varint": (_big_varint, "bytes, where a block of 16 rows")}


@pytest.mark.parametrize("resumable", [False, True])
@pytest.mark.parametrize("lie", sorted(LIES))
def test_a_lying_block_fails_the_read_naming_shard_and_block(cset, lie, resumable):
    import tensorflow as tf

    out, m = cset
    make, why = LIES[lie]
    payloads, block = make(m, list(read_records(out / m.shards[0].name)))
    block = 6 if lie == "extra_block" else block   # the full block where the 4-row last one is due
    _rewrite(out, m, payloads)
    spec = PipelineSpec.from_manifest(str(out), 8, resumable=resumable, shuffle_buffer=0)
    with pytest.raises(tf.errors.InvalidArgumentError) as err:
        labels_of(build_dataset(spec))
    msg = err.value.message
    assert re.search(rf"assertion failed: \[[^\]\n]*/{m.shards[0].name}: (block {block}: |\d+ blocks, )", msg), msg
    assert re.search(why, msg), msg
    assert "\n" not in msg.split("assertion failed: ")[1].split("]")[0]     # one line


@pytest.mark.parametrize("lie", ["one_block_short", "extra_block", "shifted_label"])
def test_a_lying_block_fails_every_rank_of_a_block_level_shard(cset, lie):
    """Ranks regroup blocks (the files' end markers checked and dropped first): each rank fails naming the shard."""
    import tensorflow as tf

    out, m = cset
    make, why = LIES[lie]
    payloads, block = make(m, list(read_records(out / m.shards[0].name)))
    _rewrite(out, m, payloads)
    for rank in (0, 1):
        spec = PipelineSpec.from_manifest(str(out), 8, num_shards=2, shard_index=rank, equal_steps=False)
        with pytest.raises(tf.errors.InvalidArgumentError) as err:
            labels_of(build_dataset(spec))
        assert re.search(rf"/{m.shards[0].name}: (block \d+: |\d+ blocks, )", err.value.message), err.value.message
        assert re.search(why, err.value.message), err.value.message


def test_the_ranks_of_a_block_level_shard_read_every_row_once(cset):
    out, _ = cset
    got = [labels_of(build_dataset(PipelineSpec.from_manifest(str(out), 8, num_shards=2, shard_index=i,
                                                              equal_steps=False))) for i in (0, 1)]
    assert sorted(got[0] + got[1]) == [float(i) for i in range(sum(SHARDS))]
    sizes = [BR] * 6 + [4] + [BR] * 3 + [12]          # the set's 11 blocks in manifest order: rank i takes i, i+2, ..
    assert [len(g) for g in got] == [sum(sizes[0::2]), sum(sizes[1::2])]


@pytest.mark.parametrize("resumable", [False, True])
def test_an_honest_set_reads_every_row_once(cset, resumable):
    out, _ = cset
    for shuffle in (0, 50):
        got = labels_of(build_dataset(PipelineSpec.from_manifest(str(out), 8, resumable=resumable,
                                                                 shuffle_buffer=shuffle, seed=1)))
        assert sorted(got) == [float(i) for i in range(sum(SHARDS))]


def test_the_template_is_the_encoded_block(cset):
    out, m = cset
    for rec in read_records(out / m.shards[0].name):
        t = block_template(m.schema, m.layout, len(decode_block(rec, m.schema, m.layout)["label"]))
        assert len(rec) == t.length
        assert all(rec[a:a + len(h)] == h for a, h in zip(t.header_at, t.headers))
        assert [rec[a:a + n] for a, n in zip(t.data_at, t.data_len)] == \
               [_column_bytes(f.name, decode_block(rec, m.schema, m.layout)[f.name],
                              m.layout.stored_type(f.name), f.width) for f in m.schema.features]


def _tagged(records, how):
    """Blocks without file identity tagged by ``tag_stream`` (chunks of 3), or by ``tag_chunks`` over chunks
    of uneven sizes (1, then 3s: a streamed file's blocks in chunks of their own)."""
    import tensorflow as tf

    from pipeline.graph.blockcheck import tag_chunks, tag_stream

    d = tf.data.Dataset.from_tensor_slices(records)
    return tag_stream(d, 3) if how == "stream" else tag_chunks(d.take(1).batch(1).concatenate(d.skip(1).batch(3)))


@pytest.mark.parametrize("how", ["stream", "chunks"])
@pytest.mark.parametrize("lie", ["shifted_label", "big_block"])
def test_a_read_without_file_identity_checks_each_block(cset, lie, how):
    """A streamed or piped read (no file numbers): each block's columns are checked once decoded, the block
    named by its index in the read however the blocks were chunked."""
    import tensorflow as tf

    from pipeline.graph.blockcheck import block_decoder

    out, m = cset
    payloads, block = LIES[lie][0](m, list(read_records(out / m.shards[0].name)))
    spec = PipelineSpec.from_manifest(str(out), 8)
    ds = _tagged(payloads, how).map(block_decoder(spec, None))
    with pytest.raises(tf.errors.InvalidArgumentError, match=rf"block {block} of the read: its columns"):
        list(ds)
    honest = list(read_records(out / m.shards[0].name))
    rows = list(_tagged(honest, how).map(block_decoder(spec, None)))
    assert np.concatenate([r["label"].numpy() for r in rows]).tolist() == list(range(SHARDS[0]))


@pytest.mark.parametrize("per", [1, 3, 8])
def test_a_files_chunks_decode_as_a_prefix_and_regrouped_chunks_by_their_rows(cset, per):
    """tag_file's chunks (one file's blocks in order, only its last block short) decode the same rows whether
    cut as a prefix (``regrouped=False``) or gathered; a chunk that regroups blocks of two files (file 0's
    short last block, then file 1's first) gives each block's rows when decoded as regrouped."""
    import tensorflow as tf

    from pipeline.graph.blockcheck import block_decoder, drop_ends, file_tables, tag_file

    out, _ = cset
    spec = PipelineSpec.from_manifest(str(out), 8)
    tables = file_tables(spec)

    def chunks(f):
        return tag_file(spec, tables, tf.constant(f, tf.int64), tf.data.TFRecordDataset(spec.files[f]), per)

    start = 0
    for f, rows in enumerate(SHARDS):
        got = {flag: np.concatenate([c["label"].numpy() for c in chunks(f).map(block_decoder(spec, tables, flag))])
               for flag in (False, True)}
        assert got[False].tolist() == got[True].tolist() == list(range(start, start + rows))
        start += rows
    both = drop_ends(spec, tables, chunks(0).concatenate(chunks(1))).unbatch()
    mixed = both.skip(6).take(2).batch(2)                 # file 0's block 6 (4 rows), file 1's block 0 (16)
    (cols,) = list(mixed.map(block_decoder(spec, tables, regrouped=True)))
    assert cols["label"].numpy().tolist() == list(range(96, 100)) + list(range(100, 116))
