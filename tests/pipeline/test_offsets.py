"""pipeline.resume.offsets (the record-offset index: walk, cache, checks), pipeline.resume.precompute and
``tfpipe pipeline offsets SET``."""
from __future__ import annotations

import json
import logging
import os

import numpy as np
import pytest
from offsets_data import write_payloads, write_uniform
from pipeline_data import write_indexed_set

from converters.cli import main
from converters.tfrecord.crc import masked_crc32c
from converters.util.errors import IntegrityError
from pipeline.resume.offsets import (OFFSET_BYTES, compute_offsets, ensure_index, index_path, masked_length_crc,
                                     offset_of)
from pipeline.resume.precompute import index_offsets

SHA = "ab" * 32


@pytest.mark.parametrize("length", [0, 1, 255, 256, 65535, 8 << 20, 2 ** 40 + 7, 2 ** 64 - 1])
def test_plain_crc_equals_the_kernel(length):
    raw = length.to_bytes(8, "little")
    assert masked_length_crc(raw) == masked_crc32c(raw)


@pytest.mark.parametrize("sizes", [
    [],
    [0],
    [0, 0, 0],
    [5, 0, 100, 3],
    [9 << 20, 0, 3, (8 << 20) + 1, 0],          # records bigger than TensorFlow's 8 MiB read buffer
    [1000] * 257,
])
def test_offsets_are_where_the_records_start(tmp_path, sizes):
    path = tmp_path / "a.tfrecord"
    starts = write_payloads(path, [bytes([i % 251]) * n for i, n in enumerate(sizes)])
    got = compute_offsets(str(path))
    assert got.dtype == np.dtype("<u8") and got.tolist() == starts


def test_offsets_of_a_file_tensorflow_wrote(tmp_path):
    import tensorflow as tf

    path = str(tmp_path / "tf.tfrecord")
    payloads = [b"x" * n for n in (3, 0, 70000, 12)]
    with tf.io.TFRecordWriter(path) as w:
        for p in payloads:
            w.write(p)
    assert compute_offsets(path).tolist() == [0, 19, 35, 70051]


@pytest.mark.parametrize("damage,reason,record", [
    ("length", "corrupt record header (length CRC mismatch", 3),
    ("crc", "corrupt record header (length CRC mismatch", 5),
    ("truncate", "truncated record (the file ends inside it)", 9),
    ("tail", "truncated record (the file ends inside it)", 10),
])
def test_a_damaged_file_is_named_with_the_byte_offset(tmp_path, damage, reason, record):
    path = tmp_path / "bad.tfrecord"
    starts = write_payloads(path, [b"r" * 40] * 10)
    raw = bytearray(path.read_bytes())
    at = starts[record] if record < 10 else len(raw)
    if damage == "length":
        raw[at + 2] ^= 0x01
    elif damage == "crc":
        raw[at + 9] ^= 0x80
    elif damage == "truncate":
        raw = raw[:-3]
    else:
        raw += b"\x00" * 7      # a partial header after the last record
    path.write_bytes(bytes(raw))
    with pytest.raises(IntegrityError) as e:
        compute_offsets(str(path))
    assert str(e.value) == f"{path}: {e.value.reason} at byte {at}"
    assert e.value.reason.startswith(reason) and e.value.offset == at


def test_a_gzip_file_is_no_uncompressed_tfrecord(tmp_path):
    import tensorflow as tf

    path = str(tmp_path / "z.tfrecord.gz")
    with tf.io.TFRecordWriter(path, tf.io.TFRecordOptions(compression_type="GZIP")) as w:
        w.write(b"abc")
    with pytest.raises(IntegrityError, match="at byte 0"):
        compute_offsets(path)


