"""Bad rows are named by file:line (wrong field count, a non-integer count, int64 overflow, a label other than
0/1); --on-error skip counts them by reason in the manifest and keeps the rest; a failed run leaves nothing."""
from __future__ import annotations

import os

import pytest
import tabularref as R
from notices import without_compile_notices

from converters.cli import main
from converters.engines.inprocess import run_job
from converters.shardset.options import ShardOutputOptions
from converters.tabular.job import TabularJob
from converters.tabular.options import TabularOptions
from converters.util.errors import InputError

GOOD = R.day_lines(7, 6)


def _with(k, field, value):
    f = R.fields(GOOD[k])
    f[field] = value
    return "\t".join(f)


BAD = {  # name -> (bad line, reason, words of the message)
    "fields": ("\t".join(R.fields(GOOD[0])[:39]), "wrong_field_count", "expected 40 tab-separated fields, got 39"),
    "12abc": (_with(1, 3, "12abc"), "not_an_integer", "column I3: '12abc' is not an integer"),
    "float": (_with(1, 1, "1.5"), "not_an_integer", "column I1: '1.5' is not an integer"),
    "overflow": (_with(2, 13, "9223372036854775808"), "int64_overflow", "column I13: '9223372036854775808'"),
    "label": (_with(3, 0, "2"), "bad_label", "label '2' is not 0 or 1"),
    "nolabel": (_with(3, 0, ""), "bad_label", "label '' is not 0 or 1"),
}


def _job(path, out, on_error="raise"):
    opts = TabularOptions(output=ShardOutputOptions(on_error=on_error))
    return TabularJob.create([str(path)], str(out), opts)


@pytest.mark.parametrize("name", list(BAD))
def test_bad_row_is_named_by_file_and_line(tmp_path, name):
    line, reason, words = BAD[name]
    R.write_day(tmp_path / "day", GOOD[:4] + [line] + GOOD[4:])
    with pytest.raises(InputError) as exc:
        run_job(_job(tmp_path / "day", tmp_path / "out"))
    assert str(exc.value).startswith(f"{tmp_path / 'day'}:5: {reason}: ")
    assert words in str(exc.value)
    assert not (tmp_path / "out").exists() or os.listdir(tmp_path / "out") == []  # a failed run leaves nothing


def test_limits_of_int64_are_integers(tmp_path):
    lines = [_with(0, 1, "9223372036854775807"), _with(1, 2, "-9223372036854775808"), _with(2, 3, "+7")]
    R.write_day(tmp_path / "day", lines)
    assert run_job(_job(tmp_path / "day", tmp_path / "out")).records == 3


def test_skip_counts_by_reason_and_keeps_the_rest(tmp_path):
    lines = list(GOOD)
    for i, name in enumerate(BAD):
        lines.insert(2 * i, BAD[name][0])
    R.write_day(tmp_path / "day", lines)
    m = run_job(_job(tmp_path / "day", tmp_path / "out", "skip"))
    assert m.records == len(GOOD)
    assert m.skipped == {"wrong_field_count": 1, "not_an_integer": 2, "int64_overflow": 1, "bad_label": 2}
    assert m.inputs[0].examples[0].startswith(f"{tmp_path / 'day'}:1: wrong_field_count")


def test_cli_prints_one_line_and_exits_2(tmp_path, capsys):
    R.write_day(tmp_path / "day", GOOD[:2] + [BAD["12abc"][0]])
    rc = main(["convert", "tabular", str(tmp_path / "day"), "--out", str(tmp_path / "out"), "--no-progress"])
    err = without_compile_notices(capsys.readouterr().err).strip().splitlines()
    assert rc == 2 and len(err) == 1 and f"day:3: not_an_integer: column I3: '12abc'" in err[0]
    assert not os.path.exists(tmp_path / "out" / "index.json")


@pytest.mark.parametrize("option, words", [
    ("--shuffle", "--shuffle does not apply to tabular: rows are written in input order"),
    ("--split-by-label", "--split-by-label does not apply to tabular: split by input file instead"),
])
def test_cli_refuses_shuffle_and_split_in_one_line(tmp_path, capsys, option, words):
    R.write_day(tmp_path / "day", GOOD[:2])
    rc = main(["convert", "tabular", str(tmp_path / "day"), "--out", str(tmp_path / "out"), "--no-progress",
               option])
    err = without_compile_notices(capsys.readouterr().err).strip().splitlines()
    assert rc == 2 and len(err) == 1 and words in err[0]
    assert not os.path.exists(tmp_path / "out" / "index.json")


@pytest.fixture(scope="module")
def sources(tmp_path_factory):
    """Two training sets of the same day: with vocabularies, and with --hash-buckets."""
    d = tmp_path_factory.mktemp("sources")
    R.write_day(d / "day", R.day_lines(11, 200))
    for name, extra in (("vocab", []), ("hashed", ["--hash-buckets", "100"])):
        assert main(["convert", "tabular", str(d / "day"), "--out", str(d / name), "--no-progress", *extra]) == 0
    return d


def _cut(path):
    path.write_bytes(path.read_bytes()[:-3])


def _grow(path):
    path.write_bytes(path.read_bytes() + b"extra\n")


def _flip(path):
    data = bytearray(path.read_bytes())
    data[0] ^= 0x01
    path.write_bytes(bytes(data))


@pytest.mark.parametrize("source, damage, code, words", [
    ("vocab", _flip, 4, "vocab/C1.txt differs from its manifest's sha256"),
    ("vocab", _cut, 4, "vocab/C1.txt is not the 504 bytes its manifest lists"),
    ("vocab", _grow, 4, "vocab/C1.txt is not the 504 bytes its manifest lists"),
    ("hashed", None, 2, "it was converted with --hash-buckets (no vocabularies)"),
])
def test_cli_refuses_a_damaged_or_hashed_vocab_from_source_in_one_line(sources, tmp_path, capsys, source, damage,
                                                                         code, words):
    """Exit 4 (integrity) for a vocabulary file that is not its manifest's, 2 for a source without any."""
    import shutil

    src = tmp_path / "src"
    shutil.copytree(sources / source, src)
    if damage is not None:
        damage(src / "vocab" / "C1.txt")
    R.write_day(tmp_path / "later", R.day_lines(12, 50))
    rc = main(["convert", "tabular", str(tmp_path / "later"), "--out", str(tmp_path / "out"), "--no-progress",
               "--vocab-from", str(src)])
    err = without_compile_notices(capsys.readouterr().err).strip().splitlines()
    assert rc == code and len(err) == 1 and words in err[0], err
    assert not (tmp_path / "out").exists() or os.listdir(tmp_path / "out") == []  # a failed run leaves nothing
