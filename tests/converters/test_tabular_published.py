"""converters.tabular as real files are published: headers matched without regard to case (extra columns
ignored, a byte order mark skipped, a column named twice refused), comma-separated text read as CSV whatever
its suffix (or refused saying how to say it: --format), counts written as integral decimals (260.0, 1e3),
rows whose trailing empty fields were stripped (--pad-short-rows), and a run that keeps too little failing
with nothing written (--max-skip-fraction) on every engine."""
from __future__ import annotations

import os

import numpy as np
import pytest
import tabularref as R
from notices import without_compile_notices

from converters.cli import main
from converters.engines.inprocess import run_job
from converters.shardset.options import ShardOutputOptions
from converters.tabular import parsekernel as K
from converters.tabular.job import TabularJob
from converters.tabular.options import TabularOptions
from converters.tabular.reader import _roles
from converters.tabular.schema import CRITEO

LINES = R.day_lines(31, 40)
HEADER = ",".join(c.name for c in CRITEO.columns)
KAGGLE = "Id," + HEADER.replace("label", "Label", 1)  # the Kaggle winners' CSV: an Id column, "Label"


def _csv(lines, header=HEADER, *, ids=False, crlf=False, bom=False) -> bytes:
    nl = "\r\n" if crlf else "\n"
    body = "".join((f"{10_000_000 + i}," if ids else "") + ln.replace("\t", ",") + nl for i, ln in enumerate(lines))
    return (b"\xef\xbb\xbf" if bom else b"") + (header + nl + body).encode()


def _floats(line: str) -> str:
    """A pandas-written row: every count and the label as a float (``260.0``)."""
    f = R.fields(line)
    return "\t".join([f"{float(v):.1f}" if v and i <= 13 else v for i, v in enumerate(f)])


def _with(line: str, i: int, value: str) -> str:
    f = R.fields(line)
    f[i] = value
    return "\t".join(f)


def _stripped(line: str) -> str:
    return line.rstrip("\t")


def _cli(capsys, *argv) -> tuple[int, list[str]]:
    rc = main(["convert", "tabular", *map(str, argv), "--no-progress"])
    return rc, without_compile_notices(capsys.readouterr().err).strip().splitlines()


def _shards(out) -> list[bytes]:
    return [p.read_bytes() for p in sorted(out.glob("*.tfrecord"))] + \
        [p.read_bytes() for p in sorted((out / "vocab").glob("*.txt"))]


@pytest.fixture(scope="module")
def base(tmp_path_factory):
    """The set of LINES as raw tab-separated text: what every published copy must convert to."""
    d = tmp_path_factory.mktemp("base")
    R.write_day(d / "day", LINES)
    assert main(["convert", "tabular", str(d / "day"), "--out", str(d / "set"), "--no-progress"]) == 0
    return _shards(d / "set")


COPIES = {  # name -> (file name, its bytes, extra options)
    "kaggle csv (Id, Label, CRLF)": ("train.csv", _csv(LINES, KAGGLE, ids=True, crlf=True), []),
    "csv named .txt": ("train.txt", _csv(LINES, KAGGLE, ids=True), []),
    "csv without suffix, --format csv": ("train", _csv(LINES, KAGGLE, ids=True), ["--format", "csv"]),
    "csv with a byte order mark": ("bom.csv", _csv(LINES, bom=True), []),
    "upper-case header": ("upper.csv", _csv(LINES, HEADER.upper()), []),
    "pandas floats (260.0)": ("floats", "".join(_floats(ln) + "\n" for ln in LINES).encode(), []),
    "stripped trailing fields": ("short", "".join(_stripped(ln) + "\n" for ln in LINES).encode(),
                                 ["--pad-short-rows"]),
    "tsv with a byte order mark": ("bomtsv", b"\xef\xbb\xbf" + "".join(ln + "\n" for ln in LINES).encode(), []),
}


@pytest.mark.parametrize("name", list(COPIES))
def test_published_copies_convert_to_the_same_set(base, tmp_path, capsys, name):
    fname, data, extra = COPIES[name]
    (tmp_path / fname).write_bytes(data)
    rc, err = _cli(capsys, tmp_path / fname, "--out", tmp_path / "out", *extra)
    assert rc == 0, err
    assert _shards(tmp_path / "out") == base


def test_the_stripped_copy_really_has_short_rows():
    assert sum(_stripped(ln) != ln for ln in LINES) >= 5


