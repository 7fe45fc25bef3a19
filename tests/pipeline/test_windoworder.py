"""pipeline.resume.windoworder: the window arithmetic of a columnar set's shuffled resumable order (pure).
Windows of whole blocks, counted across files (each file ends in its own short block); entering at a row
gives the file and block where its window starts and the rows of the window before it."""
from __future__ import annotations

import pytest

from pipeline.resume.windoworder import window_blocks, window_entry, window_rows


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
