"""convert tabular used as a careless or hostile user would: Parquet columns of every type a table can hold,
schemas without numeric or categorical columns, --negative-rate dropping a whole block, one very long value or
a line without a newline, a deeply nested or hostile schema file, truncated compressed inputs. Each case either
converts to the values a plain reference gives or stops with one line naming the file (and row, column or byte)."""
from __future__ import annotations

import bz2
import gzip
import json
import math
import os
import tracemalloc

import numpy as np
import pytest
import tabularref as R
from notices import without_compile_notices
from tfread import read_back

from converters.cli import main
from converters.engines.inprocess import run_job
from converters.shardset.manifest import InputStats
from converters.shardset.options import ShardOutputOptions
from converters.tabular.job import TabularJob
from converters.tabular.options import TabularOptions
from converters.tabular.reader import iter_rows
from converters.tabular.schema import CRITEO, TableSchema
from converters.util.errors import InputError


def _cli(capsys, *argv) -> tuple[int, list[str]]:
    rc = main(["convert", "tabular", *map(str, argv), "--no-progress"])
    return rc, without_compile_notices(capsys.readouterr().err).strip().splitlines()


def _schema(path, cols) -> str:
    path.write_text(json.dumps({"columns": [{"name": n, "role": r} for n, r in cols]}))
    return str(path)


# -- Parquet: every type a column can have ----------------------------------------------------------------------

PQ_SCHEMA = [("label", "label"), ("n", "numeric"), ("c", "categorical")]


def _pq_cases():
    import pyarrow as pa

    def t(label, n, c, names=("label", "n", "c")):
        return pa.table(list(map(pa.array, (label, n, c))) if not isinstance(label, pa.Array) else [label, n, c],
                        names=list(names))

    u8 = pa.array([0, 1, 1], pa.uint8())
    return {  # name -> (table, None: converts, or the words of the one error line)
        "uint8 label": (t(u8, pa.array([1, 2, 3]), pa.array(["a", "b", "c"])), None),
        "bool label": (t(pa.array([False, True, True]), pa.array([1, 2, 3]), pa.array(["a", "b", "c"])), None),
        "uint64 below 2**63": (t(u8, pa.array([1, 2**63 - 1, 3], pa.uint64()), pa.array(["a", "b", "c"])), None),
        "uint64 of 2**63": (t(u8, pa.array([1, 2**63, 3], pa.uint64()), pa.array(["a", "b", "c"])),
                            ["p.parquet:2: int64_overflow: column n: '9223372036854775808' is out of the int64"]),
        "integral floats, NaN": (t(pa.array([0.0, 1.0, 1.0]), pa.array([260.0, None, float("nan")]),
                                   pa.array([1.5, 2.0, None])), None),
        "fractional float": (t(u8, pa.array([1.0, 2.5, 3.0]), pa.array(["a", "b", "c"])),
                             ["p.parquet:2: not_an_integer: column n: '2.5' is not an integer"]),
        "float past int64": (t(u8, pa.array([1.0, 1e19, 3.0]), pa.array(["a", "b", "c"])),
                             ["p.parquet:2: int64_overflow: column n:"]),
        "label 2": (t(pa.array([0, 2, 1]), pa.array([1, 2, 3]), pa.array(["a", "b", "c"])),
                    ["p.parquet:2: bad_label: label '2' is not 0 or 1"]),
        "null label": (t(pa.array([0, None, 1]), pa.array([1, 2, 3]), pa.array(["a", "b", "c"])),
                       ["p.parquet:2: bad_label: label null is not 0 or 1"]),
        "binary, not UTF-8": (t(u8, pa.array([1, 2, 3]), pa.array([b"\xff\xfe", b"ok", None], pa.binary())), None),
        "fixed-size binary": (t(u8, pa.array([1, 2, 3]), pa.array([b"ab", b"cd", None], pa.binary(2))), None),
        "dictionary": (t(u8, pa.array([1, 2, 3]), pa.array(["a", "b", "a"]).dictionary_encode()), None),
        "date": (t(u8, pa.array([1, 2, 3]), pa.array([0, 1, None], pa.date32())), None),
        "string count": (t(u8, pa.array(["1", "2", "3"]), pa.array(["a", "b", "c"])),
                         ["p.parquet: column n is string: the label and the numeric columns are integer"]),
        "list categorical": (t(u8, pa.array([1, 2, 3]), pa.array([[1], [2], []])),
                             ["p.parquet: column c is list<", "not lists, structs or maps"]),
        "struct categorical": (t(u8, pa.array([1, 2, 3]), pa.array([{"x": 1}, {"x": 2}, None])),
                               ["p.parquet: column c is struct<"]),
        "map categorical": (t(u8, pa.array([1, 2, 3]), pa.array([[("k", 1)], [], None], pa.map_(pa.string(),
                                                                                               pa.int64()))),
                            ["p.parquet: column c is map<"]),
        "two columns of one name": (pa.table([u8, pa.array([1, 2, 3]), pa.array(["a", "b", "c"]),
                                              pa.array(["x", "y", "z"])], names=["label", "n", "c", "c"]),
                                    ["p.parquet: the Parquet file names column 'c' twice (columns 3 and 4"]),
        "names differing in case": (pa.table([u8, pa.array([1, 2, 3]), pa.array(["a", "b", "c"]),
                                              pa.array(["x", "y", "z"])], names=["Label", "N", "c", "C"]),
                                    ["names column 'c' twice"]),
        "a column missing": (pa.table([u8, pa.array([1, 2, 3])], names=["label", "n"]),
                             ["p.parquet: the Parquet file lacks columns of schema", "found label, n; missing c",
                              "--schema FILE"]),
    }