REFUSED = {  # name -> (file name, its bytes, extra options, words of the one error line)
    "csv header naming label twice": ("dup.csv", _csv(LINES[:3], HEADER + ",LABEL"), [],
                                      ["dup.csv:1:", "names column 'label' twice (columns 1 and 41"]),
    "csv header missing a column": ("miss.csv", _csv(LINES[:3], HEADER.replace(",I7,", ",X7,")), [],
                                    ["miss.csv:1:", "the CSV header lacks columns of schema 'criteo'",
                                     "found label, I1,", "X7", "missing I7", "--schema FILE"]),
    "headerless comma text": ("nohead.txt", "".join(ln.replace("\t", ",") + "\n" for ln in LINES[:3]).encode(), [],
                              ["nohead.txt:1: line 1 is comma-separated (commas, no tabs) but is not a CSV header",
                               "missing label, I1, I2", "--schema FILE", "--format tsv"]),
    "tsv named .csv": ("t.csv", "".join(ln + "\n" for ln in LINES[:3]).encode(), [],
                       ["t.csv:1: line 1 has tabs and no commas: not a CSV header (--format tsv reads"]),
    "comma text read as tsv": ("c.txt", _csv(LINES[:3]), ["--format", "tsv"],
                               ["c.txt:1: wrong_field_count: expected 40 tab-separated fields, got 1",
                                "--format csv"]),
    "short row": ("short", "".join(ln + "\n" for ln in LINES[:2] + ["\t".join(R.fields(LINES[2])[:37])]).encode(),
                  [], ["short:3: wrong_field_count: expected 40 tab-separated fields, got 37", "--pad-short-rows"]),
    "long row, padded": ("long", "".join(ln + "\n" for ln in LINES[:2] + [LINES[2] + "\tx"]).encode(),
                         ["--pad-short-rows"], ["long:3: wrong_field_count: expected 40 tab-separated fields, got 41"]),
    "fractional count": ("frac", "".join(ln + "\n" for ln in [LINES[0], _with(LINES[1], 1, "2.5")]).encode(), [],
                         ["frac:2: not_an_integer: column I1: '2.5' is not an integer"]),
}


@pytest.mark.parametrize("name", list(REFUSED))
def test_refusals_are_one_line_naming_what_to_do(tmp_path, capsys, name):
    fname, data, extra, words = REFUSED[name]
    (tmp_path / fname).write_bytes(data)
    rc, err = _cli(capsys, tmp_path / fname, "--out", tmp_path / "out", *extra)
    assert rc == 2 and len(err) == 1, err
    for w in words:
        assert w in err[0], (w, err[0])
    assert not (tmp_path / "out" / "index.json").exists()


NOT_INT, OVERFLOW = "not_an_integer", "int64_overflow"
NUMBERS = [  # field text -> int64 value, or the reason that refuses it
    ("260", 260), ("260.0", 260), ("-1.0", -1), ("1e3", 1000), ("1E+2", 100), ("5.", 5), (".0", 0), ("+7", 7),
    ("-0.0", 0), ("1.5e1", 15), ("92233720368547758070e-1", 9223372036854775807),
    ("-9223372036854775808.0", -9223372036854775808), ("9223372036854775807", 9223372036854775807),
    ("2.5", NOT_INT), ("1e-3", NOT_INT), ("0.50", NOT_INT), (".", NOT_INT), ("e5", NOT_INT),
    ("1e", NOT_INT), ("nan", NOT_INT), ("inf", NOT_INT), ("0x10", NOT_INT), ("1,0", NOT_INT),
    ("12abc", NOT_INT), ("-", NOT_INT), ("9223372036854775808", OVERFLOW), ("9223372036854775808.0", OVERFLOW),
    ("1e19", OVERFLOW), ("1e400", OVERFLOW), ("0e400", 0),
]
LABELS = [("0", 0), ("1", 1), ("1.0", 1), ("0.0", 0), ("1e0", 1), ("+1", 1), ("2", None), ("0.5", None),
          ("", None), ("x", None), ("-1", None)]


def _parse_one(line: bytes, pad=False):
    lab, nums, cats = CRITEO.positions()
    role, slot = _roles((lab, nums, cats, 40))
    return K.parse_block(np.frombuffer(line + b"\n", np.uint8), 40, 9, role, slot, 13, 26, pad)


@pytest.mark.parametrize("text, want", NUMBERS)
def test_a_count_is_plain_digits_or_an_integral_decimal(text, want):
    status, _, values, _, errcol, *_ = _parse_one(_with(LINES[0], 5, text).encode())  # I5
    if isinstance(want, str):
        assert status[0] == {NOT_INT: K.NOT_INT, OVERFLOW: K.OVERFLOW}[want] and errcol[0] == 4
    else:
        assert status[0] == K.OK and values[0, 4] == want


@pytest.mark.parametrize("text, want", LABELS)
def test_the_label_is_0_or_1_written_either_way(text, want):
    status, labels, *_ = _parse_one(_with(LINES[0], 0, text).encode())
    assert (status[0], labels[0]) == ((K.OK, want) if want is not None else (K.BAD_LABEL, 0))


