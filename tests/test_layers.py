"""The architecture rule, read from the code: every import of every module (top level and inside functions)
is parsed with ``ast`` and must go down the layers, never form a cycle, and no module is over 450 lines.

Layers, lowest first: ``converters`` < ``sharding`` < ``pipeline`` < ``bench``. Inside a package with a table in
``LAYERS`` each sub-package (or top module) has a rank and imports only from its own layer and the ones below:

- ``converters``: ``util`` < ``tfrecord`` < ``storage`` < ``shardset`` < ``sources``, ``prep`` < ``registry`` <
  ``engines`` < formats (``libsvm``, ``text``, ``tabular``: none imports another; each builds its two-pass job on
  ``engines``, which find a format by name through ``registry`` and never import one) < ``cli``.
- ``sharding``: ``epochs``, ``groups``, ``relayout``, ``transfer`` < ``topology``, ``resharding`` < ``plan`` < ``configs`` < ``cli``.
- ``pipeline``: ``spec`` (pure) < ``remote`` < ``service`` (the servers) < ``plan`` < ``resume`` < ``graph`` < the front on top:
  ``threads``, ``lint`` < ``build`` < ``describe``, ``training`` < ``cli`` (the top modules, ``TOPS``).
- ``bench``: ``infra`` < ``core`` < ``report`` < ``commands`` < ``suite`` < ``cli`` (``TOPS``).

Imports made by string count too: ``importlib.import_module("x.y")``, an entry-point style ``"x.y:attr"`` or a
dotted module name given as a whole string constant (a lazy table's ``".sub.module"`` in a package
``__init__`` resolves against the package). So a command group found by name is an import like any other:
the ``tfpipe`` command finds its groups through the ``tfpipe.commands`` entry points (``setup.cfg``), never by
naming an upper package in ``converters``.

No module outside ``converters/storage`` reads an S3 object (one downloader, one retry policy).

A package ``__init__`` may import its own submodules (re-exports). For the packages in ``ROOMS``: at most
``max_top`` modules at the top of the package, at least ``min_subpackages`` sub-packages, no import cycle
between its sub-packages, and every module named in ``docs/architecture.md``'s tree of the package. No module
imports another package's private names (``from x import _y`` with ``x`` in another folder).
"""
from __future__ import annotations

import ast
import pathlib
import re

import pytest

ROOT = pathlib.Path(__file__).resolve().parent.parent
PACKAGES = ("converters", "sharding", "pipeline", "bench")
CONVERTERS_LAYERS = {"util": 0, "tfrecord": 1, "storage": 2, "shardset": 3, "sources": 4, "prep": 4, "registry": 5,
                     "engines": 6, "libsvm": 7, "text": 7, "tabular": 7, "cli": 8}
PIPELINE_LAYERS = {"spec": 0, "remote": 1, "service": 2, "plan": 3, "resume": 4, "graph": 5}
PIPELINE_TOP = {"threads": 6, "lint": 6, "build": 7, "describe": 8, "training": 8, "cli": 9}
SHARDING_LAYERS = {"epochs": 0, "groups": 0, "relayout": 0, "transfer": 0, "topology": 1, "resharding": 1, "plan": 2,
                   "configs": 3, "cli": 4}
# per package: its layers (a sub-package or top module -> rank) and the top modules that share one layer
BENCH_LAYERS = {"infra": 0, "core": 1, "report": 2, "commands": 3, "suite": 4}
LAYERS = {"converters": CONVERTERS_LAYERS, "sharding": SHARDING_LAYERS, "pipeline": {**PIPELINE_LAYERS, **PIPELINE_TOP},
          "bench": {**BENCH_LAYERS, "cli": 5}}
TOPS = {"pipeline": tuple(PIPELINE_TOP), "bench": ("cli",)}   # the top modules of the packages kept in rooms
# packages kept in rooms: most modules at the top (``__init__`` included), fewest sub-packages
ROOMS = {"pipeline": {"max_top": 8, "min_subpackages": 3}, "bench": {"max_top": 8, "min_subpackages": 3}}
ARCHITECTURE = ROOT / "docs" / "architecture.md"
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


_DOTTED = re.compile(r"(\.*)([A-Za-z_][A-Za-z0-9_]*(?:\.[A-Za-z_][A-Za-z0-9_]*)*)(?::[A-Za-z_][A-Za-z0-9_]*)?")


# plug-in tables: names a loader above resolves (the format registry names the formats; a format names its
# command module, which the command line loads): data, not an import of the module that holds the table
PLUGIN_TABLES = {("converters.registry", "converters.libsvm.format"), ("converters.registry", "converters.text.format"),
                 ("converters.registry", "converters.tabular.format"),
                 ("converters.libsvm.format", "converters.cli.libsvm"), ("converters.text.format", "converters.cli.text"),
                 ("converters.tabular.format", "converters.cli.tabular")}