PQ_NAMES = ["uint8 label", "bool label", "uint64 below 2**63", "uint64 of 2**63", "integral floats, NaN",
            "fractional float", "float past int64", "label 2", "null label", "binary, not UTF-8", "fixed-size binary",
            "dictionary", "date", "string count", "list categorical", "struct categorical", "map categorical",
            "two columns of one name", "names differing in case", "a column missing"]


@pytest.mark.parametrize("name", PQ_NAMES)
def test_parquet_columns_are_read_by_a_rule_or_refused_in_one_line(tmp_path, capsys, name):
    import pyarrow.parquet as pq

    table, words = _pq_cases()[name]
    pq.write_table(table, tmp_path / "p.parquet")
    rc, err = _cli(capsys, tmp_path / "p.parquet", "--out", tmp_path / "out", "--schema",
                   _schema(tmp_path / "s.json", PQ_SCHEMA))
    if words is None:
        assert rc == 0, err
        return
    assert rc == 2 and len(err) == 1, err
    for w in words:
        assert w in err[0], (w, err[0])
    assert not (tmp_path / "out" / "index.json").exists()


def test_format_parquet_reads_a_file_without_the_suffix(tmp_path, capsys):
    import pyarrow.parquet as pq

    pq.write_table(_pq_cases()["uint8 label"][0], tmp_path / "table")
    args = [tmp_path / "table", "--out", tmp_path / "out", "--schema", _schema(tmp_path / "s.json", PQ_SCHEMA)]
    rc, err = _cli(capsys, *args)
    assert rc == 2 and len(err) == 1 and "table:" in err[0]  # read as text (as its suffix says): bad rows
    assert _cli(capsys, *args, "--format", "parquet")[0] == 0


