import os
import re
import shutil

import pytest

from converters.libsvm.synthetic import write_criteo_shards
from converters.shardset.verify import verify
from converters.util.errors import IntegrityError


@pytest.fixture()
def shard_set(tmp_path):
    out = tmp_path / "set"
    m = write_criteo_shards(str(out), 300, shard_bytes=30_000)
    return out, m


def test_clean_set_verifies(shard_set):
    out, m = shard_set
    r = verify(str(out))
    assert r.ok and r.records == m.records and r.shards == len(m.shards)


def _truncate_at_record_boundary(path, keep_records):
    data = path.read_bytes()
    pos = 0
    for _ in range(keep_records):
        pos += int.from_bytes(data[pos:pos + 8], "little") + 16
    path.write_bytes(data[:pos])
    return pos


def test_truncated_at_record_boundary_caught_by_count(shard_set):
    import tensorflow as tf

    out, m = shard_set
    shard = out / m.shards[1].name
    end = _truncate_at_record_boundary(shard, m.shards[1].records - 2)
    assert sum(1 for _ in tf.data.TFRecordDataset(str(shard))) == m.shards[1].records - 2  # TF sees no error
    with pytest.raises(IntegrityError, match=rf"{m.shards[1].name}: {m.shards[1].records - 2} records read, "
                                             rf"manifest says {m.shards[1].records}.*byte {end}"):
        verify(str(out))


@pytest.mark.parametrize("offset,what", [(3, "header"), (20, "data"), (-2, "data")])
def test_flipped_byte_named_with_offset(shard_set, offset, what):
    out, m = shard_set
    shard = out / m.shards[0].name
    data = bytearray(shard.read_bytes())
    data[offset] ^= 0x40
    shard.write_bytes(bytes(data))
    with pytest.raises(IntegrityError, match=rf"{m.shards[0].name}: corrupt record {what}.*at byte \d+"):
        verify(str(out))


def test_truncated_inside_record(shard_set):
    out, m = shard_set
    shard = out / m.shards[0].name
    shard.write_bytes(shard.read_bytes()[:-5])
    with pytest.raises(IntegrityError, match="truncated record"):
        verify(str(out))


def test_missing_and_all_problems_listed(shard_set):
    out, m = shard_set
    (out / m.shards[0].name).unlink()
    shutil.copy(out / m.shards[2].name, out / m.shards[1].name)
    r = verify(str(out), raise_on_error=False)
    assert len(r.problems) == 2
    assert "missing" in r.problems[0]


def test_gzip_damage(tmp_path):
    out = tmp_path / "gz"
    m = write_criteo_shards(str(out), 200, shard_bytes=30_000, compression="gzip")
    assert verify(str(out)).ok
    shard = out / m.shards[0].name
    data = bytearray(shard.read_bytes())
    data[len(data) // 2] ^= 0xFF
    shard.write_bytes(bytes(data))
    with pytest.raises(IntegrityError, match=m.shards[0].name):
        verify(str(out))


@pytest.mark.parametrize("compression,claim,match", [
    (None, "gzip", "the manifest says gzip but the shard is not gzip-compressed"),
    ("gzip", None, "the shard is gzip-compressed but the manifest says uncompressed"),
])
def test_compression_checked_by_content(tmp_path, compression, claim, match):
    import json

    out = tmp_path / "s"
    write_criteo_shards(str(out), 100, shard_bytes=10_000, compression=compression)
    data = json.loads((out / "index.json").read_text())
    data["compression"] = claim
    (out / "index.json").write_text(json.dumps(data))
    with pytest.raises(IntegrityError, match=match):
        verify(str(out))


@pytest.mark.parametrize("make,match", [
    (lambda p, outside: p.symlink_to(outside), r"is a symbolic link; a shard set holds its own files"),
    (lambda p, outside: os.mkfifo(p), r"is a FIFO \(named pipe\), not a regular file"),
])
def test_a_shard_that_is_not_a_regular_file_of_the_set(shard_set, tmp_path, make, match):
    out, m = shard_set
    first = out / m.shards[0].name
    outside = tmp_path / "outside.tfrecord"
    shutil.copy(first, outside)  # the very bytes: only where it lives is wrong
    first.unlink()
    make(first, outside)
    r = verify(str(out), raise_on_error=False)
    assert [p for p in r.problems if re.search(match, p) and m.shards[0].name in p], r.problems


@pytest.mark.parametrize("all_flag", [False, True])
def test_cli_reports_each_problem_once(shard_set, all_flag):
    """``tfpipe verify`` names a problem once on stderr (not a log warning and then the FAIL/error line)."""
    import subprocess
    import sys

    out, m = shard_set
    first = out / m.shards[0].name
    first.write_bytes(first.read_bytes()[:-3])
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    r = subprocess.run([sys.executable, "-m", "converters.cli", "verify", str(out), "--no-progress",
                        *(["--all"] if all_flag else [])], capture_output=True, text=True, timeout=300,
                       env={**os.environ, "PYTHONPATH": root})
    assert r.returncode == 4, r.stderr
    mentions = [ln for ln in r.stderr.splitlines() if m.shards[0].name in ln]
    assert len(mentions) == 1, r.stderr
    assert "WARNING" not in r.stderr and "Traceback" not in r.stderr
