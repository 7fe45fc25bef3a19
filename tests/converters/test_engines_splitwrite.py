"""Pass 2 of one shard in parts (``engines.splitwrite``): the cut (pure), a part's write at its offset and its
checks, the join's checks. The bytes against one process's are checked end to end in ``test_tabular_engines``."""
from __future__ import annotations

import hashlib
import re

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from converters.engines.area import prepare_run
from converters.engines.core import ShardSpec
from converters.engines.splitwrite import cut_parts, join_parts, open_parts, write_part
from converters.shardset.options import ShardOutputOptions
from converters.util.errors import TfpipeError


@pytest.mark.parametrize("lengths, parts, expect", [
    ([10] * 4, 2, [(0, 2, 0, 20), (2, 2, 20, 20)]),
    ([10, 10, 10], 2, [(0, 2, 0, 20), (2, 1, 20, 10)]),
    ([100, 1, 1, 1], 2, [(0, 1, 0, 100), (1, 3, 100, 3)]),   # a part is at least one row
    ([5], 3, [(0, 1, 0, 5)]),                                 # fewer rows than parts
    ([], 2, [(0, 0, 0, 0)]),
    ([3, 4, 5], 1, [(0, 3, 0, 12)]),
])
def test_cut_parts(lengths, parts, expect):
    assert cut_parts(np.array(lengths, np.int64), parts) == expect


@settings(max_examples=200, deadline=None)
@given(st.lists(st.integers(1, 1000), min_size=1, max_size=200), st.integers(1, 8))
def test_parts_cover_the_rows_and_bytes_once_in_order(lengths, parts):
    cuts = cut_parts(np.array(lengths, np.int64), parts)
    assert 1 <= len(cuts) <= min(parts, len(lengths))
    row = at = 0
    for first, rows, offset, nbytes in cuts:
        assert (first, offset) == (row, at) and rows >= 1
        assert nbytes == sum(lengths[first:first + rows])
        row, at = row + rows, at + nbytes
    assert (row, at) == (len(lengths), sum(lengths))
    biggest = max(n for *_, n in cuts)
    assert biggest <= sum(lengths) / len(cuts) + max(lengths)  # about equal bytes: off by at most a row


@pytest.fixture
def area(tmp_path):
    a = prepare_run(str(tmp_path / "out"), overwrite=False)
    yield a
    a.cleanup()
    a.release()


def _framed(data: bytes, n: int):
    return np.frombuffer(data, np.uint8), n


def test_parts_written_in_any_order_join_to_the_shard(area, tmp_path):
    output = ShardOutputOptions()
    data = bytes(range(256)) * 40
    parts = open_parts(area, output, ShardSpec(3, 10), [(0, 4, 0, 4000), (4, 6, 4000, len(data) - 4000)])
    assert [p.spec.first for p in parts] == [0, 4]
    write_part(parts[1], [_framed(data[4000:7000], 3), _framed(data[7000:], 3)])
    write_part(parts[0], [_framed(data[:4000], 4)])
    result = join_parts(area, parts)
    assert (result.index, result.records, result.bytes) == (3, 10, len(data))
    assert result.sha256 == hashlib.sha256(data).hexdigest()
    assert (tmp_path / "out" / result.tmp_name).read_bytes() == data


def test_the_join_continues_the_first_parts_hash(area, tmp_path):
    """The process that wrote the first part hashed it as it went; its join hashes only the rest (bytes changed
    under the first part after it was written do not show), and a join elsewhere hashes the whole file."""
    import os

    from converters.engines import splitwrite

    data = bytes(range(256)) * 2100  # parts larger than a hashing piece
    cut = 300_000
    for kept in (True, False):
        parts = open_parts(area, ShardOutputOptions(), ShardSpec(0 if kept else 1, 2),
                           [(0, 1, 0, cut), (1, 1, cut, len(data) - cut)])
        write_part(parts[0], [_framed(data[:cut], 1)])
        write_part(parts[1], [_framed(data[cut:], 1)])
        with open(parts[0].path, "r+b") as f:
            f.write(b"z" * 10)
        if not kept:
            splitwrite._HEADS.clear()  # as in another process
        result = join_parts(area, parts)
        assert parts[0].path not in splitwrite._HEADS
        on_disk = b"z" * 10 + data[10:]
        assert (tmp_path / "out" / result.tmp_name).read_bytes() == on_disk
        assert result.sha256 == hashlib.sha256(data if kept else on_disk).hexdigest()
        os.unlink(tmp_path / "out" / result.tmp_name)


@pytest.mark.parametrize("records, nbytes", [(3, 100), (4, 99)], ids=["records", "bytes"])
def test_a_part_that_is_not_its_plan_fails(area, records, nbytes):
    (part,) = open_parts(area, ShardOutputOptions(), ShardSpec(0, records), [(0, records, 0, nbytes)])
    with pytest.raises(TfpipeError, match="shard 0: a part of .* came out as 4 records and 100 bytes"):
        write_part(part, [_framed(b"x" * 100, 4)])


def test_a_join_of_a_short_file_fails(area):
    parts = open_parts(area, ShardOutputOptions(), ShardSpec(0, 2), [(0, 1, 0, 10), (1, 1, 10, 10)])
    write_part(parts[0], [_framed(b"x" * 10, 1)])
    with pytest.raises(TfpipeError, match="shard 0: its parts wrote 10 bytes where the plan has 20"):
        join_parts(area, parts)


@pytest.mark.parametrize("field, bad", [("offset", -1), ("nbytes", 2.5), ("offset", True), ("nbytes", "7")])
def test_a_part_with_a_bad_offset_or_size_is_refused(field, bad):
    from converters.engines.splitwrite import ShardPart

    kw = {"spec": ShardSpec(0, 1), "path": "p", "offset": 0, "nbytes": 1, "tmp_name": "t"} | {field: bad}
    with pytest.raises(ValueError, match=re.escape(f"a shard part's {field} must be a non-negative integer, "
                                                   f"got {bad!r}")):
        ShardPart(**kw)


@pytest.mark.parametrize("field", ["offset", "nbytes"])
def test_a_parts_numpy_offset_and_size_are_plain_ints(field):
    """Offsets and sizes come from NumPy sums of the rows' lengths: taken as the plain ints they stand for."""
    from converters.engines.splitwrite import ShardPart

    kw = {"spec": ShardSpec(0, 1), "path": "p", "offset": 0, "nbytes": 1, "tmp_name": "t"} | {field: np.int64(12)}
    v = getattr(ShardPart(**kw), field)
    assert v == 12 and type(v) is int