def test_parquet_values_read_as_documented(tmp_path):
    """uint8 labels and uint64 counts as their values, a NaN count missing, non-UTF-8 bytes as they are."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    pq.write_table(pa.table({"label": pa.array([0, 1, 1], pa.uint8()),
                             "n": pa.array([7.0, float("nan"), 2.0**62]),
                             "c": pa.array([b"\xff\xfe", b"ok", None], pa.binary())}), tmp_path / "p.parquet")
    schema = TableSchema.from_json({"columns": [{"name": n, "role": r} for n, r in PQ_SCHEMA]})
    rows = next(iter_rows(str(tmp_path / "p.parquet"), schema, InputStats("p")))
    assert rows.labels.tolist() == [0, 1, 1] and rows.nums[:, 0].tolist() == [7, 0, 2**62]
    assert rows.missing[:, 0].tolist() == [False, True, False] and rows.cat(0).tolist() == [b"\xff\xfe", b"ok", b""]


def test_parquet_uint64_overflow_is_skipped_not_clamped(tmp_path):
    import pyarrow as pa
    import pyarrow.parquet as pq

    pq.write_table(pa.table({"label": pa.array([0, 1, 1], pa.uint8()), "n": pa.array([1, 2**64 - 1, 3], pa.uint64()),
                             "c": pa.array(["a", "b", "c"])}), tmp_path / "p.parquet")
    schema = TableSchema.from_json({"columns": [{"name": n, "role": r} for n, r in PQ_SCHEMA]})
    stats = InputStats("p")
    rows = list(iter_rows(str(tmp_path / "p.parquet"), schema, stats, "skip"))
    assert [r.nums[:, 0].tolist() for r in rows] == [[1, 3]] and stats.skipped == {"int64_overflow": 1}


def test_a_corrupt_parquet_page_is_named(tmp_path, capsys):
    import pyarrow as pa
    import pyarrow.parquet as pq

    pq.write_table(pa.table({"label": [0, 1] * 500, "n": list(range(1000)), "c": [f"v{i}" for i in range(1000)]}),
                   tmp_path / "p.parquet")
    data = bytearray((tmp_path / "p.parquet").read_bytes())
    for i in range(8, 300):  # the first column chunk's page header and data
        data[i] ^= 0x5A
    (tmp_path / "p.parquet").write_bytes(bytes(data))
    rc, err = _cli(capsys, tmp_path / "p.parquet", "--out", tmp_path / "out", "--schema",
                   _schema(tmp_path / "s.json", PQ_SCHEMA))
    assert rc == 2 and len(err) == 1 and f"{tmp_path / 'p.parquet'}: cannot decode the Parquet data" in err[0], err


# -- every schema the docs allow ------------------------------------------------------------------------------

ROWS = [("1", "5", "3", "x", "p"), ("0", "", "7", "x", "q"), ("1", "-2", "", "y", "p")]
COLS = {"label": 0, "a": 1, "b": 2, "c": 3, "d": 4}
ROLE = {"label": "label", "a": "numeric", "b": "numeric", "c": "categorical", "d": "categorical"}
IDS = {"c": {"x": 1, "y": 2}, "d": {"p": 1, "q": 2}}  # by descending count
SCHEMAS = {"no categorical": ["label", "a", "b"], "no numeric": ["label", "c", "d"], "one of each": ["label", "a", "c"]}


def _expected(names, target):
    nums = [n for n in names if ROLE[n] == "numeric"]
    cats = [n for n in names if ROLE[n] == "categorical"]
    dense = [[math.log1p(max(int(r[COLS[n]] or 0), 0)) for n in nums] for r in ROWS]
    sparse = [[IDS[n][r[COLS[n]]] for n in cats] for r in ROWS]
    out = {"label": np.array([float(r[0]) for r in ROWS], np.float32)}
    if target == "dlrm":
        if nums:
            out["dense"] = np.array(dense, np.float32)
        if cats:
            out["sparse"] = np.array(sparse, np.int64)
        return out
    offsets = len(nums) + 3 * np.arange(len(cats))  # every column: 2 values and id 0
    out["ids"] = np.array([list(range(len(nums))) + (np.array(s) + offsets).tolist() for s in sparse], np.int64)
    out["values"] = np.array([d + [1.0] * len(cats) for d in dense], np.float32)
    return out


def _columnar(out) -> dict[str, np.ndarray]:
    from pipeline import PipelineSpec, build_dataset

    got: dict[str, list] = {}
    for f, y in build_dataset(PipelineSpec.from_manifest(str(out), 2)):
        for k, v in [*f.items(), ("label", y)]:
            got.setdefault(k, []).append(v.numpy())
    return {k: np.concatenate(v).reshape(len(ROWS), -1) if k != "label" else np.concatenate(v).reshape(-1)
            for k, v in got.items()}


@pytest.mark.parametrize("layout", ["example", "columnar"])
@pytest.mark.parametrize("target", ["deepfm", "dlrm"])
@pytest.mark.parametrize("name", list(SCHEMAS))
def test_every_schema_the_docs_allow_converts(tmp_path, name, target, layout):
    names = SCHEMAS[name]
    R.write_day(tmp_path / "t", ["\t".join(r[COLS[n]] for n in names) for r in ROWS])
    schema = TableSchema.from_json({"columns": [{"name": n, "role": ROLE[n]} for n in names]})
    opts = TabularOptions(schema=schema, target=target, output=ShardOutputOptions(layout=layout))
    m = run_job(TabularJob.create([str(tmp_path / "t")], str(tmp_path / "out"), opts))
    got = read_back(m) if layout == "example" else _columnar(tmp_path / "out")
    want = _expected(names, target)
    assert sorted(got) == sorted(want)
    for k in want:
        np.testing.assert_allclose(got[k], want[k], rtol=1e-6)


@pytest.mark.parametrize("layout", ["example", "columnar"])
def test_negative_rate_dropping_every_row_of_a_block(tmp_path, layout):
    """A file whose last blocks hold a few label-0 rows, every one sampled out."""
    lines = ["1" + ln[1:] for ln in R.day_lines(3, 50)] + ["0" + ln[1:] for ln in R.day_lines(4, 3)]
    R.write_day(tmp_path / "day", lines)
    opts = TabularOptions(negative_rate=0.01, output=ShardOutputOptions(layout=layout))
    m = run_job(TabularJob.create([str(tmp_path / "day")], str(tmp_path / "out"), opts, block_bytes=300))
    assert (m.records, m.extra["negatives_in"], m.extra["negatives_kept"]) == (50, 3, 0)
    assert m.skipped == {"sampled_out": 3}


# -- long values and lines ---------------------------------------------------------------------------------------

def _peak(fn):
    tracemalloc.start()
    try:
        out = fn()
        return out, tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


def test_one_long_value_costs_its_own_length(tmp_path):
    """A 64 KiB value among 10,000 rows: the block's column is not gathered at that width for every row."""
    lines = R.day_lines(5, 10_000)
    f = R.fields(lines[5000])
    f[20] = "v" * 65536
    lines[5000] = "\t".join(f)
    R.write_day(tmp_path / "day", lines)
    list(iter_rows(str(tmp_path / "day"), CRITEO, InputStats("d"), block_bytes=1 << 12))  # kernels loaded first
    rows, peak = _peak(lambda: [(len(b), b.cat(6).dtype.itemsize) for b in iter_rows(str(tmp_path / "day"), CRITEO,
                                                                                       InputStats("d"))])
    assert sum(n for n, _ in rows) == 10_000 and max(w for _, w in rows) == 65536
    assert peak < 48 << 20, peak  # rows x width would be 625 MiB


