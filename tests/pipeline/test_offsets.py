"""pipeline.resume.offsets (the record-offset index: walk, cache, checks), pipeline.resume.setoffsets and
``tfpipe pipeline offsets SET``."""
from __future__ import annotations

import json
import logging
import os

import numpy as np
import pytest
from offsets_data import TAMPERINGS, tampered, write_payloads, write_uniform
from pipeline_data import write_indexed_set

from converters.cli import main
from converters.tfrecord.crc import masked_crc32c
from converters.util.errors import IntegrityError
from pipeline.resume.offsets import (OFFSET_BYTES, TRAILER_BYTES, compute_offsets, encode_index, ensure_index, index_path,
                              masked_length_crc, offset_of)
from pipeline.resume.setoffsets import index_offsets

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
    assert len(stored) == OFFSET_BYTES * 300 + TRAILER_BYTES
    assert stored[:OFFSET_BYTES * 300] == compute_offsets(str(path)).tobytes()
    assert [p.name for p in cache.iterdir()] == [f"{SHA}.offsets"]       # no temporary left behind
    again = ensure_index(str(path), records=300, sha256=SHA, directory=str(cache))
    assert again.status == "cached" and again.records == 300 and again.offsets.tolist() == first.offsets.tolist()
    assert offset_of(str(path), 123, records=300, sha256=SHA, directory=str(cache)) == 123 * 66
    assert offset_of(str(path), 300, records=300, sha256=SHA, directory=str(cache)) == 300 * 66


def test_the_key_without_a_digest_follows_the_file(tmp_path):
    path = tmp_path / "a.tfrecord"
    write_uniform(path, 10, 20)
    first = index_path(str(path), directory=str(tmp_path))
    os.utime(path, ns=(1, 1))
    assert index_path(str(path), directory=str(tmp_path)) != first


@pytest.mark.parametrize("bad", ["wrong size", "a link", "a directory", "a FIFO", "a link to /dev/zero"])
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
    elif bad == "a FIFO":
        os.mkfifo(entry)
    elif bad == "a link to /dev/zero":
        entry.symlink_to("/dev/zero")
    else:
        entry.mkdir()
    res = ensure_index(str(path), records=40, sha256=SHA, directory=str(cache))
    assert res.status in ("indexed", "uncached") and res.offsets.tolist() == [46 * i for i in range(40)]
    assert offset_of(str(path), 39, records=40, sha256=SHA, directory=str(cache)) == 46 * 39


@pytest.mark.parametrize("signed", [False, True], ids=["raw", "re-signed"])
@pytest.mark.parametrize("how", TAMPERINGS)
def test_a_tampered_index_is_never_used_for_a_wrong_offset(tmp_path, caplog, how, signed):
    """The cache entry's offsets tampered with, either as raw bytes (its checksum then fails) or rewritten
    with a valid trailer (count, size, checksum): it is caught when loaded (walked again: the right offset at
    once) or when checked against the file (None: the caller reads through). Never a wrong offset; one
    warning; the next use has the right index."""
    path = tmp_path / "a.tfrecord"
    write_uniform(path, 50, 30)
    cache = tmp_path / "cache"
    good = ensure_index(str(path), records=50, sha256=SHA, directory=str(cache)).offsets.copy()
    entry = cache / f"{SHA}.offsets"
    wrong = tampered(good, how)
    if signed:
        entry.write_bytes(encode_index(str(entry), wrong, os.path.getsize(path)))
    else:
        entry.write_bytes(wrong.tobytes() + entry.read_bytes()[-TRAILER_BYTES:])    # the old trailer kept
    with caplog.at_level(logging.WARNING, logger="pipeline.resume.offsets"):
        got = offset_of(str(path), 20, records=50, sha256=SHA, directory=str(cache))
    assert got in (20 * 46, None)
    if not signed:
        assert got == 20 * 46               # the checksum fails: walked again at once
    warned = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warned) == 1 and ("is not used" in warned[0] or "does not match the file" in warned[0]), warned
    assert offset_of(str(path), 20, records=50, sha256=SHA, directory=str(cache)) == 20 * 46
    again = ensure_index(str(path), records=50, sha256=SHA, directory=str(cache))
    assert again.status == "cached" and again.offsets.tolist() == good.tolist()


@pytest.mark.parametrize("how", ["old format", "trailer cut", "key moved", "other size"])
def test_an_index_that_is_not_this_shards_is_walked_again(tmp_path, caplog, how):
    """An index without its trailer (an older tfpipe's), cut inside the trailer, copied from another key or
    made for a file of another size: one warning naming the entry and why, then the file is walked again."""
    path = tmp_path / "a.tfrecord"
    write_uniform(path, 50, 30)
    cache = tmp_path / "cache"
    good = compute_offsets(str(path))
    entry = cache / f"{SHA}.offsets"
    cache.mkdir()
    data = {"old format": good.tobytes(),
            "trailer cut": encode_index(str(entry), good, os.path.getsize(path))[:-1],
            "key moved": encode_index(str(cache / f"{'ef' * 32}.offsets"), good, os.path.getsize(path)),
            "other size": encode_index(str(entry), good, os.path.getsize(path) + 46)}[how]
    entry.write_bytes(data)
    with caplog.at_level(logging.WARNING, logger="pipeline.resume.offsets"):
        res = ensure_index(str(path), records=50, sha256=SHA, directory=str(cache))
    assert res.status == "indexed" and res.offsets.tolist() == good.tolist()
    warned = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warned) == 1 and warned[0].startswith(f"the record-offset index {entry} of {path} is not used: ")
    assert entry.read_bytes() == encode_index(str(entry), good, os.path.getsize(path))


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


