import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from converters.tfrecord.crc import (
    CRC_TABLE,
    FRAME_OVERHEAD,
    HARDWARE_CRC,
    _crc_hw_update,
    _crc_table_update,
    crc32c,
    frame_payloads,
    masked_crc32c,
)


def _crc_bitwise(data: bytes) -> int:
    crc = 0xFFFFFFFF
    for b in data:
        crc ^= b
        for _ in range(8):
            crc = (crc >> 1) ^ 0x82F63B78 if crc & 1 else crc >> 1
    return crc ^ 0xFFFFFFFF


@pytest.mark.parametrize("data,expected", [
    (b"", 0x00000000),
    (b"123456789", 0xE3069283),           # the standard CRC-32C check value
    (b"\x00" * 32, 0x8A9136AA),           # RFC 3720 test vector
    (b"\xff" * 32, 0x62A8AB43),           # RFC 3720 test vector
    (bytes(range(32)), 0x46DD794E),       # RFC 3720 test vector
])
def test_known_vectors(data, expected):
    assert crc32c(data) == expected


@settings(max_examples=200, deadline=None)
@given(st.binary(max_size=300))
def test_matches_bitwise_reference(data):
    assert crc32c(data) == _crc_bitwise(data)


def test_masked_matches_tfrecord_definition():
    c = crc32c(b"abc")
    assert masked_crc32c(b"abc") == ((((c >> 15) | (c << 17)) & 0xFFFFFFFF) + 0xA282EAD8) & 0xFFFFFFFF


def test_frame_payloads_readable_by_tensorflow(tmp_path):
    import tensorflow as tf

    payloads = [b"", b"x", b"hello world", bytes(range(256)) * 10]
    data = np.frombuffer(b"".join(payloads), dtype=np.uint8)
    offsets = np.cumsum([0] + [len(p) for p in payloads])
    framed, lengths = frame_payloads(data, offsets)
    assert list(lengths) == [len(p) + FRAME_OVERHEAD for p in payloads]
    path = tmp_path / "f.tfrecord"
    path.write_bytes(framed.tobytes())
    got = [r.numpy() for r in tf.data.TFRecordDataset(str(path))]
    assert got == payloads


@pytest.mark.parametrize("offsets", [[0, 9], [-1, 4], [0, 5, 3], [2, 1]])
def test_frame_payloads_refuses_offsets_past_the_data(offsets):
    """The compiled copy does not check bounds: offsets outside the data are refused before it."""
    with pytest.raises(ValueError, match="offsets must rise from 0 or more to at most the data's 8 bytes"):
        frame_payloads(np.zeros(8, np.uint8), offsets)


@pytest.mark.skipif(not HARDWARE_CRC, reason="no SSE4.2 crc32 instruction here")
@settings(max_examples=200, deadline=None)
@given(st.binary(max_size=100), st.integers(0, 7), st.integers(0, 2**32 - 1))
def test_hardware_crc_equals_tables(data, skip, seed):
    """The SSE4.2 path and the slicing-by-8 tables agree at any start, length and running CRC value."""
    buf = np.frombuffer(data, dtype=np.uint8)
    a = min(skip, len(data))
    assert (int(_crc_hw_update(CRC_TABLE, buf, a, len(data), seed))
            == int(_crc_table_update(CRC_TABLE, buf, a, len(data), seed)))
