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
