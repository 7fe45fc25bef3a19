"""The rooms match their names: the SageMaker Processing engine lives beside Beam under
``converters/engines/processing/``, and ``sharding/`` holds only who-reads-what (topology, plan, cluster configs,
reshard, transfer) and never imports an engine."""
from __future__ import annotations

import ast
import pathlib

import pytest

ROOT = pathlib.Path(__file__).resolve().parent.parent
PROCESSING = ROOT / "converters" / "engines" / "processing"
PROCESSING_WORDS = ("processing", "hosts", "replicated", "sharded", "finalize", "workarea", "convert_job", "launch")


def _imports(path: pathlib.Path) -> set[str]:
    found = set()
    for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
        if isinstance(node, ast.Import):
            found.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            found.add(node.module)
    return found


def processing_modules_in(folder: pathlib.Path) -> list[str]:
    return sorted(p.name for p in folder.glob("*.py") if any(w in p.stem for w in PROCESSING_WORDS))


def test_no_processing_module_in_sharding():
    assert processing_modules_in(ROOT / "sharding") == []


def test_the_checker_sees_a_processing_module(tmp_path):
    (tmp_path / "processing_config.py").write_text("")
    (tmp_path / "plan.py").write_text("")
    assert processing_modules_in(tmp_path) == ["processing_config.py"]


@pytest.mark.parametrize("module", ["instance", "config", "hosts", "job", "workarea", "finalize", "sharded",
                                    "replicated", "request", "launch"])
def test_the_processing_engine_sits_under_engines(module):
    assert (PROCESSING / f"{module}.py").is_file()


@pytest.mark.parametrize("path", sorted((ROOT / "sharding").glob("*.py")), ids=lambda p: p.name)
def test_sharding_never_imports_an_engine(path):
    bad = sorted(m for m in _imports(path) if m.startswith("converters.engines"))
    assert not bad, f"{path.name} imports {bad}"


@pytest.mark.parametrize("path", sorted(PROCESSING.glob("*.py")), ids=lambda p: p.name)
def test_the_processing_engine_never_imports_the_cli(path):
    bad = sorted(m for m in _imports(path) if m.startswith("converters.cli"))
    assert not bad, f"{path.name} imports {bad}: the CLI parses, the engine receives options objects"
