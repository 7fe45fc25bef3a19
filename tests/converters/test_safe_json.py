"""converters.util.safe_json: a cache file is read only when it is a small regular file of shallow JSON; every
other thing is one UnsafeFileError naming the file (never a hang, an endless read or a RecursionError)."""
from __future__ import annotations

import json
import os
import re

import pytest

from converters.util.safe_json import UnsafeFileError, json_depth, loads_bounded, read_bounded, read_bounded_json


@pytest.mark.parametrize("text, depth", [
    (b"1", 0), (b"[]", 1), (b'{"a": [1, {"b": [2]}]}', 4), (b'["[[[", "]]"]', 1),
    (b'["\\"[[[", "\\\\", [[]]]', 3), (b"[" * 100_000, 33), (b"", 0),
])
def test_json_depth(text, depth):
    assert json_depth(text, 32) == depth


@pytest.mark.parametrize("make, needle", [
    (lambda p: os.mkfifo(p), "is a FIFO (named pipe), not a regular file"),
    (lambda p: os.symlink("/dev/zero", p), "is a character device, not a regular file"),
    (lambda p: os.mkdir(p), "is a directory, not a regular file"),
    (lambda p: p.write_bytes(b" " * ((1 << 20) + 1)), "holds 1048577 bytes, more than the 1048576"),
    (lambda p: p.write_bytes(b"[" * 100_000 + b"]" * 100_000), "nests deeper than 32 levels"),
    (lambda p: p.write_bytes(b"{nope"), "is not valid JSON"),
    (lambda p: p.write_bytes(b"\xff"), "is not valid JSON"),
])
def test_refused_naming_the_file(tmp_path, make, needle):
    path = tmp_path / "result.json"
    make(path)
    with pytest.raises(UnsafeFileError, match=re.escape(needle)) as info:
        read_bounded_json(path)
    assert str(path) in str(info.value)


def test_a_small_regular_file_and_a_link_to_one_are_read(tmp_path):
    doc = {"format": 1, "winner": {"config": {"read": "sequential"}}, "x": ["[", "{"]}
    path = tmp_path / "r.json"
    path.write_text(json.dumps(doc))
    os.symlink(path, tmp_path / "link.json")
    assert read_bounded_json(path) == doc == read_bounded_json(tmp_path / "link.json")
    assert read_bounded(path, max_bytes=len(path.read_bytes())) == path.read_bytes()
    with pytest.raises(FileNotFoundError):
        read_bounded_json(tmp_path / "missing.json")


@pytest.mark.parametrize("raw, needle", [
    (b"[" * 100_000 + b"]" * 100_000, "where nests deeper than 4 levels"),
    (b'{"a": [[[[1]]]]}', "where nests deeper than 4 levels"),
    (b"{nope", "where is not valid JSON"),
    (b"\xff", "where is not valid JSON"),
])
def test_loads_bounded_refuses_naming_where(raw, needle):
    with pytest.raises(UnsafeFileError, match=re.escape(needle)):
        loads_bounded(raw, "where", max_depth=4)


def test_loads_bounded_reads_what_fits():
    assert loads_bounded(b'{"a": [[[1]]]}', "where", max_depth=4) == {"a": [[[1]]]}
