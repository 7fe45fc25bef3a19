"""pipeline.graph.seeksource.records_from (where to enter: pipeline.resume.seek): the records of a TFRecord
file from record k, byte for byte those of ``TFRecordDataset(path).skip(k)``, reached by a seek
(TFRecordDatasetV2's byte offset) where it applies."""
from __future__ import annotations

import logging
import os
import time

import numpy as np
import pytest
import tensorflow as tf
from offsets_data import write_payloads, write_uniform

import pipeline.resume.seek as seek
from converters.util.errors import IntegrityError
from pipeline.resume.offsets import OFFSET_BYTES, TRAILER_BYTES, encode_index
from pipeline.graph.seeksource import records_from
from pipeline.resume.seek import has_seek_op


def listed(ds) -> list[bytes]:
    return [bytes(x) for x in ds.as_numpy_iterator()]


def skipped(path, k, ctype="") -> list[bytes]:
    return listed(tf.data.TFRecordDataset(str(path), ctype).skip(k))


def first(make) -> tuple[float, bytes]:
    """Seconds from building the dataset to its first element, and that element."""
    t = time.perf_counter()
    x = next(iter(make())).numpy()
    return time.perf_counter() - t, x


@pytest.fixture(scope="module")
def mixed(tmp_path_factory):
    """A file of 400 records of 0 ... 3,000 bytes, some empty, written by TensorFlow."""
    path = str(tmp_path_factory.mktemp("seek") / "mixed.tfrecord")
    rng = np.random.default_rng(7)
    with tf.io.TFRecordWriter(path) as w:
        for i in range(400):
            n = 0 if i % 37 == 0 else int(rng.integers(1, 3000))
            w.write(i.to_bytes(4, "little") * (n // 4) + b"\x01" * (n % 4))
    return path


def test_the_op_is_there():
    assert has_seek_op()      # this TensorFlow has it, so the tests below exercise the seek, not the fallback


@pytest.mark.parametrize("k", [0, 1, 2, 37, 199, 200, 398, 399, 400])
def test_the_records_from_k_are_those_of_skip(mixed, tmp_path, k):
    got = listed(records_from(mixed, k, records=400, index_dir=str(tmp_path)))
    assert got == skipped(mixed, k) and len(got) == 400 - k
    entries = list(tmp_path.iterdir())
    if k in (0, 400):
        assert entries == []            # nothing to seek: the file is read from its start, or not at all
    else:
        assert len(entries) == 1 and entries[0].stat().st_size == OFFSET_BYTES * 400 + TRAILER_BYTES


def test_without_a_count_past_the_end_is_empty(mixed, tmp_path):
    assert listed(records_from(mixed, 401, index_dir=str(tmp_path))) == [] == skipped(mixed, 401)
    assert listed(records_from(mixed, 400, index_dir=str(tmp_path))) == []
    assert listed(records_from(mixed, 399, index_dir=str(tmp_path))) == skipped(mixed, 399)


def test_records_of_zero_bytes_and_bigger_than_the_read_buffer(tmp_path):
    path = tmp_path / "big.tfrecord"
    payloads = [b"", b"a" * (9 << 20), b"", b"bc", b"d" * ((8 << 20) + 3), b"", b"e"]
    write_payloads(path, payloads)
    for k in range(len(payloads) + 1):
        for buf in (None, 1 << 16):
            got = listed(records_from(str(path), k, buffer_size=buf, index_dir=str(tmp_path / "c")))
            assert got == payloads[k:]
        assert got == skipped(path, k)


def test_a_second_file_through_a_pipeline_graph(mixed, tmp_path):
    """Inside another dataset's function (as the resumable graph builds it) and after a concatenate."""
    ds = records_from(mixed, 390, records=400, index_dir=str(tmp_path)).concatenate(
        tf.data.TFRecordDataset(mixed).take(2))
    assert listed(ds.batch(4).unbatch()) == skipped(mixed, 390) + skipped(mixed, 0)[:2]
    nested = tf.data.Dataset.range(2).flat_map(lambda i: records_from(mixed, 398, records=400,
                                                                        index_dir=str(tmp_path)))
    assert listed(nested) == skipped(mixed, 398) * 2


def test_a_damaged_header_is_a_clear_error(tmp_path):
    path = tmp_path / "bad.tfrecord"
    starts = write_payloads(path, [b"x" * 100] * 20)
    raw = bytearray(path.read_bytes())
    raw[starts[12]] ^= 0x04
    path.write_bytes(bytes(raw))
    with pytest.raises(IntegrityError, match=f"{path}: corrupt record header .* at byte {starts[12]}"):
        records_from(str(path), 5, index_dir=str(tmp_path / "c"))


@pytest.mark.parametrize("signed", [False, True])
@pytest.mark.parametrize("content", ["garbage", "other records"])
def test_a_wrong_cached_index_warns_and_the_records_are_right(mixed, tmp_path, caplog, content, signed):
    """Raw offsets (no trailer) or offsets signed with a valid trailer: caught when loaded (then walked again)
    or when checked against the file (then read through); the records are those of ``skip`` either way."""
    sha = "cd" * 32
    cache = tmp_path / "c"
    cache.mkdir()
    wrong = np.arange(400, dtype="<u8") * (7 if content == "garbage" else 1040)
    entry = cache / f"{sha}.offsets"
    entry.write_bytes(encode_index(str(entry), wrong, os.path.getsize(mixed)) if signed else wrong.tobytes())
    with caplog.at_level(logging.WARNING):
        got = listed(records_from(mixed, 250, records=400, sha256=sha, index_dir=str(cache)))
    assert got == skipped(mixed, 250)
    warned = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warned) == 1 and ("does not match the file" in warned[0] or "is not used" in warned[0]), warned


def test_a_cache_dir_that_cannot_be_written_works_and_warns_once(mixed, tmp_path, caplog):
    (tmp_path / "file").write_bytes(b"")
    cache = str(tmp_path / "file" / "offsets")
    with caplog.at_level(logging.WARNING):
        for k in (3, 200, 399):
            assert listed(records_from(mixed, k, records=400, index_dir=cache)) == skipped(mixed, k)
    warned = [r for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warned) == 1 and "cannot cache record-offset indexes" in warned[0].getMessage()


def test_a_read_only_cache_dir(mixed, tmp_path, mounted, caplog):
    cache = tmp_path / "ro"
    cache.mkdir()
    if os.geteuid() == 0:
        mounted(["-t", "tmpfs", "-o", "ro,size=1m", "tmpfs"], cache)    # (root writes through a chmod)
    else:
        cache.chmod(0o555)
    with caplog.at_level(logging.WARNING):
        for k in (100, 399):
            assert listed(records_from(mixed, k, records=400, index_dir=str(cache))) == skipped(mixed, k)
    assert list(cache.iterdir()) == []
    warned = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warned) == 1 and warned[0].startswith(f"cannot cache record-offset indexes in {cache}")


