import hashlib

import pytest

from converters.util.digest import file_digest, open_file_digest


@pytest.mark.parametrize("size", [0, 1, (8 << 20) - 1, (8 << 20) + 5])
def test_matches_hashlib_across_chunk_boundaries(tmp_path, size):
    data = bytes(range(256)) * (size // 256) + b"x" * (size % 256)
    p = tmp_path / "f"
    p.write_bytes(data)
    assert file_digest(p) == (size, hashlib.sha256(data).hexdigest())


@pytest.mark.parametrize("size", [0, 1, 63, 64, 65, 3 * 64 + 5])
def test_an_open_file_is_hashed_in_pieces(tmp_path, monkeypatch, size):
    """Hashed from a mapping a piece at a time (an empty file, which cannot be mapped, read): the size and
    sha256 of the file's bytes whatever its size against the piece's, and from its start wherever it was read to."""
    from converters.util import digest

    monkeypatch.setattr(digest, "_CHUNK", 64)
    data = bytes((7 * i + size) % 256 for i in range(size))
    (tmp_path / "f").write_bytes(data)
    with open(tmp_path / "f", "rb+") as f:
        f.read(5)
        assert open_file_digest(f) == (size, hashlib.sha256(data).hexdigest())


@pytest.mark.parametrize("size, start", [(200, 0), (200, 64), (200, 100), (200, 200), (1, 1)])
def test_a_hash_of_the_first_bytes_is_continued(tmp_path, monkeypatch, size, start):
    """Given a sha256 of the file's first ``start`` bytes, only the rest is read: the digest is the whole
    file's (and the first bytes are not read again: a hash of other bytes there shows in the result)."""
    from converters.util import digest

    monkeypatch.setattr(digest, "_CHUNK", 64)
    data = bytes((5 * i + 1) % 256 for i in range(size))
    (tmp_path / "f").write_bytes(data)
    with open(tmp_path / "f", "rb") as f:
        assert open_file_digest(f, hashlib.sha256(data[:start]), start) == (size, hashlib.sha256(data).hexdigest())
        other = b"y" * start
        assert open_file_digest(f, hashlib.sha256(other), start)[1] == hashlib.sha256(other + data[start:]).hexdigest()


def test_a_pipe_is_read_to_its_end(monkeypatch):
    """A file that cannot be mapped and has no start to go back to (a pipe) is read as it comes."""
    import os
    import threading

    from converters.util import digest

    monkeypatch.setattr(digest, "_CHUNK", 64)
    data = bytes(range(256)) * 3 + b"tail"
    r, w = os.pipe()
    writer = threading.Thread(target=lambda: (os.write(w, data), os.close(w)))
    writer.start()
    with os.fdopen(r, "rb") as f:
        assert open_file_digest(f) == (len(data), hashlib.sha256(data).hexdigest())
    writer.join()
