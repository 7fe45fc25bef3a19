"""Hostile use of a tabular set's own files: what ``--vocab-from SET`` takes from the set and trusts in it, side
files behind symbolic links (``verify``, ``--vocab-from``, ``--overwrite``), a skip report of huge bad fields,
and out-of-range numbers. Every case is a real command line (``cli_batch``: one process for a table's
commands) and ends in a verified set or one error line with the right exit code, nothing written."""
from __future__ import annotations

import hashlib
import json
import os
import random
import re
import shutil
from pathlib import Path

import pytest
from cli_batch import run_commands
from hostile import snapshot

from converters.shardset.verify import verify

SCHEMA = {"name": "small", "columns": [{"name": "y", "role": "label"}, {"name": "n", "role": "numeric"},
                                       {"name": "a", "role": "categorical"}, {"name": "b", "role": "categorical"}]}
OTHER = {"name": "other", "columns": [{"name": "y", "role": "label"}, {"name": "n", "role": "numeric"},
                                      {"name": "x", "role": "categorical"}, {"name": "z", "role": "categorical"}]}


def _rows(n: int = 300, seed: int = 1) -> list[list[str]]:
    r = random.Random(seed)
    return [[str(r.randint(0, 1)), str(r.randint(0, 50)), r.choice("pqrstuvw"), f"v{r.randint(0, 20)}"]
            for _ in range(n)]


def _convert(inp, out, *extra) -> list[str]:
    return ["convert", "tabular", str(inp), "--out", str(out), "--no-progress", *map(str, extra)]


def _error(r, code: int, pattern: str) -> None:
    """One error line matching ``pattern``, exit ``code``, no traceback."""
    assert "Traceback" not in r.err and r.code == code, (r.code, r.err)
    lines = [ln for ln in r.err.splitlines() if ln.startswith("tfpipe: error:")]
    assert len(lines) == 1 and re.search(pattern, lines[0]), r.err


def _nothing_written(out: Path) -> bool:
    return not out.exists() or not (out / "index.json").exists()


@pytest.fixture(scope="module")
def made(tmp_path_factory):
    """A DLRM/minmax set of a small schema converted from ``day.tsv``; ``test.csv`` holds the same rows with a
    header."""
    root = tmp_path_factory.mktemp("vocabfrom")
    rows = _rows()
    (root / "day.tsv").write_text("".join("\t".join(r) + "\n" for r in rows))
    (root / "test.csv").write_text("y,n,a,b\n" + "".join(",".join(r) + "\n" for r in rows))
    (root / "s.json").write_text(json.dumps(SCHEMA))
    (root / "o.json").write_text(json.dumps(OTHER))
    r = run_commands([_convert(root / "day.tsv", root / "set", "--schema", root / "s.json", "--target", "dlrm",
                               "--numeric", "minmax")], str(root / "made.json"))
    assert r[0].code == 0, r[0].err
    return root


# -- what --vocab-from takes from the set, and what contradicts it -------------------------------------------

CARRY = {  # extra options -> exit code, error pattern (None: converts)
    "the set's schema, target and numeric": ([], 0, None),
    "an option that agrees": (["--target", "dlrm", "--numeric", "minmax"], 0, None),
    "--min-count": (["--min-count", "5"], 2, r"--min-count does not apply"),
    "--hash-buckets": (["--hash-buckets", "7"], 2, r"--hash-buckets does not apply"),
    "another --schema": (["--schema", "criteo"], 2, r"--schema 'criteo' contradicts the set's schema"),
    "another --target": (["--target", "deepfm"], 2, r"--target deepfm contradicts the set \(converted with "
                                                    r"--target dlrm\)"),
    "another --numeric": (["--numeric", "log1p"], 2, r"--numeric log1p contradicts the set"),
}


@pytest.fixture(scope="module")
def carried(made):
    runs = run_commands([_convert(made / "test.csv", made / f"carry-{i}", "--vocab-from", made / "set", *extra)
                         for i, (extra, _, _) in enumerate(CARRY.values())], str(made / "carry.json"))
    return dict(zip(CARRY, runs))