def _string_import(text: str, package: str) -> list[str]:
    """The tfpipe module a whole string names (``"pipeline.cli:register"``, ``"sharding.plan"``, or relative
    ``".plan.manifest"`` in a package), else nothing."""
    m = _DOTTED.fullmatch(text)
    if not m:
        return []
    dots, name = m.group(1), m.group(2)
    if dots:
        base = package.split(".")
        full = ".".join(base[:len(base) - (len(dots) - 1)] + [name])
        return [full] if full in MODULES else []
    if name.split(".")[0] in PACKAGES and (":" in text or (name in MODULES and "." in name)):
        return [name]
    return []


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
        elif isinstance(node, ast.Constant) and isinstance(node.value, str):
            targets = [t for t in _string_import(node.value, package) if (module, resolve(t)) not in PLUGIN_TABLES]
        else:
            continue
        for t in targets:
            r = resolve(t)
            if r is not None and r != module:
                found.add(r)
    return found


GRAPH = {m: imports_of(m) for m in MODULES}


def layer(module: str) -> tuple[int, str | None]:
    """(package rank, the module's layer inside its package (a sub-package or a top module) or None)."""
    parts = module.split(".")
    rank = PACKAGES.index(parts[0])
    if parts[0] not in LAYERS or len(parts) < 2:
        return rank, None
    return rank, parts[1] if parts[1] in LAYERS[parts[0]] else None


def upward(src: str, dst: str) -> str | None:
    (rs, ss), (rd, sd) = layer(src), layer(dst)
    pkg = PACKAGES[rs]
    if rd > rs:
        return f"{src} imports {dst}: {PACKAGES[rd]} sits above {pkg}"
    if rs == rd and pkg in LAYERS and src != pkg and dst != pkg:
        table = LAYERS[pkg]
        if ss is None or sd is None:
            return f"{src} -> {dst}: every {pkg} module belongs to a layer {sorted(table)}"
        if ss != sd and table[sd] >= table[ss]:
            return f"{src} imports {dst}: {pkg}.{sd} is not below {pkg}.{ss}"
    if rs == rd and pkg in LAYERS and dst == pkg and src != pkg:
        return f"{src} imports the {pkg} package __init__ (import the defining module instead)"
    return None


def test_string_imports_are_seen():
    """An entry-point string, an import_module argument and a lazy table's relative name are imports."""
    assert "pipeline.plan.manifest" in GRAPH["pipeline"]                 # lazy_exports(".plan.manifest")
    found = set()
    for text in ("bench.cli:register", "sharding.plan", ".plan.manifest"):
        found |= {resolve(t) for t in _string_import(text, "pipeline")}
    assert found == {"bench.cli", "sharding.plan", "pipeline.plan.manifest"}
    assert _string_import("a sentence, not a module", "pipeline") == []


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
    ("sharding.plan", "pipeline.spec.pipelinespec", True),
    ("pipeline.spec.pipelinespec", "sharding.plan", False),
    ("converters.cli.main", "converters.libsvm.convert", False),
    ("converters.libsvm.job", "converters.engines.core", False),
    ("converters.engines.beam", "converters.registry", False),
    ("converters.engines.beam", "converters.libsvm.job", True),
    ("converters.registry", "converters.engines.core", True),
    ("pipeline.spec.pipelinespec", "pipeline.plan.readplan", True),      # the spec does no I/O and plans nothing
    ("pipeline.spec.pipelinespec", "pipeline.spec.options", False),
    ("pipeline.remote.stream", "pipeline.plan.readplan", True),
    ("pipeline.plan.manifest", "pipeline.remote.stream", False),
    ("pipeline.resume.state", "pipeline.graph.resumable", True),
    ("pipeline.graph.resumable", "pipeline.graph.tail", False),
    ("pipeline.resume.seek", "pipeline.build", True),
    ("pipeline.describe", "pipeline.build", False),                       # the top modules in their order
    ("pipeline.build", "pipeline.describe", True),
    ("pipeline.threads", "pipeline.build", True),
    ("pipeline.describe", "pipeline.training", True),
    ("sharding.topology", "sharding.plan", True),
    ("sharding.plan", "sharding.topology", False),
    ("sharding.plan", "sharding.epochs", False),
    ("sharding.epochs", "sharding.plan", True),
    ("pipeline.spec.pipelinespec", "sharding.epochs", False),
    ("sharding.configs", "sharding.cli", True),
    ("converters.cli.main", "pipeline.cli", True),
    ("pipeline.build", "pipeline.graph.resumable", False),
    ("pipeline.graph.parse", "pipeline", True),                           # the package __init__
    ("pipeline.service.servers", "pipeline.build", True),                # the servers sit below the front
    ("pipeline.cli", "pipeline.service.cli", False),
    ("pipeline.service.auto", "pipeline.graph.tail", True),              # the servers sit below the graphs
    ("pipeline.graph.service", "pipeline.service.probe", False),
    ("pipeline.graph.service", "pipeline.graph.tail", False),
    ("pipeline.build", "pipeline.graph.service", False),
    ("pipeline.plan.servicejob", "pipeline.build", True),
    ("pipeline.plan.servicejob", "pipeline.graph.service", True),
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


