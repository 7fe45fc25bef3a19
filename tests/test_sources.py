import bz2
import gzip

import pytest
import zstandard

from converters.sources import expand_inputs, iter_blocks, open_input
from converters.util.errors import InputError, TfpipeError

TEXT = b"1 1:2\n0 3:4\n\n1 5:6"


def _write(path, kind, data=TEXT):
    if kind == "gzip":
        data = gzip.compress(data)
    elif kind == "bz2":
        data = bz2.compress(data)
    elif kind == "zstd":
        c = zstandard.ZstdCompressor()
        half = len(data) // 2
        data = c.compress(data[:half]) + c.compress(data[half:])  # two frames
    path.write_bytes(data)
    return path


@pytest.mark.parametrize("name,kind", [("a.txt", None), ("a.gz", "gzip"), ("a.bz2", "bz2"), ("a.zst", "zstd")])
@pytest.mark.parametrize("block", [1, 4, 1 << 20])
def test_blocks_reassemble_and_count_lines(tmp_path, name, kind, block):
    p = _write(tmp_path / name, kind)
    blocks = list(iter_blocks(str(p), block))
    assert b"".join(b for b, _, _ in blocks) == TEXT
    for b, line, off in blocks:
        assert TEXT[off:off + len(b)] == b
        assert TEXT[:off].count(b"\n") + 1 == line
        assert b.endswith(b"\n") or off + len(b) == len(TEXT)


@pytest.mark.parametrize("name,data,match", [
    ("plain.zst", b"hello\n", "not compressed"),
    ("gz.zst", gzip.compress(b"x\n", mtime=0), "gzip data"),
    ("empty.gz", b"", "empty file"),
])
def test_wrong_content_for_extension(tmp_path, name, data, match):
    (tmp_path / name).write_bytes(data)
    with pytest.raises(InputError, match=match) as exc:
        list(iter_blocks(str(tmp_path / name)))
    assert name in str(exc.value)


@pytest.mark.parametrize("name,kind", [("t.zst", "zstd"), ("t.gz", "gzip"), ("t.bz2", "bz2")])
def test_truncated_compressed_file_is_an_error(tmp_path, name, kind):
    import os

    p = _write(tmp_path / name, kind, os.urandom(50_000) + b"\n")
    p.write_bytes(p.read_bytes()[:-20])
    with pytest.raises(InputError, match="truncated or corrupt") as exc:
        list(iter_blocks(str(p)))
    assert name in str(exc.value)


def test_expand_inputs(tmp_path):
    (tmp_path / "d" / "sub").mkdir(parents=True)
    for n in ["d/b.txt", "d/a.txt", "d/sub/c.txt", "d/.hidden", "e.txt"]:
        (tmp_path / n).write_text("1 1:1\n")
    got = expand_inputs([tmp_path / "d", str(tmp_path / "*.txt"), tmp_path / "e.txt"])
    assert [p.replace(str(tmp_path) + "/", "") for p in got] == ["d/a.txt", "d/b.txt", "d/sub/c.txt", "e.txt"]


@pytest.mark.parametrize("inputs,match", [([], "no inputs"), (["/nonexistent/x"], "does not exist"),
                                          (["/nonexistent/*.txt"], "matches no files")])
def test_expand_inputs_errors(inputs, match):
    with pytest.raises(TfpipeError, match=match):
        expand_inputs(inputs)


def test_open_missing_file():
    with pytest.raises(InputError, match="cannot open"):
        open_input("/nonexistent/file.gz")
