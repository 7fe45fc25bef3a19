import hashlib

import pytest

from converters.util.digest import file_digest


@pytest.mark.parametrize("size", [0, 1, (8 << 20) - 1, (8 << 20) + 5])
def test_matches_hashlib_across_chunk_boundaries(tmp_path, size):
    data = bytes(range(256)) * (size // 256) + b"x" * (size % 256)
    p = tmp_path / "f"
    p.write_bytes(data)
    assert file_digest(p) == (size, hashlib.sha256(data).hexdigest())