def _spoil(shard, how: str) -> str:
    """Make the shard file ``shard`` bad as ``how`` says; returns what the line naming it must say."""
    if how == "damaged":
        raw = bytearray(shard.read_bytes())
        raw[0] ^= 1
        shard.write_bytes(bytes(raw))
        return "corrupt record header (length CRC mismatch"
    if how == "truncated":                       # cut at a record boundary: the walk alone would not see it
        last = int(compute_offsets(str(shard))[-1])
        os.truncate(shard, last)
        return f"{last} bytes, its manifest says"
    shard.unlink()
    if how == "fifo":
        os.mkfifo(shard)
        return "is a FIFO (named pipe), not a regular file"
    if how == "directory":
        shard.mkdir()
        return "is a directory, not a regular file"
    if how == "link to /dev/zero":
        shard.symlink_to("/dev/zero")
        return "is a symbolic link"
    if how == "character device":
        try:
            os.mknod(shard, 0o644 | __import__("stat").S_IFCHR, os.makedev(1, 5))      # a copy of /dev/zero
        except PermissionError:
            pytest.skip("mknod is not allowed here")
        return "is a character device, not a regular file"
    return "missing (listed in the manifest)"


@pytest.mark.parametrize("how, warm", [
    ("fifo", False), ("fifo", True), ("truncated", False), ("truncated", True), ("directory", True),
    ("link to /dev/zero", True), ("character device", True), ("missing", True), ("damaged", False),
])
def test_cli_offsets_names_each_bad_shard_in_one_line(tmp_path, how, warm):
    """A FIFO shard (which hung the command for good), a shard cut at a record boundary, a directory, a link to
    /dev/zero or a copy of it, a missing or damaged shard, with the set's indexes already cached or not: the
    command (a real process) ends within a minute, one line names the shard and what is wrong with it, the
    error line says how many were left out, nothing says "already cached", and the other shards are cached."""
    from hostile import run_cli

    cache = tmp_path / "cache"
    m = write_indexed_set(tmp_path / "set", 300, shard_bytes=4 << 10)
    argv = ["pipeline", "offsets", str(tmp_path / "set"), "--no-progress"]
    if warm:
        assert run_cli(argv, env={"TFPIPE_CACHE": str(cache)}).rc == 0
    shard = tmp_path / "set" / m.shards[1].name
    reason = _spoil(shard, how)
    r = run_cli(argv, env={"TFPIPE_CACHE": str(cache)}, timeout=60)
    assert r.rc == 4 and "Traceback" not in r.err, r.err
    naming = [ln for ln in r.err.splitlines() if str(shard) in ln]
    assert len(naming) == 1 and naming[0].startswith("WARNING") and reason in naming[0], r.err
    assert r.error_lines == [f"tfpipe: error: {tmp_path / 'set'}: 1 of {len(m.shards)} shard(s) not indexed "
                             "(each named above; tfpipe verify checks the set)"]
    assert "already cached" not in r.out
    others = {f"{s.sha256}.offsets" for s in m.shards if s.name != shard.name}
    assert others <= set(os.listdir(cache / "offsets"))


def test_a_fifo_in_the_offsets_cache_is_replaced_not_read(tmp_path):
    """A FIFO where a shard's index belongs (it hung the command): one warning naming the entry, the shard is
    walked and its index written over the FIFO; a process, ended within a minute."""
    from hostile import run_cli

    cache = tmp_path / "cache"
    m = write_indexed_set(tmp_path / "set", 300, shard_bytes=4 << 10)
    (cache / "offsets").mkdir(parents=True)
    entry = cache / "offsets" / f"{m.shards[0].sha256}.offsets"
    os.mkfifo(entry)
    r = run_cli(["pipeline", "offsets", str(tmp_path / "set"), "--no-progress"], env={"TFPIPE_CACHE": str(cache)},
                timeout=60)
    assert r.rc == 0, r.err
    warned = [ln for ln in r.err.splitlines() if ln.startswith("WARNING")]
    assert len(warned) == 1 and f"{entry} of " in warned[0], r.err
    assert "is not used: it is a FIFO (named pipe), not a regular file" in warned[0]
    assert f"{len(m.shards)} indexed, 0 already cached" in r.out
    assert entry.is_file() and not entry.is_symlink()
    assert ensure_index(str(tmp_path / "set" / m.shards[0].name), records=m.shards[0].records,
                        sha256=m.shards[0].sha256, directory=str(cache / "offsets")).status == "cached"


def test_cli_offsets_of_a_remote_set_is_refused(capsys):
    assert main(["pipeline", "offsets", "s3://bucket/set", "--no-progress"]) == 1
    assert "record offsets are indexed for the files of a local set" in capsys.readouterr().err
