"""The architecture rule, read from the code: every import of every module (top level and inside functions)
is parsed with ``ast`` and must go down the layers, never form a cycle, and no module is over 450 lines.

Layers, lowest first: ``converters`` < ``sharding`` < ``pipeline`` < ``bench``. Inside ``converters``:
``util`` < ``tfrecord`` < ``storage`` < ``shardset`` < ``sources``, ``prep`` < ``registry`` < ``engines`` < formats
(``libsvm``, ``text``: neither imports the other; each builds its two-pass job on ``engines``, which find a format
by name through ``registry`` and never import one) < ``cli``. Inside ``bench``: ``infra`` < ``core`` < ``report``
< ``commands`` < ``suite`` < ``cli``. A package ``__init__`` may import its own submodules (re-exports).

A package in ``ROOMED`` is kept in rooms: at most ``MAX_TOP_MODULES`` modules at its top, at least ``MIN_ROOMS``
sub-packages, each with a docstring, and every module named in ``docs/architecture.md``'s trees.
"""
from __future__ import annotations

import ast
import pathlib

import pytest

ROOT = pathlib.Path(__file__).resolve().parent.parent
PACKAGES = ("converters", "sharding", "pipeline", "bench")
# package -> its sub-packages (and top modules) in layers, lowest first; one layer imports only from lower ones
SUBPACKAGE_LAYERS = {
    "converters": {"util": 0, "tfrecord": 1, "storage": 2, "shardset": 3, "sources": 4, "prep": 4, "registry": 5,
                   "engines": 6, "libsvm": 7, "text": 7, "cli": 8},
    "bench": {"infra": 0, "core": 1, "report": 2, "commands": 3, "suite": 4, "cli": 5},
}
CONVERTERS_LAYERS = SUBPACKAGE_LAYERS["converters"]
ROOMED = ("bench",)
MAX_TOP_MODULES = 8
MIN_ROOMS = 3
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
    """(package rank, its sub-package in ``SUBPACKAGE_LAYERS`` or None)."""
    parts = module.split(".")
    rank = PACKAGES.index(parts[0])
    layers = SUBPACKAGE_LAYERS.get(parts[0], {})
    sub = parts[1] if len(parts) > 1 and parts[1] in layers else None
    return rank, sub


def upward(src: str, dst: str) -> str | None:
    (rs, ss), (rd, sd) = layer(src), layer(dst)
    if rd > rs:
        return f"{src} imports {dst}: {PACKAGES[rd]} sits above {PACKAGES[rs]}"
    pkg = PACKAGES[rs]
    if rs != rd or pkg not in SUBPACKAGE_LAYERS:
        return None
    layers = SUBPACKAGE_LAYERS[pkg]
    if src != pkg and dst != pkg:
        if ss is None or sd is None:
            return f"{src} -> {dst}: every {pkg} module belongs to a layer {sorted(layers)}"
        if ss != sd and layers[sd] >= layers[ss]:
            return f"{src} imports {dst}: {pkg}.{sd} is not below {pkg}.{ss}"
    if dst == pkg and src != pkg:
        return f"{src} imports the {pkg} package __init__ (import the defining module instead)"
    return None


def test_the_import_graph_is_not_empty():
    """Guard against a parser that finds nothing (then every check below would pass vacuously)."""
    assert len(MODULES) > 60
    assert "converters.util.errors" in GRAPH["sharding.plan"]
    assert "converters.shardset.writer" in GRAPH["converters.prep.writer"]
    assert "converters.libsvm.block" in GRAPH["converters.libsvm.workers"]  # relative, inside a function too
    assert "bench.infra.nvml" in GRAPH["bench.core.measure"]  # bench: relative, two levels, inside a function


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
    ("sharding.plan", "pipeline.spec.pipelinespec", True),
    ("pipeline.spec.pipelinespec", "sharding.plan", False),
    ("converters.cli.main", "converters.libsvm.convert", False),
    ("converters.libsvm.job", "converters.engines.core", False),
    ("converters.engines.beam", "converters.registry", False),
    ("converters.engines.beam", "converters.libsvm.job", True),
    ("converters.registry", "converters.engines.core", True),
    ("bench.core.measure", "bench.infra.nvml", False),
    ("bench.infra.nvml", "bench.core.measure", True),
    ("bench.core.compare", "bench.report.tables", True),
    ("bench.commands.pipeline", "bench.report.plot", False),
    ("bench.commands.pipeline", "bench.suite.specs", True),
    ("bench.suite.specs", "bench.commands.tune", False),
    ("bench.core.variants", "bench", True),
])
def test_layer_rule_table(src, dst, bad):
    assert (upward(src, dst) is not None) == bad