@pytest.mark.parametrize("ctype", ["GZIP", "ZLIB"])
def test_compressed_files_skip_through(tmp_path, ctype):
    path = str(tmp_path / f"z.{ctype}")
    payloads = [bytes([i]) * (i * 13) for i in range(60)]
    with tf.io.TFRecordWriter(path, tf.io.TFRecordOptions(compression_type=ctype)) as w:
        for p in payloads:
            w.write(p)
    for k in (0, 1, 30, 59, 60):
        assert listed(records_from(path, k, compression_type=ctype.lower(), records=60,
                                   index_dir=str(tmp_path / "c"))) == payloads[k:] == skipped(path, k, ctype)
    assert not (tmp_path / "c").exists()      # no index computed for compressed data


def test_without_the_op_it_skips_through(mixed, tmp_path, monkeypatch):
    monkeypatch.setattr(seek, "has_seek_op", lambda: False)    # as on a TensorFlow without TFRecordDatasetV2
    assert listed(records_from(mixed, 321, records=400, index_dir=str(tmp_path))) == skipped(mixed, 321)
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("kwargs,msg", [
    ({"k": -1}, "k must be a record number >= 0"),
    ({"k": 401, "records": 400}, "k=401 is past the end of .* which has 400 records"),
    ({"k": 1, "compression_type": "bz2"}, "compression_type must be"),
    ({"k": 1, "buffer_size": -5}, "buffer_size must be bytes >= 0"),
    ({"k": 1, "records": -2}, "records must be the file's record count"),
])
def test_bad_arguments(mixed, kwargs, msg):
    with pytest.raises(ValueError, match=msg):
        records_from(mixed, **kwargs)


