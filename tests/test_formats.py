"""Formats are rooms of their own, read from the code: outside a format's folder (``converters/libsvm/``,
``converters/text/``) and ``converters/cli/`` at most one module of ``converters``, ``sharding`` and ``pipeline``
imports a format package (the registry — which in fact names them only as strings), and none branches on a
format's name (a comparison, a ``match`` case, a dispatch table keyed by it, a tuple listing names) except the
registry. Also: what the registry declares of each built-in format is there and loads.
"""
from __future__ import annotations

import ast
import pathlib

import pytest

from converters import registry

ROOT = pathlib.Path(__file__).resolve().parent.parent
WALKED = ("converters", "sharding", "pipeline")
FORMAT_DIRS = ("converters/libsvm", "converters/text", "converters/tabular")
EXEMPT_DIRS = (*FORMAT_DIRS, "converters/cli")
REGISTRY = "converters/registry.py"
NAMES = tuple(registry.names())  # the built-in formats (nothing registered at import time of this module)
FORMAT_PACKAGES = tuple(d.replace("/", ".") for d in FORMAT_DIRS)


def module_of(rel: str) -> tuple[str, bool]:
    """``converters/engines/beam.py`` -> (``converters.engines.beam``, is a package)."""
    parts = list(pathlib.PurePosixPath(rel).with_suffix("").parts)
    pkg = parts[-1] == "__init__"
    if pkg:
        parts.pop()
    return ".".join(parts), pkg


def format_imports(source: str, rel: str) -> set[str]:
    """The format packages that the module at ``rel`` imports (absolute or relative, at any depth)."""
    module, pkg = module_of(rel)
    package = module if pkg else module.rpartition(".")[0]
    found = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            targets = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            prefix = node.module or ""
            if node.level:
                base = package.split(".")
                base = base[:len(base) - (node.level - 1)]
                prefix = ".".join(base + ([node.module] if node.module else []))
            targets = [f"{prefix}.{a.name}" for a in node.names] + [prefix]
        else:
            continue
        for t in targets:
            found.update(p for p in FORMAT_PACKAGES if t == p or t.startswith(p + "."))
    return found


def _is_name(node: ast.AST) -> bool:
    return isinstance(node, ast.Constant) and node.value in NAMES


def _lists_name(node: ast.AST) -> bool:
    return isinstance(node, (ast.Tuple, ast.List, ast.Set)) and any(_is_name(e) for e in node.elts)


def name_branches(source: str) -> list[str]:
    """``line: what`` for every place that branches on a format's name."""
    out = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Compare):
            if any(_is_name(x) or _lists_name(x) for x in [node.left, *node.comparators]):
                out.append(f"{node.lineno}: compares with a format name")
        elif isinstance(node, ast.MatchValue) and _is_name(node.value):
            out.append(f"{node.lineno}: a match case on a format name")
        elif isinstance(node, ast.Dict) and any(k is not None and _is_name(k) for k in node.keys):
            out.append(f"{node.lineno}: a table keyed by format names")
        elif _lists_name(node):
            out.append(f"{node.lineno}: a list of format names")
    return out


def walked() -> dict[str, str]:
    """Every module of the walked packages: path relative to the root -> source."""
    files = {}
    for top in WALKED:
        for path in sorted((ROOT / top).rglob("*.py")):
            files[path.relative_to(ROOT).as_posix()] = path.read_text()
    return files


def _exempt(rel: str) -> bool:
    return any(rel.startswith(d + "/") for d in EXEMPT_DIRS)


def importers(found: dict[str, set[str]]) -> dict[str, set[str]]:
    """The modules, of those ``format_imports`` found, that are not allowed to import a format."""
    return {rel: got for rel, got in found.items() if not _exempt(rel) and got}


def branches(found: dict[str, list[str]]) -> dict[str, list[str]]:
    """The modules, of those ``name_branches`` found, that are not allowed to branch on a format name."""
    return {rel: got for rel, got in found.items() if not _exempt(rel) and rel != REGISTRY and got}


FILES = walked()
IMPORTS = {rel: format_imports(src, rel) for rel, src in FILES.items()}
BRANCHES = {rel: name_branches(src) for rel, src in FILES.items()}


def test_the_walk_sees_the_tree():
    assert (len(FILES) > 100 and REGISTRY in FILES and "sharding/plan.py" in FILES
            and "pipeline/spec/pipelinespec.py" in FILES)
    assert NAMES == ("libsvm", "text", "tabular")
    # inside a format's folder the same checks do find imports and names: they are not blind
    assert IMPORTS["converters/libsvm/job.py"] == {"converters.libsvm"}
    assert IMPORTS["converters/cli/convert_argv.py"] == set()  # it looks formats up through the registry
    assert BRANCHES[REGISTRY]  # the registry's own table of names


def test_at_most_one_module_outside_the_format_folders_imports_a_format():
    found = importers(IMPORTS)
    assert len(found) <= 1, "\n".join(f"{rel} imports {', '.join(sorted(p))}" for rel, p in sorted(found.items()))
    assert set(found) <= {REGISTRY}, f"only the registry may import a format, not {sorted(found)}"


