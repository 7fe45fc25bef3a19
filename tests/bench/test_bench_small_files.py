"""Smoke run of ``tfpipe bench small-files`` (tiny: it runs, reports and cleans up; not the speed)."""
import json

from bench.commands.small_files import format_report, run_benchmark
from converters.cli import main


def test_smoke_run(tmp_path):
    r = run_benchmark(files=30, file_bytes=1000, rounds=1, workdir=str(tmp_path))
    assert r["files"] == 30 and r["records"] > 30 and r["many_seconds"] > 0 and r["ratio"] > 0
    assert "ratio" in format_report(r)
    assert list(tmp_path.iterdir()) == []


def test_cli_json(capsys):
    assert main(["bench", "small-files", "--files", "12", "--file-bytes", "600", "--repeats", "1", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["benchmark"] == "small-files" and out["files"] == 12
