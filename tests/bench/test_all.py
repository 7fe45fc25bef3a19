"""``tfpipe bench all``: a smoke run (tiny sizes, two cheap benchmarks, two runs each, each in its own process)
checks the JSON and the markdown rows; the summary's arithmetic and verdicts on hand-made runs; usage errors."""
import json

import pytest

from bench.suite.command import format_markdown, format_table
from bench.suite.runner import summarize
from bench.suite.specs import BENCHMARKS, DEFAULT, OPTIONAL
from converters.cli import main
from converters.util.errors import USAGE_EXIT

CHEAP = ("small-files", "overhead")


def test_smoke_run_two_benchmarks_twice(tmp_path, capsys):
    out, md = tmp_path / "all.json", tmp_path / "rows.md"
    rc = main(["bench", "all", "--smoke", "--repeats", "2", "--only", ",".join(CHEAP), "--json",
               "--json-out", str(out), "--markdown", str(md), "--no-progress"])
    captured = capsys.readouterr()
    assert rc == 0, captured.err
    assert captured.err == ""  # --no-progress: nothing on stderr
    result = json.loads(captured.out)
    assert json.loads(out.read_text()) == result
    assert result["repeats"] == 2 and result["smoke"] is True and result["cpu_count"] >= 1
    assert [b["name"] for b in result["benchmarks"]] == list(CHEAP)
    for b in result["benchmarks"]:
        assert b["runs_asked"] == b["runs_ok"] == 2 and b["errors"] == []
        assert [r["run"] for r in b["runs"]] == [1, 2]
        for r in b["runs"]:
            assert r["load_before"] >= 0 and r["load_after"] >= 0 and r["cpu_count"] >= 1 and r["seconds"] > 0
        loads = [x for r in b["runs"] for x in (r["load_before"], r["load_after"])]
        assert b["load"] == {"min": min(loads), "max": max(loads)}
        ratio = next(m for m in b["metrics"] if m["key"] == "ratio")
        assert ratio["runs"] == 2 and len(ratio["values"]) == 2
        assert ratio["min"] <= ratio["median"] <= ratio["max"]
        assert ratio["median"] == pytest.approx(sum(ratio["values"]) / 2)
        assert isinstance(ratio["median_meets"], bool) and 0 <= ratio["runs_meeting"] <= 2
        assert ratio["all_runs_meet"] == (ratio["runs_meeting"] == 2)
    rows = md.read_text().splitlines()
    assert rows[1:3] == ["| benchmark | measured | target |", "|---|---|---|"]
    body = rows[3:]
    assert len(body) == 2 and body[0].startswith("| `tfpipe bench small-files` (60 ")
    assert body[1].startswith("| `tfpipe bench overhead` (")
    for row in body:
        assert row.count(" | ") == 2 and "of 2 runs, load " in row and "by the median" in row


def run(n, values, loads=(1.0, 1.2)):
    return {"run": n, "seconds": 1.0, "load_before": loads[0], "load_after": loads[1], "cpu_count": 2,
            "cores_allowed": 2, "metrics": values}


def test_the_median_can_meet_while_a_run_misses():
    runs = [run(1, {"ratio": 7.9, "ratio_cpu": 8.4}), run(2, {"ratio": 8.5, "ratio_cpu": 8.1}, (2.5, 0.9)),
            run(3, {"ratio": 8.2, "ratio_cpu": 8.9}), {"run": 4, "seconds": 1.0, "load_before": 1.1,
                                                        "load_after": 1.1, "error": "exit 1: boom"}]
    b = summarize("convert-libsvm-sparse", runs)
    assert b["runs_asked"] == 4 and b["runs_ok"] == 3 and b["errors"] == ["exit 1: boom"]
    assert b["load"] == {"min": 0.9, "max": 2.5}
    wall = b["metrics"][0]
    assert (wall["median"], wall["min"], wall["max"]) == (8.2, 7.9, 8.5)
    assert wall["median_meets"] is True and wall["all_runs_meet"] is False and wall["runs_meeting"] == 2
    cpu = b["metrics"][1]
    assert cpu["median_meets"] is True and cpu["all_runs_meet"] is True
    rec = next(m for m in b["metrics"] if m["key"] == "tfpipe_rec_s")
    assert rec["runs"] == 0 and "median" not in rec  # not in these runs' metrics: no figure, no verdict
    result = {"repeats": 4, "started": "t", "cpu_count": 2, "cores_allowed": 2, "seconds": 9.0, "smoke": False,
              "fresh_process": "fresh", "benchmarks": [b]}
    table = format_table(result)
    assert "8.20×" in table and "7.90–8.50×" in table and "NO (2/3 met)" in table and "0.90–2.50" in table
    assert "NO RUNS" in table
    md = format_markdown(result)
    assert "**8.20×** [7.90–8.50×]" in md and "of 3 runs, load 0.90–2.50" in md
    assert "≥ 8× (met by the median; 2/3 runs)" in md