def test_nothing_outside_the_format_folders_branches_on_a_format_name():
    found = branches(BRANCHES)
    assert not found, "\n".join(f"{rel}:{w}" for rel, ws in sorted(found.items()) for w in ws)


@pytest.mark.parametrize("rel, source, imports", [
    ("converters/engines/fake.py", "from converters.libsvm.convert import run\n", {"converters.libsvm"}),
    ("converters/engines/fake.py", "def f():\n    from ..text import readers\n", {"converters.text"}),
    ("converters/engines/processing/fake.py", "from ...libsvm.job import LibsvmJob\n", {"converters.libsvm"}),
    ("sharding/fake.py", "import converters.text.tokenizers as t\n", {"converters.text"}),
    ("converters/engines/fake.py", "from converters import libsvm\n", {"converters.libsvm"}),
    ("converters/engines/fake.py", "from converters import registry\nfrom ..sources import read_range\n", set()),
])
def test_the_import_check_finds_a_planted_import(rel, source, imports):
    assert format_imports(source, rel) == imports
    planted = {**IMPORTS, rel: format_imports(source, rel)}
    assert (rel in importers(planted)) == bool(imports)


@pytest.mark.parametrize("source, bad", [
    ("if job.format == 'libsvm':\n    pass\n", True),
    ("ok = 'text' != kind\n", True),
    ("if kind in ('libsvm', 'text'):\n    pass\n", True),
    ("FORMATS = ('libsvm', 'text')\n", True),
    ("EXTRAS = {'libsvm': ('s3',), 'text': ('s3', 'text')}\n", True),
    ("match fmt:\n    case 'text':\n        pass\n", True),
    ("def f(kind: str = 'libsvm'):\n    return kind\n", False),  # a default value is not a branch
    ("if job.fmt.scan_round(job.options) is not None:\n    pass\n", False),
    ("if kind == 'csv':\n    pass\n", False),  # not a built-in format's name
])
def test_the_name_check_finds_a_planted_branch(source, bad):
    assert bool(name_branches(source)) == bad
    planted = {**BRANCHES, "converters/engines/fake.py": name_branches(source)}
    assert ("converters/engines/fake.py" in branches(planted)) == bad


# -- the registry ----------------------------------------------------------------------------------------

@pytest.mark.parametrize("name", NAMES)
def test_a_built_in_format_declares_everything_in_its_folder(name):
    fmt = registry.get(name)
    assert fmt.name == name and type(fmt).__module__ == f"converters.{name}.format"
    options = fmt.options_class()
    assert options.__module__.startswith(f"converters.{name}.") and hasattr(options, "to_json")
    job = fmt.job_class()
    assert job.__module__ == f"converters.{name}.job" and job.kind == name
    assert callable(job.create) and callable(job.from_files)
    assert callable(fmt.declared("convert"))
    cli = fmt.declared("cli")
    assert cli.__name__ == f"converters.cli.{name}" and callable(cli.register) and callable(cli.options_from_args)
    assert "s3" in fmt.extras and fmt.reasons and not set(fmt.reasons) & set(fmt.routine)
    doc = (ROOT / "docs" / f"{name}.md").read_text()
    missing = [r for r in fmt.reasons if f"`{r}`" not in doc]
    assert not missing, f"docs/{name}.md does not name the reasons {missing}"
    doc += (ROOT / "docs" / "prep.md").read_text()  # sampled_out: write-time balancing
    assert all(r in doc for r in fmt.routine)


def test_an_unknown_name_lists_the_valid_ones():
    with pytest.raises(registry.UnknownFormatError, match="unknown format 'csvx': expected one of libsvm, text"):
        registry.get("csvx")
    assert issubclass(registry.UnknownFormatError, ValueError)  # the CLI's usage-error exit code


class _Toy(registry.Format):
    name = "toy"
    options = "converters.libsvm.options:LibsvmOptions"
    convert = "converters.libsvm.convert:run"
    job = "converters.libsvm.job:LibsvmJob"


def test_register_and_unregister_a_format():
    toy = _Toy()
    try:
        assert registry.register(toy) is toy
        assert registry.get("toy") is toy and registry.names() == [*NAMES, "toy"]
        with pytest.raises(ValueError, match="already registered"):
            registry.register(_Toy())
        registry.register(toy, replace=True)
        with pytest.raises(ValueError, match="already registered"):
            registry.register(type("Libsvm", (_Toy,), {"name": "libsvm"})())
    finally:
        registry.unregister("toy")
    assert registry.names() == list(NAMES)
    with pytest.raises(registry.UnknownFormatError):
        registry.get("toy")


@pytest.mark.parametrize("attrs, message", [
    ({"name": "Bad-Name"}, "lower-case identifier"),
    ({"job": None}, "declares no job"),
])
def test_a_malformed_format_is_refused(attrs, message):
    with pytest.raises(ValueError, match=message):
        registry.register(type("Bad", (_Toy,), attrs)())
    with pytest.raises(TypeError, match="registry.Format"):
        registry.register(object())  # type: ignore[arg-type]
