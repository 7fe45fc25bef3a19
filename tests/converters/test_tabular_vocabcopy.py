"""converters.tabular.vocabcopy: a source vocabulary copied byte for byte, read a few bytes at a time (lines
cut across reads), with its (value, id) runs merging to the file's own line numbers."""
from __future__ import annotations

import hashlib

import numpy as np
import pytest

from converters.storage.local import LocalStorage
from converters.tabular.setinfo import SourceVocab
from converters.tabular.vocab import merge_runs
from converters.tabular.vocabcopy import copy_vocabulary
from converters.util.errors import IntegrityError


class Area:
    """The temporary area's array calls on a dict."""

    def __init__(self):
        self.files = {}

    def put_array(self, name, a):
        self.files[name] = np.ascontiguousarray(a).tobytes()

    def get_range(self, name, a, b):
        return self.files[name][a:b]


def source(tmp_path, data: bytes, values: int, sha: str | None = None) -> SourceVocab:
    (tmp_path / "src").mkdir(exist_ok=True)
    (tmp_path / "src" / "C1.txt").write_bytes(data)
    return SourceVocab("C1", LocalStorage(str(tmp_path / "src")), "C1.txt", len(data),
                       sha or hashlib.sha256(data).hexdigest(), values, "--vocab-from src: vocab/C1.txt")


@pytest.mark.parametrize("read_bytes", [1, 7, 64, 1 << 20])
def test_the_copy_and_the_runs_are_the_files(tmp_path, read_bytes):
    rng = np.random.default_rng(read_bytes)
    values = sorted({b"%x" % v for v in rng.integers(0, 1 << 32, 300)}, key=lambda _: rng.random())
    data = b"\n".join(values) + b"\n"
    area = Area()
    runs = copy_vocabulary(source(tmp_path, data, len(values)), str(tmp_path / "copy"), area, "s", read_bytes)
    assert (tmp_path / "copy").read_bytes() == data
    merged = {bytes(v): int(i) for vs, ids in merge_runs(area, runs, chunk=17) for v, i in zip(vs.tolist(), ids)}
    assert merged == {v: n + 1 for n, v in enumerate(values)}
    assert len(runs) >= (2 if read_bytes <= 64 else 1)


def test_longer_values_give_runs_at_their_width(tmp_path):
    data = b"short\nlonger than eight\nmid-length\n"
    area = Area()
    runs = copy_vocabulary(source(tmp_path, data, 3), str(tmp_path / "copy"), area, "s", read_bytes=12)
    assert (tmp_path / "copy").read_bytes() == data
    assert [r.width for r in runs] == [5, 17, 10]
    merged = [(bytes(v), int(i)) for vs, ids in merge_runs(area, runs) for v, i in zip(vs.tolist(), ids)]
    assert merged == [(b"longer than eight", 2), (b"mid-length", 3), (b"short", 1)]


@pytest.mark.parametrize("data, values, sha, words", [
    (b"a\nb\n", 3, None, "lists 2 values, its manifest's table size says 3"),
    (b"a\nb", 2, None, "its last line has no newline"),
    (b"a\nb\n", 2, "0" * 64, "differs from its manifest's sha256"),
])
def test_a_file_that_is_not_its_manifests_is_refused(tmp_path, data, values, sha, words):
    with pytest.raises(IntegrityError, match=words):
        copy_vocabulary(source(tmp_path, data, values, sha), str(tmp_path / "copy"), Area(), "s")