def read_bytes() -> int:
    """Bytes this process has read so far (``rchar``: every read and pread, page cache included)."""
    with open("/proc/self/io") as f:
        return next(int(line.split()[1]) for line in f if line.startswith("rchar:"))


def phases(make) -> tuple[float, float, int, bytes]:
    """(seconds to build the dataset and its iterator, seconds of the first ``next``, bytes read, the element)."""
    b, t0 = read_bytes(), time.perf_counter()
    it = iter(make())
    t1 = time.perf_counter()
    x = next(it).numpy()
    t2 = time.perf_counter()
    return t1 - t0, t2 - t1, read_bytes() - b, x


@pytest.mark.skipif(not os.path.exists("/proc/self/io"), reason="counts bytes read in /proc/self/io (Linux)")
def test_the_seek_is_faster_than_reading_through(tmp_path, capsys):
    """~200 MB of 1 KiB records entered at 99 %, against the same run's ``skip`` and fresh start: with a warm
    index the first record costs about what a fresh start's does, whatever the position; ``skip`` reads
    everything before it. Timed as the best of 5 rounds (the machine is shared); the bytes read are the
    load-free check. The whole first element (dataset, iterator and first ``next``) is printed, not asserted:
    on a fast page cache it is mostly the dataset's build and the iterator's start-up, which swing with the
    host's load more than the read they wrap."""
    path = tmp_path / "big.tfrecord"
    n, k = 195_000, 193_050
    write_uniform(path, n, 1024)
    try:
        cache = str(tmp_path / "c")
        t = time.perf_counter()
        x = next(iter(records_from(str(path), k, records=n, index_dir=cache))).numpy()     # builds the index
        cold = time.perf_counter() - t
        assert int.from_bytes(x[:8], "little") == k
        runs = {"seek": [], "skip": [], "fresh": []}
        for _ in range(5):
            runs["seek"].append(phases(lambda: records_from(str(path), k, records=n, index_dir=cache)))
            runs["skip"].append(phases(lambda: tf.data.TFRecordDataset(str(path)).skip(k)))
            runs["fresh"].append(phases(lambda: tf.data.TFRecordDataset(str(path))))
        assert {r[3] for r in runs["seek"] + runs["skip"]} == {x}
        best = {name: (min(r[0] + r[1] for r in rs), min(r[1] for r in rs), min(r[2] for r in rs))
                for name, rs in runs.items()}
        with capsys.disabled():
            print(f"\n  enter at 99 % of {n:,} 1 KiB records (first element; build+iterator / first next / MB read): "
                  + ", ".join(f"{name} {b[0]:.3f} / {b[1]:.4f} s / {b[2] / 1e6:.1f} MB" for name, b in best.items())
                  + f"; first call with the index built: {cold:.3f} s")
        size = os.path.getsize(path)
        assert best["skip"][2] > 0.9 * size and best["seek"][2] < 0.1 * size     # the op seeks
        assert best["seek"][1] * 5 < best["skip"][1], runs                       # the read work: several times less
    finally:
        path.unlink()


def test_an_unreadable_file_is_left_to_tensorflow(tmp_path, caplog):
    """No index can be made: one warning, and TensorFlow reports the missing file when the records are read."""
    missing = str(tmp_path / "gone.tfrecord")
    with caplog.at_level(logging.WARNING):
        ds = records_from(missing, 3, index_dir=str(tmp_path / "c"))
    assert "cannot index the record offsets of" in caplog.text
    with pytest.raises(tf.errors.NotFoundError):
        listed(ds)


def test_a_misspelled_keyword_is_a_type_error(mixed, tmp_path):
    for wrong in ("cache_dir", "cache_dri"):      # index_dir= is the one name of the index directory
        with pytest.raises(TypeError, match=repr(wrong)):
            records_from(mixed, 250, **{wrong: str(tmp_path)})
