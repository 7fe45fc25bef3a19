"""The architecture rule, read from the code: every import of every module (top level and inside functions)
is parsed with ``ast`` and must go down the layers, never form a cycle, and no module is over 450 lines.

Layers, lowest first: ``converters`` < ``sharding`` < ``pipeline`` < ``bench``. Inside ``converters``:
``util`` < ``tfrecord`` < ``storage`` < ``shardset`` < ``sources``, ``prep`` < ``registry`` < ``engines`` < formats
(``libsvm``, ``text``: neither imports the other; each builds its two-pass job on ``engines``, which find a format
by name through ``registry`` and never import one) < ``cli``. A package ``__init__`` may import its own submodules
(re-exports).
"""
from __future__ import annotations

import ast
import pathlib

import pytest

ROOT = pathlib.Path(__file__).resolve().parent.parent
PACKAGES = ("converters", "sharding", "pipeline", "bench")
CONVERTERS_LAYERS = {"util": 0, "tfrecord": 1, "storage": 2, "shardset": 3, "sources": 4, "prep": 4, "registry": 5,
                     "engines": 6, "libsvm": 7, "text": 7, "cli": 8}
MAX_LINES = 450


def module_name(path: pathlib.Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def all_modules() -> dict[str, pathlib.Path]:
    out = {}
    for pkg in PACKAGES:
        for path in sorted((ROOT / pkg).rglob("*.py")):
            out[module_name(path)] = path
    return out


MODULES = all_modules()


def is_package(name: str) -> bool:
    return MODULES[name].name == "__init__.py"


def resolve(name: str) -> str | None:
    """The longest known module that ``name`` (a module or module.attribute) refers to."""
    while name:
        if name in MODULES:
            return name
        name = name.rpartition(".")[0]
    return None


def imports_of(module: str) -> set[str]:
    """tfpipe modules imported anywhere in ``module`` (absolute and relative, any depth)."""
    tree = ast.parse(MODULES[module].read_text(), filename=str(MODULES[module]))
    package = module if is_package(module) else module.rpartition(".")[0]
    found: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            targets = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")
                base = base[:len(base) - (node.level - 1)]
                prefix = ".".join(base + ([node.module] if node.module else []))
            else:
                prefix = node.module or ""
            targets = [f"{prefix}.{alias.name}" for alias in node.names]
        else:
            continue
        for t in targets:
            r = resolve(t)
            if r is not None and r != module:
                found.add(r)
    return found


GRAPH = {m: imports_of(m) for m in MODULES}


def layer(module: str) -> tuple[int, str | None]:
    """(package rank, converters subpackage or None)."""
    parts = module.split(".")
    rank = PACKAGES.index(parts[0])
    sub = parts[1] if parts[0] == "converters" and len(parts) > 1 and parts[1] in CONVERTERS_LAYERS else None
    return rank, sub


def upward(src: str, dst: str) -> str | None:
    (rs, ss), (rd, sd) = layer(src), layer(dst)
    if rd > rs:
        return f"{src} imports {dst}: {PACKAGES[rd]} sits above {PACKAGES[rs]}"
    if rs == rd == 0 and src != "converters" and dst != "converters":
        if ss is None or sd is None:
            return f"{src} -> {dst}: every converters module belongs to a layer {sorted(CONVERTERS_LAYERS)}"
        if ss != sd and CONVERTERS_LAYERS[sd] >= CONVERTERS_LAYERS[ss]:
            return f"{src} imports {dst}: converters.{sd} is not below converters.{ss}"
    if rs == rd == 0 and dst == "converters" and src != "converters":
        return f"{src} imports the converters package __init__ (import the defining module instead)"
    return None


def test_the_import_graph_is_not_empty():
    """Guard against a parser that finds nothing (then every check below would pass vacuously)."""
    assert len(MODULES) > 60
    assert "converters.util.errors" in GRAPH["sharding.plan"]
    assert "converters.shardset.writer" in GRAPH["converters.prep.writer"]
    assert "converters.libsvm.block" in GRAPH["converters.libsvm.workers"]  # relative, inside a function too


@pytest.mark.parametrize("module", sorted(MODULES))
def test_no_upward_import(module):
    problems = [p for dst in sorted(GRAPH[module]) if (p := upward(module, dst))]
    assert not problems, "\n".join(problems)


def _own_reexport(src: str, dst: str) -> bool:
    return is_package(src) and dst.startswith(src + ".")


def find_cycle() -> list[str] | None:
    """One import cycle (a list of modules) or None; a package ``__init__`` importing its own submodules
    does not count."""
    edges = {m: sorted(d for d in ds if not _own_reexport(m, d)) for m, ds in GRAPH.items()}
    state: dict[str, int] = {}
    stack: list[str] = []

    def visit(m: str) -> list[str] | None:
        state[m] = 1
        stack.append(m)
        for d in edges[m]:
            if state.get(d) == 1:
                return stack[stack.index(d):] + [d]
            if d not in state:
                found = visit(d)
                if found:
                    return found
        stack.pop()
        state[m] = 2
        return None

    for m in sorted(edges):
        if m not in state:
            found = visit(m)
            if found:
                return found
    return None


def test_no_import_cycle():
    cycle = find_cycle()
    assert cycle is None, " -> ".join(cycle)


def test_cycle_finder_finds_a_cycle(monkeypatch):
    monkeypatch.setitem(GRAPH, "converters.util.units", GRAPH["converters.util.units"] | {"converters.util.errors"})
    monkeypatch.setitem(GRAPH, "converters.util.errors", GRAPH["converters.util.errors"] | {"converters.util.units"})
    assert find_cycle() is not None


@pytest.mark.parametrize("src, dst, bad", [
    ("converters.util.units", "converters.shardset.writer", True),
    ("converters.libsvm.convert", "converters.text.readers", True),
    ("converters.shardset.writer", "converters.storage.base", False),
    ("sharding.plan", "pipeline.spec", True),
    ("pipeline.spec", "sharding.plan", False),
    ("converters.cli.main", "converters.libsvm.convert", False),
    ("converters.libsvm.job", "converters.engines.core", False),
    ("converters.engines.beam", "converters.registry", False),
    ("converters.engines.beam", "converters.libsvm.job", True),
    ("converters.registry", "converters.engines.core", True),
])
def test_layer_rule_table(src, dst, bad):
    assert (upward(src, dst) is not None) == bad


@pytest.mark.parametrize("module", sorted(MODULES))
def test_module_size(module):
    lines = len(MODULES[module].read_text().splitlines())
    assert lines <= MAX_LINES, f"{MODULES[module].relative_to(ROOT)} has {lines} lines: split it along its seams"


OBJECT_READS = {"get_object", "download_file", "download_fileobj", "get_stream"}  # boto3 reads, and ours


def object_reads(module: str) -> list[str]:
    """``module``'s calls that read a remote object's bytes other than through ``converters.storage``: the
    boto3 reads (``client.get_object``, ``download_file``, ``download_fileobj``), S3Storage's raw
    ``get_stream``, and ``.open(...)`` of a boto3 resource's object."""
    tree = ast.parse(MODULES[module].read_text())
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
            name = node.func.attr
            if name in OBJECT_READS or (name == "open" and "Object" in ast.unparse(node.func.value)):
                found.append(f"{module}:{node.lineno} {ast.unparse(node.func)}")
    return found


@pytest.mark.parametrize("module", sorted(m for m in MODULES if not m.startswith("converters.storage")))
def test_no_s3_object_read_outside_storage(module):
    assert not object_reads(module), "read remote objects through converters.storage (download.py)"


def test_object_read_finder_finds_one(monkeypatch, tmp_path):
    bad = tmp_path / "bad.py"
    bad.write_text("def f(c):\n    return c.get_object(Bucket='b', Key='k')['Body'].read()\n")
    monkeypatch.setitem(MODULES, "bad", bad)
    assert object_reads("bad") == ["bad:2 c.get_object"]