@pytest.mark.parametrize("keep, pad, want", [(40, False, K.OK), (39, False, K.BAD_FIELDS), (39, True, K.OK),
                                             (1, True, K.OK), (41, True, K.BAD_FIELDS)])
def test_pad_reads_missing_trailing_fields_as_empty(keep, pad, want):
    f = (R.fields(LINES[0]) + ["extra"])[:keep]
    status, _, values, missing, _, counts, keys, *_ = _parse_one("\t".join(f).encode(), pad)
    assert status[0] == want and counts[0] == keep
    if want == K.OK:  # field f >= keep is empty: count f - 1 missing, categorical f - 14 key 0 (the empty value)
        assert missing[0, keep - 1:].all() and (keys[max(keep - 14, 0):, 0] == 0).all()
        given = f[1:min(keep, 14)]
        assert values[0, :len(given)].tolist() == [int(v) if v else 0 for v in given]


def _skip_job(path, out, frac):
    opts = TabularOptions(output=ShardOutputOptions(on_error="skip"), max_skip_fraction=frac)
    return TabularJob.create([str(path)], str(out), opts)


def _bad(line: str) -> str:
    return line.replace("\t", "\tx", 1)  # I1 is not an integer


@pytest.mark.parametrize("bad, frac, fails", [(40, 0.5, True), (24, 0.5, True), (16, 0.5, False),
                                              (24, 1.0, False), (40, 1.0, True), (1, 0.0, True), (0, 0.0, False)])
def test_a_run_that_keeps_too_little_fails_and_writes_nothing(tmp_path, bad, frac, fails):
    from converters.util.errors import InputError

    R.write_day(tmp_path / "day", [_bad(ln) for ln in LINES[:bad]] + LINES[bad:])
    job = _skip_job(tmp_path / "day", tmp_path / "out", frac)
    if not fails:
        assert run_job(job).records == len(LINES) - bad
        return
    with pytest.raises(InputError) as e:
        run_job(job)
    assert f"{bad:,} of 40 rows were skipped as bad input" in str(e.value)
    assert f"not_an_integer {bad} (e.g. {tmp_path / 'day'}:1)" in str(e.value)
    assert not (tmp_path / "out").exists() or os.listdir(tmp_path / "out") == []


ENGINES = ["local", "workers", "beam"]


@pytest.mark.parametrize("engine", ENGINES)
def test_every_engine_fails_an_all_skipped_run_with_exit_2(tmp_path, capsys, monkeypatch, engine):
    if engine == "beam":
        pytest.importorskip("apache_beam")
    for k in range(2):
        R.write_day(tmp_path / f"day_{k}", [_bad(ln) for ln in LINES[:30]] + LINES[30 + 5 * k:])
    extra = {"local": ["--workers", "1"], "workers": ["--workers", "2"], "beam": ["--engine", "beam"]}[engine]
    if engine == "workers":
        from converters.tabular import convert

        monkeypatch.setattr(convert, "BYTES_PER_WORKER", 1)  # these small days would get one process
        monkeypatch.setenv("TFPIPE_IGNORE_LOAD", "1")
    rc, err = _cli(capsys, tmp_path / "day_0", tmp_path / "day_1", "--out", tmp_path / "out", "--on-error", "skip",
                   *extra)
    assert rc == 2 and len(err) == 1, err
    assert "60 of 75 rows were skipped as bad input (more than --max-skip-fraction 0.5): not_an_integer 60" in err[0]
    assert "day_0:1" in err[0] and "nothing was written" in err[0]
    assert not (tmp_path / "out").exists() or os.listdir(tmp_path / "out") == []


@pytest.mark.parametrize("sharded", [True, False])
def test_a_processing_job_that_keeps_too_little_fails_and_publishes_nothing(tmp_path, sharded):
    from processing_sim import HOSTS, Cluster

    cluster = Cluster(tmp_path / "job", hosts=HOSTS[:1], sharded=sharded, shared=None if sharded else tmp_path / "in")
    where = cluster.inputs(HOSTS[0]) if sharded else tmp_path / "in"
    where.mkdir(exist_ok=True)
    R.write_day(where / "day-0", [_bad(ln) for ln in LINES[:30]] + LINES[30:])
    res = cluster.run(["convert", "tabular", "in/train" if sharded else str(where), "--out", str(tmp_path / "out"),
                       "--workers", "1", "--on-error", "skip"])
    rc, _, err, _ = res[HOSTS[0]]
    assert rc == 2 and "30 of 40 rows were skipped as bad input" in err, res
    assert not (tmp_path / "out" / "index.json").exists()