@pytest.mark.parametrize("module", sorted(MODULES))
def test_module_size(module):
    lines = len(MODULES[module].read_text().splitlines())
    assert lines <= MAX_LINES, f"{MODULES[module].relative_to(ROOT)} has {lines} lines: split it along its seams"


# -- rooms: few modules at a package's top, its sub-packages named and documented ------------------------------

ARCHITECTURE = ROOT / "docs" / "architecture.md"


def tree_paths(markdown: str) -> set[str]:
    """Paths drawn in a page's code blocks as indented trees (``bench/``, then ``  core/``, then
    ``    measure.py   what it holds``): each line's first word, joined to the folders above it by indentation."""
    found: set[str] = set()
    in_block = False
    stack: list[tuple[int, str]] = []
    for line in markdown.splitlines():
        if line.startswith("```"):
            in_block, stack = not in_block, []
            continue
        if not in_block or not line.strip():
            continue
        indent = len(line) - len(line.lstrip())
        word = line.split()[0]
        while stack and stack[-1][0] >= indent:
            stack.pop()
        path = "".join(name for _, name in stack) + word
        found.add(path)
        if word.endswith("/"):
            stack.append((indent, word))
    return found


def room_problems(pkg: str, modules: dict[str, pathlib.Path], documented: set[str]) -> list[str]:
    """What keeps ``pkg`` from reading as a house: too many top modules, too few sub-packages, a sub-package
    without a docstring or outside ``SUBPACKAGE_LAYERS``, a module no tree of the architecture page names."""
    mods = {m: p for m, p in modules.items() if m == pkg or m.startswith(pkg + ".")}
    top = sorted(m for m, p in mods.items() if m.count(".") <= 1 and p.name != "__init__.py" or m == pkg)
    rooms = sorted(m for m, p in mods.items() if m.count(".") == 1 and p.name == "__init__.py")
    problems = []
    if len(top) > MAX_TOP_MODULES:
        problems.append(f"{pkg}/ has {len(top)} modules at its top (at most {MAX_TOP_MODULES}): {top}")
    if len(rooms) < MIN_ROOMS:
        problems.append(f"{pkg}/ has {len(rooms)} sub-packages (at least {MIN_ROOMS})")
    layers = SUBPACKAGE_LAYERS.get(pkg, {})
    for room in rooms:
        if room.split(".")[1] not in layers:
            problems.append(f"{room} has no layer in SUBPACKAGE_LAYERS[{pkg!r}]")
        if not ast.get_docstring(ast.parse(mods[room].read_text())):
            problems.append(f"{room}/__init__.py has no docstring saying what lives there")
    for m, p in sorted(mods.items()):
        rel = p.relative_to(ROOT).as_posix()
        if m in rooms:  # a sub-package is named by its folder
            rel = rel.removesuffix("__init__.py")
        if rel not in documented:
            problems.append(f"{rel} is not named in docs/architecture.md")
    return problems


@pytest.mark.parametrize("pkg", ROOMED)
def test_rooms(pkg):
    problems = room_problems(pkg, MODULES, tree_paths(ARCHITECTURE.read_text()))
    assert not problems, "\n".join(problems)


def test_room_check_sees_problems(tmp_path):
    doc = "```\nbench/\n  __init__.py   api\n  core/\n    measure.py   x\n```\n"
    assert tree_paths(doc) == {"bench/", "bench/__init__.py", "bench/core/", "bench/core/measure.py"}
    flat = {"bench": ROOT / "bench" / "__init__.py",
            **{f"bench.m{i}": ROOT / "bench" / f"m{i}.py" for i in range(MAX_TOP_MODULES)}}
    problems = room_problems("bench", flat, {"bench/__init__.py"})
    assert any("at most" in p for p in problems) and any("sub-packages" in p for p in problems)
    assert any("bench/m0.py is not named" in p for p in problems)
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
