"""bench.cli: every ``tfpipe bench X`` is one module of ``bench/commands/`` (``bench all``: ``bench/suite/``) of one
shape — ``add_parser(bench_subparsers)`` returning its parser, and ``run(args)`` — and every such module is
registered."""
from __future__ import annotations

import argparse
import importlib
import pathlib

import pytest

from bench.cli import BENCHMARKS, register

COMMANDS = pathlib.Path(__file__).resolve().parents[2] / "bench" / "commands"


def test_every_command_module_is_registered():
    modules = sorted(f"bench.commands.{p.stem}" for p in COMMANDS.glob("*.py") if p.stem != "__init__")
    assert sorted(BENCHMARKS) == sorted([*modules, "bench.suite.command"])


@pytest.mark.parametrize("name", BENCHMARKS)
def test_one_shape(name):
    mod = importlib.import_module(name)
    sub = argparse.ArgumentParser().add_subparsers()
    parser = mod.add_parser(sub)
    assert isinstance(parser, argparse.ArgumentParser) and callable(mod.run)
    assert {"add_parser", "run"} <= set(mod.__all__)


def test_register_dispatches_to_run():
    parser = argparse.ArgumentParser()
    register(parser.add_subparsers())
    args = parser.parse_args(["bench", "overhead"])
    assert args.func is importlib.import_module("bench.commands.overhead").run


@pytest.mark.parametrize("argv, option", [
    (["threads", "--timeout", "1e18"], "--timeout"),
    (["tune", "--tune-seconds", "1e18"], "--tune-seconds"),
    (["tune", "--max-seconds", "1e300"], "--max-seconds"),
    (["overhead", "--step-ms", "1e18"], "--step-ms"),
    (["pipeline", "--step-ms", "nan"], "--step-ms"),
])
def test_durations_past_their_bound_are_usage_errors(argv, option, capsys):
    """A duration large enough to overflow a timer (``bench all --timeout 1e18`` raised OverflowError) or to run
    for ever is refused while the arguments are parsed, in one line naming the option and its range."""
    from converters.cli import main
    from converters.util.errors import USAGE_EXIT

    with pytest.raises(SystemExit) as exc:
        main(["bench", *argv])
    assert exc.value.code == USAGE_EXIT
    errors = [ln for ln in capsys.readouterr().err.splitlines() if ": error: " in ln]
    assert len(errors) == 1 and f"argument {option}: expected" in errors[0] and " to " in errors[0], errors


@pytest.mark.parametrize("argv, match", [
    (["--rows", "100"], "--rows 100: too few rows to time at --batch-size 1024"),
    (["--rows", "1024"], "--rows 1,024: too few rows"),
    (["--rows", "5000", "--windows", "64"], "--windows 64: too few windows to time at --text-batch-size 64"),
])
def test_bench_layout_refuses_too_few_rows_before_writing_anything(argv, match, capsys, tmp_path, monkeypatch):
    """``bench layout --rows 100`` wrote both layouts and timed for half a minute before it said "too few
    rows": now a usage error before anything is written (nothing appears in the temporary directory)."""
    from converters.cli import main
    from converters.util.errors import USAGE_EXIT

    monkeypatch.setenv("TMPDIR", str(tmp_path))
    import tempfile
    monkeypatch.setattr(tempfile, "tempdir", None)
    with pytest.raises(SystemExit) as exc:
        main(["bench", "layout", *argv])
    assert exc.value.code == USAGE_EXIT
    errors = [ln for ln in capsys.readouterr().err.splitlines() if ": error: " in ln]
    assert len(errors) == 1 and match in errors[0], errors
    assert list(tmp_path.iterdir()) == []


def test_bench_layout_checks_a_sets_rows(tmp_path, capsys):
    from converters.cli import main
    from converters.libsvm.synthetic import write_criteo_shards

    write_criteo_shards(str(tmp_path / "s"), 50)
    with pytest.raises(SystemExit):
        main(["bench", "layout", str(tmp_path / "s"), "--windows", "0"])
    assert "holds 50 rows: too few rows to time at --batch-size 1024" in capsys.readouterr().err