@pytest.mark.parametrize("fmt", ["tsv", "parquet"])
@pytest.mark.parametrize("long_values", [1, 100])
def test_long_values_cost_their_own_length_in_the_whole_conversion(tmp_path, long_values, fmt):
    """64 KiB values among 10,000 rows, read, counted, merged, written and looked up: the conversion's peak is
    the same conversion's without them, the readers' slices (three of ``rows.GATHER_BYTES``) and a few times the
    long values' bytes (rows x width would be more than 500 MiB)."""
    from converters.tabular.rows import GATHER_BYTES

    lines = R.day_lines(5, 10_000)
    write = R.write_day if fmt == "tsv" else R.write_parquet
    write(tmp_path / "plain", lines)
    for k in range(long_values):
        f = R.fields(lines[5000 - 50 * k])
        f[20] = f"{k:03d}" + "v" * 65533
        lines[5000 - 50 * k] = "\t".join(f)
    write(tmp_path / "long", lines)

    def convert(name):
        run_job(TabularJob.create([str(tmp_path / name)], str(tmp_path / f"out-{name}"),
                                  TabularOptions(input_format=fmt), block_bytes=1 << 20, overwrite=True))

    convert("plain")  # the kernels compiled and loaded before either is measured
    _, plain = _peak(lambda: convert("plain"))
    _, peak = _peak(lambda: convert("long"))
    assert (tmp_path / "out-long" / "vocab" / "C7.txt").read_bytes().count(b"v" * 65533) == long_values
    assert peak < plain + 3 * GATHER_BYTES + 4 * 65536 * long_values, (peak, plain)