@pytest.mark.parametrize("key, values, median_meets, all_meet", [
    ("ratio", [1.4, 1.6, 1.5], True, False),     # convert-text: <= 1.5
    ("ratio", [1.6, 1.7, 1.2], False, False),
    ("ratio", [1.0, 1.1, 1.2], True, True),
])
def test_an_upper_bound_target(key, values, median_meets, all_meet):
    b = summarize("convert-text", [run(i + 1, {key: v}) for i, v in enumerate(values)])
    m = b["metrics"][0]
    assert (m["median_meets"], m["all_runs_meet"]) == (median_meets, all_meet)


def test_every_benchmark_has_rows_naming_its_metrics():
    assert set(DEFAULT) | set(OPTIONAL) == set(BENCHMARKS) and "tune" in OPTIONAL and "beam" in OPTIONAL
    for b in BENCHMARKS.values():
        assert b.rows and b.size(True) and b.size(False)
        for row in b.rows:
            for key in row.keys:
                b.metric(key)  # KeyError: a row shows a metric the benchmark does not report


@pytest.mark.parametrize("argv, expected", [
    (["--only", "overhed"], "invalid choice: 'overhed'"),
    (["--only", "small-files,nope"], "invalid choice: 'nope'"),
    (["--with", "tun"], "invalid choice: 'tun'"),
    (["--repeats", "0"], "--repeats"),
    (["--timeout", "1e18"], "--timeout: expected a number of seconds from 0 (excluded) to 604800"),
    (["--timeout", "inf"], "--timeout"),
])
def test_usage_errors_exit_64_with_one_error_line(argv, expected, capsys):
    with pytest.raises(SystemExit) as exc:
        main(["bench", "all", *argv])
    assert exc.value.code == USAGE_EXIT
    err = capsys.readouterr().err
    errors = [ln for ln in err.splitlines() if ": error: " in ln]
    assert len(errors) == 1 and expected in errors[0], err


def test_a_run_past_timeout_is_recorded_as_failed_and_the_command_exits_1(tmp_path, capsys):
    out = tmp_path / "all.json"
    rc = main(["bench", "all", "--smoke", "--repeats", "1", "--only", "overhead", "--timeout", "0.2",
               "--json-out", str(out), "--no-progress"])
    captured = capsys.readouterr()
    assert rc == 1
    b = json.loads(out.read_text())["benchmarks"][0]
    assert b["runs_ok"] == 0 and b["errors"] == ["timed out after 0.2 s"]
    assert b["runs"][0]["load_before"] is not None and "metrics" not in b["runs"][0]
    assert "NO RUNS" in captured.out and "runs failed in overhead" in captured.err


def test_readme_speed_table_is_a_bench_all_run():
    """The README's "Measured speed" rows are pasted from one ``tfpipe bench all --markdown`` run: its header
    comment is there, and every row ``bench all`` makes (default and optional benchmarks) is in the table with
    a median, a range and the load it ran under."""
    import re
    from pathlib import Path

    from bench.suite.specs import BENCHMARKS

    text = Path(__file__).resolve().parents[2].joinpath("README.md").read_text(encoding="utf-8")
    section = text[text.index("## Measured speed"):text.index("## Documentation")]
    assert re.search(r"<!-- tfpipe bench all --repeats \d+, \d{4}-\d\d-\d\dT", section)
    lines = [ln for ln in section.splitlines() if ln.startswith("| ")]
    for bench in BENCHMARKS.values():
        for row in bench.rows:
            found = [ln for ln in lines if ln.startswith(f"| {row.title} (")]
            assert found, f"README has no row for {row.title!r} ({bench.name})"
            assert re.search(r"median \[min–max\] of \d+ runs?, load [\d.]+–[\d.]+\)", found[0]), found[0]
            assert re.search(r"\*\*[^*]+\*\* \[[^\]]+\]", found[0]), found[0]


@pytest.mark.parametrize("option", ["--json-out", "--markdown"])
@pytest.mark.parametrize("where, reason", [("missing/x.json", "does not exist"), (".", "is a directory")])
def test_an_output_path_that_cannot_take_a_file_is_refused_before_any_run(tmp_path, capsys, monkeypatch, option,
                                                                         where, reason):
    """Refused while parsing (exit 64): no benchmark ran, nothing was lost at the end of a long run."""
    monkeypatch.chdir(tmp_path)
    with pytest.raises(SystemExit) as exc:
        main(["bench", "all", "--smoke", "--repeats", "1", "--only", "overhead", option, where])
    assert exc.value.code == USAGE_EXIT
    err = capsys.readouterr().err
    errors = [ln for ln in err.splitlines() if ": error: " in ln]
    assert len(errors) == 1 and f"argument {option}: {where}: " in errors[0] and reason in errors[0], err
    assert "run 1 of 1" not in err  # the progress line of a first run
    assert sorted(p.name for p in tmp_path.iterdir()) == []


def test_a_json_out_link_stays_a_link(tmp_path, capsys):
    target = tmp_path / "kept" / "all.json"
    target.parent.mkdir()
    link = tmp_path / "all.json"
    link.symlink_to(target)
    rc = main(["bench", "all", "--smoke", "--repeats", "1", "--only", "overhead", "--timeout", "0.2",
               "--json-out", str(link), "--no-progress"])
    capsys.readouterr()
    assert rc == 1  # the run timed out: recorded as failed, the JSON still written
    assert link.is_symlink() and json.loads(target.read_text())["benchmarks"][0]["name"] == "overhead"
