"""The CRC-checked TFRecord reader (``converters.tfrecord.reader``) against hostile files:
compression is decided by the framing (a plain file whose first record is 35,615 bytes starts with ``1f 8b``);
a record header that claims more than the stream can hold, or 2^40 bytes in a gzip bomb, is refused at once,
by name, byte offset and claimed length — for ``index``, ``verify`` and ``reshard`` alike."""
from __future__ import annotations

import gzip
import resource
import struct
import zlib

import pytest
from hostile import check_one_line_error, run_cli

from converters.tfrecord.crc import masked_crc32c
from converters.tfrecord.reader import (MAX_RECORD_BYTES, gzip_head, is_gzip, iter_framed, read_records,
                                        scan_file)
from converters.util.errors import IntegrityError


def frame(payload: bytes) -> bytes:
    head = struct.pack("<Q", len(payload))
    return head + struct.pack("<I", masked_crc32c(head)) + payload + struct.pack("<I", masked_crc32c(payload))


def _varint(n: int) -> bytes:
    out = bytearray()
    while True:
        out.append((n & 0x7F) | (0x80 if n > 0x7F else 0))
        n >>= 7
        if not n:
            return bytes(out)


def _field(tag: int, body: bytes) -> bytes:
    return bytes([tag]) + _varint(len(body)) + body


def example(blob: bytes, label: float) -> bytes:
    """A tf.train.Example with ``data`` (one bytes value) and ``label`` (one float), written by hand."""
    data = _field(0x0A, b"data") + _field(0x12, _field(0x0A, _field(0x0A, blob)))        # bytes_list
    lab = _field(0x0A, b"label") + _field(0x12, _field(0x12, _field(0x0A, struct.pack("<f", label))))
    return _field(0x0A, _field(0x0A, data) + _field(0x0A, lab))


def example_of_length(n: int, label: float) -> bytes:
    for size in range(n, 0, -1):
        e = example(b"x" * size, label)
        if len(e) == n:
            return e
        if len(e) < n:
            break
    raise AssertionError(f"no example of {n} bytes")


def test_a_plain_file_whose_first_record_starts_with_1f_8b_is_indexed_verified_and_resharded(tmp_path):
    """35,615 = 0x8b1f: the record's length field starts with the gzip magic."""
    from converters.cli.main import main
    from converters.shardset.reader import read_manifest
    from converters.shardset.verify import verify

    data = tmp_path / "data"
    data.mkdir()
    payloads = [example_of_length(35_615, 1.0), example(b"y" * 100, 0.0), example(b"z" * 70, 1.0)]
    f = data / "a.tfrecords"
    f.write_bytes(b"".join(frame(p) for p in payloads))
    assert f.read_bytes()[:2] == b"\x1f\x8b" and not is_gzip(f)
    assert list(read_records(f)) == payloads
    assert main(["index", str(data), "--no-progress"]) == 0
    m = read_manifest(str(data))
    assert m.records == 3 and m.compression is None
    assert verify(str(data)).ok
    assert main(["reshard", str(data), "--out", str(tmp_path / "r"), "--num-shards", "2", "--no-progress"]) == 0
    assert verify(str(tmp_path / "r")).ok and read_manifest(str(tmp_path / "r")).records == 3


@pytest.mark.parametrize("head, gz", [
    (frame(b"a" * 35_615)[:12], False),            # plain, although it starts with 1f 8b
    (gzip.compress(frame(b"abc"), mtime=0)[:12], True),     # gzip
    (b"\x1f\x8b", True),                           # too short for a header: the magic decides
    (b"", False), (frame(b"")[:12], False), (b"not a tfrecord", False),
])
def test_gzip_is_decided_by_the_framing(head, gz):
    assert gzip_head(head) is gz


def _bomb_header(claimed: int) -> bytes:
    head = struct.pack("<Q", claimed)
    return head + struct.pack("<I", masked_crc32c(head))


def _write_gzip_bomb(path, *, good: int = 0, claimed: int = 1 << 40, zeros_mib: int = 300) -> int:
    """A gzip file: ``good`` valid records, then a header claiming ``claimed`` bytes and ``zeros_mib`` MiB of
    zeros (about 1000:1 compressed). Returns the header's offset in the uncompressed stream."""
    prefix = b"".join(frame(example(b"k" * 40, 1.0)) for _ in range(good))
    comp = zlib.compressobj(9, zlib.DEFLATED, 31)  # gzip container
    with open(path, "wb") as f:
        f.write(comp.compress(prefix + _bomb_header(claimed)))
        zero = bytes(1 << 20)
        for _ in range(zeros_mib):
            f.write(comp.compress(zero))
        f.write(comp.flush())
    return len(prefix)


@pytest.mark.parametrize("good", [0, 5])
def test_index_of_a_gzip_bomb_is_refused_at_once_under_a_3_gb_cap(tmp_path, good):
    data = tmp_path / "data"
    data.mkdir()
    offset = _write_gzip_bomb(data / "bomb.tfrecords.gz", good=good)
    assert (data / "bomb.tfrecords.gz").stat().st_size < 1 << 20
    r = run_cli(["index", str(data), "--no-progress"], timeout=60, limits={resource.RLIMIT_AS: 3 << 30})
    check_one_line_error(r, rf"bomb\.tfrecords\.gz: record header claims {1 << 40} bytes.* at byte {offset}\b")
    assert not (data / "index.json").exists()


@pytest.mark.parametrize("claimed", [1 << 40, (1 << 64) - 1, MAX_RECORD_BYTES + 1, 5000])
def test_a_plain_file_whose_header_claims_more_than_it_holds_is_refused_at_once(tmp_path, claimed):
    f = tmp_path / "x.tfrecords"
    good = frame(example(b"k" * 40, 1.0))
    f.write_bytes(good + _bomb_header(claimed) + bytes(1000))
    res = scan_file(f)
    assert res.records == 1 and res.error_offset == len(good) and f"claims {claimed} bytes" in res.error
    with pytest.raises(IntegrityError, match=rf"x\.tfrecords: .*claims {claimed} bytes.*at byte {len(good)}"):
        list(iter_framed(f))  # reshard's reader


def test_verify_and_reshard_refuse_a_gzip_bomb_by_name(tmp_path):
    f = tmp_path / "bomb.tfrecord.gz"
    offset = _write_gzip_bomb(f, good=3, zeros_mib=40)
    res = scan_file(f)  # verify's reader
    assert res.records == 3 and res.error_offset == offset and f"claims {1 << 40} bytes" in res.error
    with pytest.raises(IntegrityError, match=rf"claims {1 << 40} bytes.*at byte {offset}"):
        list(iter_framed(f))