# -- rooms: packages in sub-packages by concern -------------------------------------------------------------

def top_modules(pkg: str) -> list[str]:
    return sorted(p.name for p in (ROOT / pkg).glob("*.py"))


def subpackages(pkg: str) -> list[str]:
    return sorted(p.parent.name for p in (ROOT / pkg).glob("*/__init__.py"))


@pytest.mark.parametrize("pkg", sorted(ROOMS))
def test_few_modules_at_the_top(pkg):
    top = top_modules(pkg)
    assert len(top) <= ROOMS[pkg]["max_top"], f"{pkg}/ has {len(top)} top modules {top}: give them a room"
    assert sorted(m[:-3] for m in top if m != "__init__.py") == sorted(TOPS.get(pkg, ())), \
        f"the top modules of {pkg}/ and TOPS[{pkg!r}] differ"


@pytest.mark.parametrize("pkg", sorted(ROOMS))
def test_subpackages_have_a_layer_and_a_docstring(pkg):
    subs = subpackages(pkg)
    assert len(subs) >= ROOMS[pkg]["min_subpackages"], f"{pkg}/ has sub-packages {subs}"
    assert sorted(subs) == sorted(k for k in LAYERS[pkg] if k not in TOPS.get(pkg, ())), \
        f"sub-packages of {pkg}/ and LAYERS differ"
    for sub in subs:
        doc = ast.get_docstring(ast.parse((ROOT / pkg / sub / "__init__.py").read_text()))
        assert doc and len(doc.splitlines()) == 1, f"{pkg}/{sub}/__init__.py needs a one-line docstring"


def room_of(module: str) -> str:
    """A module's room: ``pkg.sub`` for a sub-package's module, else the module itself."""
    parts = module.split(".")
    return ".".join(parts[:2])


def room_cycle(pkg: str, graph: dict[str, set[str]] | None = None) -> list[str] | None:
    """One import cycle between the rooms (sub-packages and top modules) of ``pkg``, or None."""
    graph = GRAPH if graph is None else graph
    edges: dict[str, set[str]] = {}
    for src, dsts in graph.items():
        if not src.startswith(pkg + "."):
            continue
        for dst in dsts:
            a, b = room_of(src), room_of(dst)
            if dst.startswith(pkg + ".") and a != b and not _own_reexport(src, dst):
                edges.setdefault(a, set()).add(b)
    state: dict[str, int] = {}

    def visit(n: str, path: list[str]) -> list[str] | None:
        state[n] = 1
        for d in sorted(edges.get(n, ())):
            if state.get(d) == 1:
                return path[path.index(d):] + [d] if d in path else [n, d]
            if d not in state and (found := visit(d, path + [d])):
                return found
        state[n] = 2
        return None

    for n in sorted(edges):
        if n not in state and (found := visit(n, [n])):
            return found
    return None


@pytest.mark.parametrize("pkg", sorted(ROOMS))
def test_no_import_cycle_between_rooms(pkg):
    cycle = room_cycle(pkg)
    assert cycle is None, " -> ".join(cycle)


def test_room_cycle_finder_finds_one():
    graph = {"pipeline.spec.options": {"pipeline.plan.readplan"}, "pipeline.plan.readplan": {"pipeline.spec.stage"},
             "pipeline.spec.stage": set()}
    cycle = room_cycle("pipeline", graph)
    assert cycle is not None and set(cycle) == {"pipeline.spec", "pipeline.plan"} and cycle[0] == cycle[-1]
    assert room_cycle("pipeline", {**graph, "pipeline.spec.options": set()}) is None


def private_imports(module: str) -> list[str]:
    """``from x import _y`` in ``module`` where ``x`` lives in another folder (another package's private name)."""
    src = MODULES[module]
    tree = ast.parse(src.read_text(), filename=str(src))
    package = module if is_package(module) else module.rpartition(".")[0]
    bad = []
    for node in ast.walk(tree):
        if not isinstance(node, ast.ImportFrom):
            continue
        if node.level:
            base = package.split(".")
            base = base[:len(base) - (node.level - 1)]
            target = ".".join(base + ([node.module] if node.module else []))
        else:
            target = node.module or ""
        owner = resolve(target)
        if owner is None:
            continue
        folder = MODULES[owner].parent
        for alias in node.names:
            private = alias.name.startswith("_") and not alias.name.startswith("__")
            if private and folder != src.parent:
                bad.append(f"{module} imports {alias.name} from {owner}: make it public where it lives")
    return bad


