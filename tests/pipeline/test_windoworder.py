"""pipeline.resume.windoworder: the window arithmetic of a columnar set's shuffled resumable order (pure).
Windows of whole blocks, counted across files (each file ends in its own short block) or within files where
they are large enough; entering at a row gives the file and block where its window starts, the window's number
and the rows of the window before it."""
from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pipeline.resume.windoworder import (FILE_WINDOWS_MIN, file_window_entry, file_windows, window_blocks,
                                         window_entry, window_rows)


@pytest.mark.parametrize("buffer,block_rows,k", [(10_000, 1024, 25), (100, 7, 36), (1, 1024, 1), (4096, 1024, 10)])
def test_window_blocks_cover_two_and_a_half_buffers(buffer, block_rows, k):
    assert window_blocks(buffer, block_rows) == k
    assert window_rows(buffer, block_rows) == k * block_rows >= 2.5 * buffer


ROWS = [20, 13, 0, 9]       # blocks of 4 rows: 5 + 4 (the last of 1 row) + 0 + 3 (the last of 1) = 12 blocks
# row -> (file, block in it, window, rows of the window before it), windows of 3 blocks
CASES = [
    (0, (0, 0, 0, 0)),
    (11, (0, 0, 0, 11)),      # window 0: blocks 0-2 of file 0, rows 0-11
    (12, (0, 3, 1, 0)),       # window 1: blocks 3, 4 of file 0 and block 0 of file 1, rows 12-23
    (23, (0, 3, 1, 11)),
    (24, (1, 1, 2, 0)),       # window 2: blocks 1-3 of file 1 (the last holds 1 row), rows 24-32
    (32, (1, 1, 2, 8)),
    (33, (3, 0, 3, 0)),       # window 3: the empty file holds no block; the 3 blocks of file 3, rows 33-41
    (41, (3, 0, 3, 8)),
    (42, (3, 0, 3, 9)),       # the end of the epoch: the last window, all of its rows left out
]


@pytest.mark.parametrize("row,want", CASES)
def test_window_entry(row, want):
    assert window_entry(ROWS, 4, 3, row) == want


@pytest.mark.parametrize("rows,block_rows,k,within", [
    ([50_000] * 12, 1024, 25, True),         # windows of 25 + 24 blocks: 0.98 of full windows' displacement
    ([686, 314], 7, 36, True),               # 36 + 36 + 26 and 36 + 9 blocks: 0.903
    ([686, 314], 7, 72, False),              # 72 + 26 and 45 blocks: 0.765
    ([404, 596], 7, 54, False),              # 0.884: just under
    ([100_000], 256, 10, True),              # one file: the windows across files are these
    ([3, 0, 5], 4, 1, False),                # windows of one block: the short blocks weigh (26 < 0.9 x 32)
    ([10] * 50, 4, 25, False),               # many small files: windows of a file's 3 blocks
])
def test_windows_stay_within_files_only_where_rows_move_as_far(rows, block_rows, k, within):
    assert file_windows(rows, block_rows, k) is within


def _file_windows(rows, block_rows, k):
    """Brute force: (file, first block, first row in the epoch, rows) of each window within files, in order."""
    out, at = [], 0
    for j, r in enumerate(rows):
        blocks = -(-r // block_rows)
        for first in range(0, blocks, k):
            n = min(r, (first + k) * block_rows) - first * block_rows
            out.append((j, first, at, n))
            at += n
    return out


@settings(max_examples=60, deadline=None)
@given(st.lists(st.integers(0, 40), min_size=1, max_size=5), st.integers(1, 5), st.integers(1, 4))
def test_file_window_entry_finds_the_window_holding_each_row(rows, block_rows, k):
    """For every row of the epoch: the window within its file that holds it (numbered across files, a file of
    ``nb`` blocks holding ``ceil(nb / k)``), its file and first block, and the rows before it in the window;
    at the end of the epoch, a window with nothing left to read."""
    wins = _file_windows(rows, block_rows, k)
    total = sum(rows)
    for p in range(total):
        w = next(i for i, (_, _, at, n) in enumerate(wins) if at <= p < at + n)
        j, first, at, _ = wins[w]
        assert file_window_entry(rows, block_rows, k, p) == (j, first, w, p - at)
    j, first, w, drop = file_window_entry(rows, block_rows, k, total)
    assert j == len(rows) - 1
    later = [x for x in wins if x[0] == j and x[1] >= first]
    if later:       # the epoch's last window, all of its rows left out
        assert later == [wins[-1]] and w == len(wins) - 1 and drop == wins[-1][3]
    else:           # past the last window: nothing to read
        assert w == len(wins) and drop == 0


def test_file_windows_threshold_is_the_documented_share():
    assert FILE_WINDOWS_MIN == 0.9
    # one file of 1.5 full windows: (1 + 0.25) / 1.5 = 0.83 of full windows' displacement
    assert not file_windows([3 * 512], 512, 2)
    # of 4.5: (4 + 0.25) / 4.5 = 0.94
    assert file_windows([9 * 512], 512, 2)
