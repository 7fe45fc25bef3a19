"""The code vocabulary of ``docs/architecture.md``: names that do not say which thing they mean are not defined
(``block_size``: of what; a bare ``Plan``: deciding what), and a class name is defined once."""
from __future__ import annotations

import ast
import collections
import pathlib

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[1]
PACKAGES = ("converters", "sharding", "pipeline", "bench")
VAGUE = {"block_size": "say the unit: block_rows, block_bytes, block_positions",
         "Plan": "say what is decided: ShardPlan, ReadPlan, GraphPlan, SetPlan"}


def defined_names(tree: ast.AST):
    """(name, line) of every class, function, argument and assigned name a module defines."""
    for n in ast.walk(tree):
        if isinstance(n, (ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
            yield n.name, n.lineno
        elif isinstance(n, ast.arg):
            yield n.arg, n.lineno
        elif isinstance(n, ast.Name) and isinstance(n.ctx, ast.Store):
            yield n.id, n.lineno


def modules():
    for pkg in PACKAGES:
        for path in sorted((ROOT / pkg).rglob("*.py")):
            yield path.relative_to(ROOT).as_posix(), ast.parse(path.read_text())


@pytest.mark.parametrize("source,found", [
    ("def read(paths, block_size=4096): pass", ["block_size"]),
    ("class Plan: pass", ["Plan"]),
    ("def read(paths, block_bytes=4096): pass", []),
    ("class SetPlan: pass", []),
])
def test_the_check_sees_a_vague_name(source, found):
    assert [n for n, _ in defined_names(ast.parse(source)) if n in VAGUE] == found


def test_no_vague_name_is_defined():
    hits = [f"{rel}:{line}: {name} ({VAGUE[name]})" for rel, tree in modules()
            for name, line in defined_names(tree) if name in VAGUE]
    assert hits == []


def test_each_public_class_name_is_defined_once():
    where = collections.defaultdict(list)
    for rel, tree in modules():
        for n in tree.body:                     # module-level classes only: a local helper class is private
            if isinstance(n, ast.ClassDef) and not n.name.startswith("_"):
                where[n.name].append(rel)
    twice = {name: rels for name, rels in where.items() if len(rels) > 1}
    assert twice == {}
