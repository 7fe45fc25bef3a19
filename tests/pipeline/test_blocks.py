"""pipeline.spec.blocks: rows per rank when ranks take a columnar set's blocks in turn, and equal steps."""
from __future__ import annotations

import pytest

from pipeline.spec.blocks import file_blocks, rank_rows, smallest_rank_rows


def _by_enumeration(file_records, block_rows, n, i):
    blocks = [min(block_rows, r - s) for r in file_records for s in range(0, r, block_rows)]
    return sum(blocks[i::n])


@pytest.mark.parametrize("file_records,block_rows,n", [
    ((100,), 16, 1), ((100,), 16, 2), ((100,), 16, 3), ((40, 40, 20), 16, 2), ((40, 40, 20), 16, 4),
    ((0, 17, 0, 33), 8, 3), ((256, 256, 100), 256, 3), ((5,), 16, 4), ((1000, 999, 1), 7, 5),
])
def test_rank_rows_matches_counting_the_blocks(file_records, block_rows, n):
    got = [rank_rows(file_records, block_rows, n, i) for i in range(n)]
    assert got == [_by_enumeration(file_records, block_rows, n, i) for i in range(n)]
    assert sum(got) == sum(file_records)
    assert smallest_rank_rows(file_records, block_rows, n) == min(got)


@pytest.mark.parametrize("rows,block_rows,blocks", [(0, 4, 0), (1, 4, 1), (4, 4, 1), (5, 4, 2), (256, 256, 1)])
def test_file_blocks(rows, block_rows, blocks):
    assert file_blocks(rows, block_rows) == blocks


def test_decode_rows_keep_a_call_to_a_few_mib():
    from converters.libsvm.options import libsvm_schema
    from converters.text.options import text_schema
    from pipeline.spec.blocks import DECODE_BYTES, DECODE_ROWS, decode_rows_for

    assert decode_rows_for(libsvm_schema(39)) == DECODE_ROWS          # 472 bytes a row
    assert decode_rows_for(text_schema(2048)) == DECODE_BYTES // (2049 * 8)
