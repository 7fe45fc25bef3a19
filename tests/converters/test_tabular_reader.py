"""converters.tabular.reader: the rows of a file are the same whatever the block size the file is read in (a block
shorter than one line, a line cut at a block's end, the last line without its newline, CRLF, a CSV header, gzip),
and a bad line is named by its line number from any block."""
from __future__ import annotations

import gzip

import pytest
import tabularref as R

from converters.shardset.manifest import InputStats
from converters.tabular.reader import DEFAULT_BLOCK_BYTES, iter_rows
from converters.tabular.schema import CRITEO
from converters.util.errors import InputError


def rows_of(path, block_bytes, on_error="raise"):
    """Every row's line number, label, integer columns and categorical values, in order; the lines read."""
    stats = InputStats(str(path))
    lines, labels, nums, cats = [], [], [], []
    for b in iter_rows(str(path), CRITEO, stats, on_error, block_bytes):
        lines += b.lines.tolist()
        labels += b.labels.tolist()
        nums += b.nums.tolist()
        cats += [list(row) for row in zip(*(b.cat(j).tolist() for j in range(b.ncat)))]
    return lines, labels, nums, cats, stats.records_read


@pytest.mark.parametrize("kind", ["tsv", "crlf-no-final-newline", "csv", "gzip"])
@pytest.mark.parametrize("block_bytes", [1, 7, 331, 4096])
def test_any_block_size_reads_the_same_rows(tmp_path, kind, block_bytes):
    lines = R.day_lines(5, 60)
    if kind == "csv":
        path = tmp_path / "day.csv"
        head = ",".join(c.name for c in CRITEO.columns)
        path.write_text(head + "\n" + "\n".join(x.replace("\t", ",") for x in lines) + "\n")
    elif kind == "gzip":
        path = tmp_path / "day.gz"
        path.write_bytes(gzip.compress(("\n".join(lines) + "\n").encode()))
    else:
        path = tmp_path / "day"
        path.write_bytes("\r\n".join(lines).encode())   # CRLF, and no newline after the last line
    whole = rows_of(path, DEFAULT_BLOCK_BYTES)
    assert whole[4] == 60 and len(whole[0]) == 60
    assert whole[0] == list(range(2 if kind == "csv" else 1, 62 if kind == "csv" else 61))
    assert rows_of(path, block_bytes) == whole


@pytest.mark.parametrize("block_bytes", [5, 300, DEFAULT_BLOCK_BYTES])
def test_a_bad_line_is_named_by_its_number_from_any_block(tmp_path, block_bytes):
    lines = R.day_lines(6, 40)
    lines[29] = lines[29].replace("\t", "\t12abc", 1)   # I1 is not an integer
    path = tmp_path / "day"
    path.write_text("\n".join(lines) + "\n")
    with pytest.raises(InputError) as e:
        rows_of(path, block_bytes)
    assert e.value.line == 30 and "12abc" in str(e.value)
    kept = rows_of(path, block_bytes, on_error="skip")
    assert 30 not in kept[0] and len(kept[0]) == 39


@pytest.mark.parametrize("kind", ["tsv", "crlf-no-final-newline", "csv-bom", "blank-and-long"])
@pytest.mark.parametrize("unit", [1, 97, 1000])
def test_spans_of_a_file_read_its_rows_once_numbered_as_the_whole(tmp_path, kind, unit):
    """Byte ranges that partition a file read every row once, with the whole file's line numbers, and count
    the lines ``count_lines`` counts without parsing."""
    from converters.tabular.reader import Span, count_lines

    lines = R.day_lines(7, 50)
    if kind == "csv-bom":
        path = tmp_path / "day.csv"
        head = ",".join(c.name for c in CRITEO.columns)
        path.write_bytes(b"\xef\xbb\xbf" + (head + "\n" + "\n".join(x.replace("\t", ",") for x in lines) + "\n").encode())
    elif kind == "blank-and-long":
        lines[10] = ""
        lines[20] = lines[20].replace("\t", "\t" + "9" * 3000 + "x", 1)   # longer than the reader's max_line below
        path = tmp_path / "day"
        path.write_text("\n".join(lines) + "\n")
    else:
        path = tmp_path / "day"
        path.write_bytes(("\r\n" if kind.startswith("crlf") else "\n").join(lines).encode())
    size = path.stat().st_size

    def read(span):
        stats = InputStats(str(path))
        out = []
        for b in iter_rows(str(path), CRITEO, stats, "skip", 64, max_line=2000, span=span):
            out += list(zip(b.lines.tolist(), b.labels.tolist(), map(tuple, b.nums.tolist())))
        return out, stats

    whole, whole_stats = read(None)
    got, first, skipped = [], 1, 0
    for a in range(0, size, unit):
        span = Span(a, min(a + unit, size), first)
        rows, stats = read(span)
        assert span.lines == count_lines(str(path), a, min(a + unit, size))
        got += rows
        skipped += stats.records_skipped
        first += span.lines
    assert got == whole and len(whole) >= 48
    assert skipped == whole_stats.records_skipped
    assert first - 1 == len(lines) + (kind == "csv-bom")