def test_cached_once_then_read_back(tmp_path):
    path = tmp_path / "a.tfrecord"
    write_uniform(path, 300, 50)
    cache = tmp_path / "cache"
    first = ensure_index(str(path), records=300, sha256=SHA, directory=str(cache))
    assert first.status == "indexed" and first.cache_path == str(cache / f"{SHA}.offsets")
    stored = (cache / f"{SHA}.offsets").read_bytes()
    assert len(stored) == OFFSET_BYTES * 300 and stored == compute_offsets(str(path)).tobytes()
    assert [p.name for p in cache.iterdir()] == [f"{SHA}.offsets"]       # no temporary left behind
    again = ensure_index(str(path), records=300, sha256=SHA, directory=str(cache))
    assert again.status == "cached" and again.records == 300 and again.offsets is None
    assert offset_of(str(path), 123, records=300, sha256=SHA, directory=str(cache)) == 123 * 66
    assert offset_of(str(path), 300, records=300, sha256=SHA, directory=str(cache)) == 300 * 66


def test_the_key_without_a_digest_follows_the_file(tmp_path):
    path = tmp_path / "a.tfrecord"
    write_uniform(path, 10, 20)
    first = index_path(str(path), directory=str(tmp_path))
    os.utime(path, ns=(1, 1))
    assert index_path(str(path), directory=str(tmp_path)) != first


@pytest.mark.parametrize("bad", ["wrong size", "a link", "a directory"])
def test_an_unusable_cache_entry_is_recomputed(tmp_path, bad):
    path = tmp_path / "a.tfrecord"
    write_uniform(path, 40, 30)
    cache = tmp_path / "cache"
    cache.mkdir()
    entry = cache / f"{SHA}.offsets"
    if bad == "wrong size":
        entry.write_bytes(b"\0" * (OFFSET_BYTES * 39))
    elif bad == "a link":
        (tmp_path / "elsewhere").write_bytes(compute_offsets(str(path)).tobytes())
        entry.symlink_to(tmp_path / "elsewhere")
    else:
        entry.mkdir()
    res = ensure_index(str(path), records=40, sha256=SHA, directory=str(cache))
    assert res.status in ("indexed", "uncached") and res.offsets.tolist() == [46 * i for i in range(40)]
    assert offset_of(str(path), 39, records=40, sha256=SHA, directory=str(cache)) == 46 * 39


@pytest.mark.parametrize("content", ["zeros", "shifted", "other file"])
def test_a_wrong_index_of_the_right_size_is_caught(tmp_path, caplog, content):
    path = tmp_path / "a.tfrecord"
    write_uniform(path, 50, 30)
    cache = tmp_path / "cache"
    cache.mkdir()
    good = compute_offsets(str(path))
    wrong = {"zeros": np.zeros(50, "<u8"), "shifted": good + 46,
             "other file": np.arange(50, dtype="<u8") * 40}[content]
    (cache / f"{SHA}.offsets").write_bytes(wrong.tobytes())
    with caplog.at_level(logging.WARNING, logger="pipeline.resume.offsets"):
        assert offset_of(str(path), 20, records=50, sha256=SHA, directory=str(cache)) is None
    warned = [r for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warned) == 1 and "does not match the file" in warned[0].getMessage()
    assert not (cache / f"{SHA}.offsets").exists()          # removed: the next use computes it again
    assert offset_of(str(path), 20, records=50, sha256=SHA, directory=str(cache)) == 20 * 46


def test_a_stale_index_of_a_rewritten_file_is_caught(tmp_path, caplog):
    path = tmp_path / "a.tfrecord"
    write_uniform(path, 60, 34)          # 60 records of 50 bytes framed
    st = os.stat(path)
    cache = str(tmp_path / "cache")
    assert offset_of(str(path), 30, directory=cache) == 30 * 50
    write_payloads(path, [b"q" * 30] * 30 + [b"w" * 38] * 30)     # same size and count, other records
    os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns))          # and the same mtime: the key cannot tell
    assert os.path.getsize(path) == st.st_size
    with caplog.at_level(logging.WARNING, logger="pipeline.resume.offsets"):
        assert offset_of(str(path), 30, directory=cache) is None
    assert sum(r.levelno == logging.WARNING for r in caplog.records) == 1


