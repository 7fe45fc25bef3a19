"""shardset.shardfile: a shard handed to the disk as it is written holds the same bytes and hash."""
import gzip
import hashlib
import os
import sys

import numpy as np
import pytest

from converters.shardset import shardfile
from converters.shardset.shardfile import ShardStream
from converters.util.fs import HashingWriter, create_new, start_writeback

linux = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="sync_file_range is Linux's")


@linux
def test_start_writeback_on_a_file_and_not_on_a_pipe(tmp_path):
    with open(tmp_path / "f", "wb") as f:
        f.write(b"x" * 100_000)
        f.flush()
        assert start_writeback(f.fileno(), 0, 100_000) is True
    r, w = os.pipe()
    try:
        assert start_writeback(w, 0, 10) is False       # ESPIPE: nothing done, no error
    finally:
        os.close(r)
        os.close(w)


@pytest.mark.parametrize("compression", [None, "GZIP"])
@pytest.mark.parametrize("handed", [1 << 10, 1 << 40])   # every KiB handed to the disk, or never
def test_a_shard_handed_to_the_disk_as_written_is_the_same(tmp_path, monkeypatch, compression, handed):
    monkeypatch.setattr(shardfile, "WRITEBACK_BYTES", handed)
    chunks = [bytes([k % 251]) * (3_000 + 17 * k) for k in range(40)]
    path = tmp_path / "s.tfrecord"
    s = ShardStream(create_new(str(path)), compression)
    for k, c in enumerate(chunks):
        s.write(c)
        if k == 20:                                  # a shard whose descriptor is closed and reopened midway
            s.suspend()
            s.resume(str(path))
    s.close()
    data = path.read_bytes()
    assert (gzip.decompress(data) if compression else data) == b"".join(chunks)
    assert s.nbytes == len(data) and s.sha256 == hashlib.sha256(data).hexdigest()


@pytest.mark.parametrize("size", [HashingWriter.PIECE_BYTES - 1, HashingWriter.PIECE_BYTES,
                                  3 * HashingWriter.PIECE_BYTES + 7])
def test_a_large_write_is_hashed_and_written_in_pieces_as_one(tmp_path, size):
    data = np.random.default_rng(size).integers(0, 256, size, dtype=np.uint8)
    with open(tmp_path / "f", "wb") as raw:
        w = HashingWriter(raw)
        assert w.write(data) == size
        assert w.write(b"tail") == 4
    written = (tmp_path / "f").read_bytes()
    assert written == data.tobytes() + b"tail"
    assert w.nbytes == len(written) and w.sha.hexdigest() == hashlib.sha256(written).hexdigest()