@pytest.mark.parametrize("case", list(CARRY))
def test_vocab_from_takes_the_set_and_refuses_contradictions(made, carried, case):
    """CSV input with a header converts without --schema again; the set's target and transform are used, so the
    same rows give the set's own shard bytes; an option that contradicts the set is refused."""
    _, code, pattern = CARRY[case]
    out = made / f"carry-{list(CARRY).index(case)}"
    r = carried[case]
    if pattern is not None:
        _error(r, code, pattern)
        assert _nothing_written(out)
        return
    assert r.code == 0, r.err
    m, src = (json.loads((d / "index.json").read_text()) for d in (out, made / "set"))
    for key in ("schema", "target", "numeric"):
        assert m["options"][key] == src["options"][key]
    assert [s["sha256"] for s in m["shards"]] == [s["sha256"] for s in src["shards"]]
    counted = [{k: v for k, v in e.items() if k != "distinct"} for e in src["extra"]["categorical"]]
    assert m["extra"]["categorical"] == counted and verify(str(out)).ok


# -- what --vocab-from trusts: the source's entries, checked as side files are ------------------------------


def _entry(m: dict, i: int = 0) -> dict:
    return m["extra"]["categorical"][i]


def _rewrite_vocab(d: Path, m: dict, data: bytes, values: int) -> None:
    """``vocab/a.txt`` replaced by ``data`` (``values`` lines), its manifest entries updated to match."""
    (d / "vocab" / "a.txt").write_bytes(data)
    e, sha = _entry(m), hashlib.sha256(data).hexdigest()
    e.update(bytes=len(data), sha256=sha, table_size=values + 1, vocab_size=values)
    next(f for f in m["extra"]["files"] if f["name"] == "vocab/a.txt").update(bytes=len(data), sha256=sha)


def _lines(d: Path) -> list[bytes]:
    return (d / "vocab" / "a.txt").read_bytes().splitlines()


def _move_out(d: Path, m: dict) -> None:
    shutil.copy(d / "vocab" / "a.txt", d.parent / f"{d.name}-moved.txt")  # same bytes, same sha256
    _entry(m)["vocab"] = f"../{d.name}-moved.txt"


def _link_dir(d: Path, m: dict) -> None:
    shutil.move(str(d / "vocab"), str(d.parent / f"{d.name}-shared"))
    os.symlink(d.parent / f"{d.name}-shared", d / "vocab")


def _link_file(d: Path, m: dict) -> None:
    shutil.move(str(d / "vocab" / "a.txt"), str(d.parent / f"{d.name}-a.txt"))
    os.symlink(d.parent / f"{d.name}-a.txt", d / "vocab" / "a.txt")


def _duplicate(d: Path, m: dict) -> None:
    lines = _lines(d)
    _rewrite_vocab(d, m, b"\n".join(lines + lines[:1]) + b"\n", len(lines) + 1)


def _odd_line(d: Path, m: dict, line: bytes) -> None:
    lines = _lines(d)
    _rewrite_vocab(d, m, b"\n".join([lines[0], line] + lines[2:]) + b"\n", len(lines))


DAMAGED = {  # (edit of a copy of the set and its manifest, exit code, error pattern)
    "vocabulary path leaving the set": (_move_out, 4, r"extra\.categorical\[0\] \(a\): its vocabulary "
                                                      r"'\.\./.*-moved\.txt' is not a file the set lists"),
    "absolute vocabulary path": (lambda d, m: _entry(m).update(vocab="/etc/hostname"), 4,
                                 r"'/etc/hostname' is not a file the set lists"),
    "missing bytes": (lambda d, m: _entry(m).pop("bytes"), 4, r"extra\.categorical\[0\] \(a\): no 'bytes'"),
    "table_size not a number": (lambda d, m: _entry(m).update(table_size="many"), 4,
                                r"table_size 'many' is not a positive integer"),
    "an entry that is a list": (lambda d, m: m["extra"]["categorical"].__setitem__(0, ["a", 9]), 4,
                                r"extra\.categorical\[0\] is a list, not an object"),
    "no vocabulary in a vocabulary set": (lambda d, m: _entry(m).pop("vocab"), 4,
                                          r"extra\.categorical\[0\] \(a\): no 'vocab'"),
    "categorical not a list": (lambda d, m: m["extra"].update(categorical="a,b"), 4,
                               r"extra\.categorical is a str, not a list"),
    "a value listed twice": (_duplicate, 4, r"vocab/a\.txt lists 1 value\(s\) more than once"),
    "a line ending in CR": (lambda d, m: _odd_line(d, m, b"zz\r"), 4, r"line 2 'zz\\r' ends with a carriage"),
    "a line ending in NUL": (lambda d, m: _odd_line(d, m, b"zz\0"), 4, r"line 2 .* ends with NUL"),
    "an empty line": (lambda d, m: _odd_line(d, m, b""), 4, r"line 2 is empty"),
    "linked vocab/": (_link_dir, 4, r"vocab/a\.txt: vocab is a symbolic link; a shard set holds its own files"),
    "linked vocab/a.txt": (_link_file, 4, r"vocab/a\.txt: is a symbolic link; a shard set holds its own files"),
}
LINKED = ("linked vocab/", "linked vocab/a.txt")