def test_an_unwritable_cache_dir_means_no_caching_and_one_warning(tmp_path, caplog):
    path = tmp_path / "a.tfrecord"
    write_uniform(path, 40, 30)
    (tmp_path / "plain-file").write_bytes(b"")
    cache = str(tmp_path / "plain-file" / "offsets")            # cannot be made, even by root
    with caplog.at_level(logging.WARNING, logger="pipeline.resume.offsets"):
        for k in (1, 17, 39):
            assert offset_of(str(path), k, records=40, directory=cache) == 46 * k
        assert ensure_index(str(path), records=40, directory=cache).status == "uncached"
    warned = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warned) == 1 and warned[0].startswith(f"cannot cache record-offset indexes in {cache}")


def test_a_count_other_than_the_manifests_is_not_cached(tmp_path, caplog):
    path = tmp_path / "a.tfrecord"
    write_uniform(path, 10, 30)
    with caplog.at_level(logging.WARNING, logger="pipeline.resume.offsets"):
        res = ensure_index(str(path), records=11, sha256=SHA, directory=str(tmp_path / "c"))
    assert res.status == "uncached" and res.records == 10 and not (tmp_path / "c").exists()
    assert "has 10 records, its manifest says 11" in caplog.text


@pytest.mark.parametrize("kwargs,msg", [({"sha256": "ABC"}, "64 lowercase hex"), ({"records": -1}, "count >= 0")])
def test_bad_arguments(tmp_path, kwargs, msg):
    path = tmp_path / "a.tfrecord"
    write_uniform(path, 3, 10)
    with pytest.raises(ValueError, match=msg):
        ensure_index(str(path), directory=str(tmp_path), **kwargs)


def test_index_a_set_then_everything_is_cached(tmp_path):
    m = write_indexed_set(tmp_path / "set", 3000, shard_bytes=16 << 10)
    cache = str(tmp_path / "cache")
    r1 = index_offsets(str(tmp_path / "set"), workers=2, directory=cache)
    assert (r1.shards, r1.indexed, r1.cached, r1.records) == (len(m.shards), len(m.shards), 0, 3000)
    assert sorted(os.listdir(cache)) == sorted(f"{s.sha256}.offsets" for s in m.shards)
    r2 = index_offsets(str(tmp_path / "set"), directory=cache)
    assert (r2.indexed, r2.cached, r2.index_bytes) == (0, len(m.shards), 8 * 3000)


def test_cli_offsets(tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("TFPIPE_CACHE", str(tmp_path / "cache"))
    m = write_indexed_set(tmp_path / "set", 800, shard_bytes=8 << 10)
    n = len(m.shards)
    assert main(["pipeline", "offsets", str(tmp_path / "set"), "--workers", "2", "--no-progress"]) == 0
    out = capsys.readouterr().out
    assert f"{n} indexed, 0 already cached" in out and str(tmp_path / "cache" / "offsets") in out
    assert main(["pipeline", "offsets", str(tmp_path / "set"), "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert (doc["indexed"], doc["cached"], doc["gzip"], doc["records"]) == (0, n, 0, 800)


def test_cli_offsets_of_a_gzip_set(tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("TFPIPE_CACHE", str(tmp_path / "cache"))
    m = write_indexed_set(tmp_path / "set", 300, shard_bytes=4 << 10, compression="gzip")
    assert main(["pipeline", "offsets", str(tmp_path / "set"), "--no-progress"]) == 0
    out = capsys.readouterr().out
    assert f"{len(m.shards)} shard(s) not indexed (gzip: a resume skips through them)" in out
    assert not (tmp_path / "cache" / "offsets").exists()


def test_cli_offsets_of_a_damaged_set(tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("TFPIPE_CACHE", str(tmp_path / "cache"))
    m = write_indexed_set(tmp_path / "set", 300, shard_bytes=4 << 10)
    shard = tmp_path / "set" / m.shards[1].name
    raw = bytearray(shard.read_bytes())
    raw[0] ^= 1
    shard.write_bytes(bytes(raw))
    assert main(["pipeline", "offsets", str(tmp_path / "set"), "--no-progress"]) == 4
    err = capsys.readouterr().err
    assert f"{shard}: corrupt record header (length CRC mismatch" in err and "at byte 0" in err


def test_cli_offsets_of_a_remote_set_is_refused(capsys):
    assert main(["pipeline", "offsets", "s3://bucket/set", "--no-progress"]) == 1
    assert "record offsets are indexed for the files of a local set" in capsys.readouterr().err