@pytest.mark.parametrize("nbytes", [4 << 20, 16 << 20])
def test_a_line_without_a_newline_is_read_once(tmp_path, nbytes):
    """Memory about the line (not several copies) and a bad row for it, whatever the block size."""
    (tmp_path / "nul").write_bytes(b"0\t" + b"\x00" * nbytes)
    stats = InputStats("nul")
    _, peak = _peak(lambda: list(iter_rows(str(tmp_path / "nul"), CRITEO, stats, "skip", block_bytes=1 << 16)))
    assert stats.skipped == {"wrong_field_count": 1} and stats.records_read == 1
    assert peak < 1.5 * nbytes + (2 << 20), peak


@pytest.mark.parametrize("on_error", ["raise", "skip"])
def test_a_line_past_the_cap_is_a_bad_row_read_through(tmp_path, on_error):
    lines = R.day_lines(8, 5)
    (tmp_path / "day").write_bytes(("\n".join(lines[:2]) + "\n").encode() + b"x" * 300_000 + b"\n"
                                   + ("\n".join(lines[2:]) + "\n").encode())
    stats = InputStats("day")
    read = lambda: [r.lines.tolist() for r in iter_rows(str(tmp_path / "day"), CRITEO, stats, on_error,  # noqa: E731
                                                        block_bytes=4096, max_line=100_000)]
    if on_error == "raise":
        with pytest.raises(InputError) as e:
            read()
        assert str(e.value).startswith(f"{tmp_path / 'day'}:3: line_too_long: a line of more than 100,000 bytes")
        return
    assert sum(read(), []) == [1, 2, 4, 5, 6]
    assert stats.skipped == {"line_too_long": 1} and stats.records_read == 6


# -- hostile schema files and inputs -------------------------------------------------------------------------------

def test_a_deeply_nested_schema_is_one_line(tmp_path, capsys):
    (tmp_path / "deep.json").write_text("[" * 100_000 + "]" * 100_000)
    R.write_day(tmp_path / "day", R.day_lines(1, 3))
    rc, err = _cli(capsys, tmp_path / "day", "--out", tmp_path / "out", "--schema", tmp_path / "deep.json")
    assert rc != 0 and len(err) == 1 and "deep.json: nested too deeply to be a schema file" in err[0], err


@pytest.mark.parametrize("cols, words", [
    ([("label", "label"), (".tfpipe-tmp-x", "categorical")], "may not start with '.tfpipe-tmp-'"),
    ([("label", "label"), ("a", "numeric"), ("A", "categorical")], "duplicate column names ['A', 'a']"),
])
def test_a_hostile_column_name_is_refused_before_anything_is_written(tmp_path, capsys, cols, words):
    R.write_day(tmp_path / "day", ["1\tx", "0\ty"])
    rc, err = _cli(capsys, tmp_path / "day", "--out", tmp_path / "out", "--schema", _schema(tmp_path / "s.json", cols))
    assert rc != 0 and len(err) == 1 and words in err[0], err
    assert not (tmp_path / "out").exists()


def _zst(data: bytes) -> bytes:
    import zstandard

    return zstandard.ZstdCompressor(write_checksum=True).compress(data)


@pytest.mark.parametrize("suffix, pack", [(".gz", gzip.compress), (".bz2", bz2.compress), (".zst", _zst)])
@pytest.mark.parametrize("damage", ["truncated", "flipped"])
def test_a_damaged_compressed_input_is_named_by_file_and_byte(tmp_path, capsys, suffix, pack, damage):
    if suffix == ".zst":
        pytest.importorskip("zstandard")
    data = pack(("\n".join(R.day_lines(9, 3000)) + "\n").encode())
    if damage == "truncated":
        data = data[:-len(data) // 3]
    else:
        data = bytearray(data)
        data[len(data) // 2] ^= 0xFF
        data = bytes(data)
    (tmp_path / f"day{suffix}").write_bytes(data)
    skip = ["--on-error", "skip"] if damage == "flipped" else []  # the garbage before the checksum is bad rows
    rc, err = _cli(capsys, tmp_path / f"day{suffix}", "--out", tmp_path / "out", *skip)
    assert rc == 2 and len(err) == 1, err
    assert f"day{suffix} at byte " in err[0] and "the file is truncated or corrupt" in err[0], err
    assert not os.path.exists(tmp_path / "out" / "index.json")