@pytest.fixture(scope="module")
def damaged(made):
    """Per case: a copy of the set, edited; ``--vocab-from`` it (and ``verify`` the linked ones)."""
    argvs, outs = [], {}
    for i, (case, (edit, _, _)) in enumerate(DAMAGED.items()):
        d = made / f"damaged-{i}"
        shutil.copytree(made / "set", d)
        m = json.loads((d / "index.json").read_text())
        edit(d, m)
        (d / "index.json").write_text(json.dumps(m))
        outs[case] = made / f"from-damaged-{i}"
        argvs.append(_convert(made / "test.csv", outs[case], "--vocab-from", d))
    argvs += [["verify", str(made / f"damaged-{list(DAMAGED).index(c)}")] for c in LINKED]
    runs = run_commands(argvs, str(made / "damaged.json"))
    return {c: (r, outs[c]) for c, r in zip(DAMAGED, runs)}, dict(zip(LINKED, runs[len(DAMAGED):]))


@pytest.mark.parametrize("case", list(DAMAGED))
def test_vocab_from_checks_what_it_reads(damaged, case):
    _, code, pattern = DAMAGED[case]
    r, out = damaged[0][case]
    _error(r, code, pattern)
    assert "--vocab-from" in r.err and _nothing_written(out)


@pytest.mark.parametrize("case", LINKED)
def test_verify_refuses_linked_side_files(damaged, case):
    _error(damaged[1][case], 4, r"a shard set holds its own files")


@pytest.mark.parametrize("schema", ["s.json", "o.json"])
def test_overwrite_never_touches_files_behind_a_linked_vocab(tmp_path, made, schema):
    """A set whose vocab/ links to shared/: ``--overwrite`` (the same schema, or another whose vocabularies
    have other names) is refused before the conversion; shared/ and the set are as they were."""
    d = tmp_path / "set"
    shutil.copytree(made / "set", d)
    _link_dir(d, {})
    before = (snapshot(tmp_path / "set-shared"), snapshot(d))
    r = run_commands([_convert(made / "day.tsv", d, "--schema", made / schema, "--overwrite")],
                     str(tmp_path / "r.json"))[0]
    _error(r, 4, r"/set/vocab: is a symbolic link; a shard set holds its own files; tfpipe touched nothing")
    assert (snapshot(tmp_path / "set-shared"), snapshot(d)) == before


# -- a skip report of huge bad fields, out-of-range numbers --------------------------------------------------


def test_skip_report_keeps_a_capped_excerpt_of_huge_fields(tmp_path, made):
    """Three numeric fields of 2 MiB among 300 good rows: the manifest and stderr keep each bad field's first
    bytes and its length, never the field."""
    big = "9x" * (1 << 20)
    rows = ["\t".join(r) for r in _rows()] + [f"0\t{big}\tp\tv1", f"1\t{big}\tq\tv2", f"0\t{big}\tr\tv3"]
    (tmp_path / "big.tsv").write_text("\n".join(rows) + "\n")
    out = tmp_path / "out"
    r = run_commands([_convert(tmp_path / "big.tsv", out, "--schema", made / "s.json", "--on-error", "skip")],
                     str(tmp_path / "r.json"))[0]
    assert r.code == 0, r.err
    examples = json.loads((out / "index.json").read_text())["inputs"][0]["examples"]
    assert len(examples) == 3 and all("(2,097,152 bytes)" in ex and len(ex) < 400 for ex in examples)
    assert (out / "index.json").stat().st_size < 20_000 and len(r.err) < 4_000


@pytest.mark.parametrize("extra, pattern", [
    (["--hash-buckets", str(1 << 63)], r"hash_buckets must be an integer in \[1, \d+\]"),
    (["--seed", str(1 << 64)], r"seed must be an integer in \[0, 18446744073709551615\]"),
])
def test_numbers_out_of_range_are_one_line(tmp_path, made, extra, pattern):
    r = run_commands([_convert(made / "day.tsv", tmp_path / "out", "--schema", made / "s.json", *extra)],
                     str(tmp_path / "r.json"))[0]
    _error(r, 2, pattern)
    assert _nothing_written(tmp_path / "out")