@pytest.mark.parametrize("module", sorted(MODULES))
def test_no_private_name_of_another_package(module):
    bad = private_imports(module)
    assert not bad, "\n".join(bad)


def test_private_import_check_sees_one(tmp_path, monkeypatch):
    fake = tmp_path / "emit.py"
    fake.write_text("from ..tfrecord.examples import _put_varint, __version__\nfrom .block import _x\n")
    monkeypatch.setitem(MODULES, "converters.libsvm.fake", fake)
    monkeypatch.setitem(MODULES, "converters.libsvm.block", tmp_path / "block.py")
    assert private_imports("converters.libsvm.fake") == [
        "converters.libsvm.fake imports _put_varint from converters.tfrecord.examples: make it public where it lives"]


def documented_tree(pkg: str, text: str) -> set[str]:
    """The file paths drawn in the ``## Inside `pkg/``` section's tree block (two spaces per level)."""
    section = re.search(rf"^## Inside `{pkg}/`\n(.*?)(?=^## )", text, re.S | re.M)
    assert section, f"docs/architecture.md has no '## Inside `{pkg}/`' section"
    block = re.search(r"^```\n(.*?)^```", section.group(1), re.S | re.M)
    assert block, f"the '## Inside `{pkg}/`' section has no tree block"
    paths, stack = set(), []
    for line in block.group(1).splitlines():
        if not line.strip():
            continue
        depth = (len(line) - len(line.lstrip(" "))) // 2
        name = line.split()[0]
        stack[depth:] = [name.rstrip("/")]
        if name.endswith("/"):
            paths.add("/".join(stack) + "/__init__.py")
        else:
            paths.add("/".join(stack))
    return paths


@pytest.mark.parametrize("pkg", sorted(ROOMS))
def test_every_module_is_named_in_the_architecture_page(pkg):
    drawn = documented_tree(pkg, ARCHITECTURE.read_text())
    actual = {str(p.relative_to(ROOT)) for p in (ROOT / pkg).rglob("*.py")}
    assert not actual - drawn, f"not in docs/architecture.md's tree of {pkg}/: {sorted(actual - drawn)}"
    assert not drawn - actual, f"docs/architecture.md names {pkg} modules that do not exist: {sorted(drawn - actual)}"


def test_the_tree_reader_reads_paths():
    text = "## Inside `p/`\n\n```\np/\n  __init__.py   x\n  a/            y\n    b.py        z\n  c.py\n```\n\n## Next\n"
    assert documented_tree("p", text) == {"p/__init__.py", "p/a/__init__.py", "p/a/b.py", "p/c.py"}


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


RAW_READERS = {("converters.storage.s3", "get_stream"), ("converters.storage.download", "_s3_get"),
               ("converters.storage.beamfs", "open_read")}  # the raw GET, its one caller, Beam's reader


def raw_reads_in_storage(module: str) -> list[str]:
    """``module``'s raw reads of an object's bytes (boto3's GETs and transfers, ``get_stream``, a Beam file
    system's ``open``) outside the functions of ``RAW_READERS``."""
    found = []
    for fn in ast.walk(ast.parse(MODULES[module].read_text())):
        if isinstance(fn, ast.FunctionDef) and (module, fn.name) not in RAW_READERS:
            for node in ast.walk(fn):
                if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and (
                        node.func.attr in OBJECT_READS or ast.unparse(node.func) == "fs.open"):
                    found.append(f"{module}:{node.lineno} {fn.name}: {ast.unparse(node.func)}")
    return found


@pytest.mark.parametrize("module", sorted(m for m in MODULES if m.startswith("converters.storage")))
def test_storage_reads_objects_only_through_the_downloader(module):
    """Inside ``converters/storage`` too, every read of an object's bytes goes through ``download.py``'s one
    policy: no boto3 transfer (``download_file``), no GET but the one ``_s3_get`` sends."""
    assert not raw_reads_in_storage(module), "read objects through converters.storage.download"


@pytest.mark.parametrize("finder, module, source, found", [
    (object_reads, "bad", "def f(c):\n    return c.get_object(Bucket='b', Key='k')['Body'].read()\n",
     ["bad:2 c.get_object"]),
    (raw_reads_in_storage, "converters.storage.bad", "def fetch(self, n, p):\n    self.client.download_file('b', n, p)\n",
     ["converters.storage.bad:2 fetch: self.client.download_file"]),
])
def test_the_read_finders_find_one(monkeypatch, tmp_path, finder, module, source, found):
    bad = tmp_path / "bad.py"
    bad.write_text(source)
    monkeypatch.setitem(MODULES, module, bad)
    assert finder(module) == found
