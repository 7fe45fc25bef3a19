"""``pipeline.plan.graphplan``: one decision of which graph a spec builds, read by the build, ``describe`` and the
stages; and the code's own counts: one place decides the graph, one formula counts an epoch's batches, every
graph gets the CPU share, only ``pipeline/graph`` builds tf.data graphs, no comment cites an issue."""
from __future__ import annotations

import ast
import pathlib
import re

import pytest
from pipeline_data import write_indexed_set

from pipeline import PipelineSpec
from pipeline.build import build_dataset, graph_module, plan_stages
from pipeline.plan.graphplan import GRAPHS, GraphPlan, plan_graph

ROOT = pathlib.Path(__file__).resolve().parents[2]
PIPELINE = ROOT / "pipeline"
GRAPH_CONDITIONS = {"service", "layout", "part_weights", "mode", "resumable", "resume_choice"}


def _modules(*roots: str):
    for root in roots:
        for path in sorted((ROOT / root).rglob("*.py")):
            yield path.relative_to(ROOT).as_posix(), ast.parse(path.read_text())


def _names(node: ast.AST) -> set[str]:
    out = set()
    for n in ast.walk(node):
        if isinstance(n, ast.Attribute):
            out.add(n.attr)
        elif isinstance(n, ast.Name):
            out.add(n.id)
    return out


_BUILDER = re.compile(r"^(build_.*|.*_stages|.*_dataset)$")


def _targets(node: ast.AST) -> set[str]:
    """The graphs a branch leads to: a graph's name, or a call of a graph's builder or stages."""
    out = set()
    for n in ast.walk(node):
        if isinstance(n, ast.Constant) and n.value in GRAPHS:
            out.add(n.value)
        elif isinstance(n, ast.Call):
            f = n.func
            name = f.id if isinstance(f, ast.Name) else f.attr if isinstance(f, ast.Attribute) else ""
            if _BUILDER.match(name):
                out.add(name)
    return out


def test_one_place_decides_which_graph():
    """A function whose ``if``s test the graphs' conditions and lead to three or more graphs decides which graph
    is built: only one does."""
    deciders = []
    for rel, tree in _modules("pipeline"):
        for fn in ast.walk(tree):
            if isinstance(fn, (ast.FunctionDef, ast.AsyncFunctionDef)):
                tested, targets = set(), set()
                for n in ast.walk(fn):
                    if isinstance(n, ast.If):
                        tested |= _names(n.test) & GRAPH_CONDITIONS
                        targets |= set().union(*(_targets(b) for b in n.body))
                if len(tested) >= 2 and len(targets) >= 3:
                    deciders.append(f"{rel}:{fn.name}")
    assert deciders == ["pipeline/plan/graphplan.py:plan_graph"]


def test_the_decider_count_sees_the_old_three():
    """The same count finds the three deciders a build once had (the check can fail)."""
    old = ast.parse("""
def plan_stages(spec):
    if spec.service is not None:
        return service_stages(spec)
    if resume_choice(spec)[0]:
        return resumable_stages(spec)
    if spec.layout is not None:
        return columnar_stages(spec)
    return []
""")
    fn = old.body[0]
    tested = set().union(*(_names(n.test) & GRAPH_CONDITIONS for n in ast.walk(fn) if isinstance(n, ast.If)))
    targets = set().union(*(_targets(b) for n in ast.walk(fn) if isinstance(n, ast.If) for b in n.body))
    assert len(tested) >= 2 and len(targets) >= 3


def _is_ceil_by_batch(n: ast.AST) -> bool:
    """``-(-x // y)`` with a batch size in ``y``."""
    return (isinstance(n, ast.UnaryOp) and isinstance(n.op, ast.USub) and isinstance(n.operand, ast.BinOp)
            and isinstance(n.operand.op, ast.FloorDiv) and any("batch" in x for x in _names(n.operand.right)))


def _is_drop_split(n: ast.AST) -> bool:
    """``a // b if ...drop_remainder... else ...``: floor or ceil by the remainder rule."""
    return isinstance(n, ast.IfExp) and "drop_remainder" in _names(n.test) and any(
        isinstance(x, ast.BinOp) and isinstance(x.op, ast.FloorDiv) for x in ast.walk(n))


def test_one_formula_counts_the_batches_of_an_epoch():
    """The planner, the graphs and the bench all count with ``sharding.epochs``."""
    places = sorted({rel for rel, tree in _modules("sharding", "pipeline", "bench") for n in ast.walk(tree)
                     if _is_ceil_by_batch(n) or _is_drop_split(n)})
    assert places == ["sharding/epochs.py"]


def test_every_graph_is_one_module_and_is_finished_in_one_place():
    for name in GRAPHS:
        mod = graph_module(name)
        assert mod.__name__.startswith("pipeline.graph.") and callable(mod.stages) and callable(mod.build), name
    src = (PIPELINE / "build.py").read_text()
    fn = next(n for n in ast.walk(ast.parse(src)) if isinstance(n, ast.FunctionDef) and n.name == "build_dataset")
    body = ast.unparse(fn)
    assert "_cpu_share(graph_tail(" in body and body.count(".build(") == 1
    graph_dir = sorted(p.stem for p in (PIPELINE / "graph").glob("*.py"))
    for rel, tree in _modules("pipeline"):     # no graph adds the tail or the CPU share itself
        if rel != "pipeline/build.py":
            calls = {n.func.id for n in ast.walk(tree) if isinstance(n, ast.Call) and isinstance(n.func, ast.Name)}
            assert not calls & {"graph_tail", "_cpu_share"}, rel
    assert {"plain", "pipe", "weighted", "columnar", "resumable", "service"} <= set(graph_dir)


_TF_DATA = re.compile(r"\btf\.data\.(TFRecordDataset|Dataset\.(from_tensor_slices|from_tensors|from_generator|range|"
                      r"zip|sample_from_datasets|list_files|choose_from_datasets))\(|"
                      r"\bdataset_ops\.DatasetSource\b|\bgen_dataset_ops\.\w+_dataset\w*\(")


@pytest.mark.parametrize("line,builds", [
    ("paths = tf.data.Dataset.from_generator(stream.session, output_signature=sig)", True),
    ("recs = tf.data.TFRecordDataset(path, ctype, config.buffer_size)", True),
    ("class _SeekingTFRecordDataset(dataset_ops.DatasetSource):", True),
    ("variant = gen_dataset_ops.tf_record_dataset_v2(", True),
    ("return hasattr(gen_dataset_ops, 'tf_record_dataset_v2')", False),
    ("opts = tf.data.Options()", False),
    ("raise TfpipeError('returned a list, not a tf.data.Dataset')", False),
])
def test_the_tf_data_check_sees_a_source(line, builds):
    """The check below finds the sources the stream and the seek once built outside ``pipeline/graph``."""
    assert bool(_TF_DATA.search(line)) is builds


# the tf.data graphs outside ``pipeline/`` that are not a pipeline's: what a bench compares the pipeline with or
# loads the host with, and the quickstart's read-back, a check independent of ``pipeline`` (which sits above it)
NOT_PIPELINES = {
    "bench/commands/overhead.py": "a synthetic input with no I/O: the step's own cost",
    "bench/core/busyhost.py": "another TensorFlow process reading beside the measured one",
    "bench/core/layoutbench.py": "the hand-written reads each layout is compared with",
    "bench/core/variants.py": "the named baselines (naive, hand-tuned) the default graph is compared with",
    "converters/cli/quickstart.py": "plain TFRecordDataset + parse_example: a check of the written set",
}


def test_only_the_graph_modules_build_tf_data_graphs():
    found = sorted(rel for rel, _ in _modules("pipeline", "converters", "sharding", "bench")
                   if _TF_DATA.search((ROOT / rel).read_text()) and not rel.startswith("pipeline/graph/"))
    assert found == sorted(NOT_PIPELINES)


_ISSUE = re.compile(r"(#|\b)issues? #?\d+|\(#\d+\)", re.I)


def test_no_comment_cites_an_issue():
    hits = []
    for rel, _ in _modules("converters", "sharding", "pipeline", "bench"):
        for i, line in enumerate((ROOT / rel).read_text().splitlines(), 1):
            if _ISSUE.search(line):
                hits.append(f"{rel}:{i}: {line.strip()}")
    assert hits == []


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    d = tmp_path_factory.mktemp("graphplan")
    write_indexed_set(d, 300)
    return str(d)


@pytest.mark.parametrize("kw,graph,resumable", [
    ({}, "plain", False),
    ({"shuffle_buffer": 50, "seed": 1}, "resumable", True),
    ({"shuffle_buffer": 50, "seed": 1, "resumable": False}, "plain", False),
    ({"mode": "pipe", "channel": "train"}, "pipe", False),
    ({"service": "grpc://localhost:5050"}, "service", False),
])
def test_plan_graph_names_the_graph_the_build_and_describe_use(data, kw, graph, resumable):
    spec = PipelineSpec.from_manifest(data, 32, **kw)
    plan = plan_graph(spec)
    assert isinstance(plan, GraphPlan) and (plan.graph, plan.resumable) == (graph, resumable)
    assert (plan.read is None) == (spec.mode == "pipe" and spec.layout is None)
    assert [s.name for s in plan_stages(spec)] == [s.name for s in graph_module(graph).stages(plan)]
    with pytest.raises(Exception, match="cannot assign"):
        plan.graph = "plain"


def test_a_resume_always_plans_the_resumable_graph(data):
    spec = PipelineSpec.from_manifest(data, 32, service="grpc://localhost:5050")
    assert plan_graph(spec, resuming=True).graph == "resumable"


def test_the_read_is_planned_once_per_build(data, monkeypatch):
    import pipeline.plan.graphplan as gp

    calls = []
    real = gp.read_plan
    monkeypatch.setattr(gp, "read_plan", lambda spec: calls.append(1) or real(spec))
    spec = PipelineSpec.from_manifest(data, 32, shuffle_buffer=50, seed=1, resumable=False)
    build_dataset(spec)
    assert len(calls) == 1


@pytest.mark.parametrize("kw", [{}, {"shuffle_buffer": 50, "seed": 1}])   # the plain and the resumable graph
def test_every_graph_gets_the_cpu_share(data, monkeypatch, kw):
    import os

    import pipeline.build as b

    monkeypatch.setattr(b, "process_cpus", lambda: 1)
    monkeypatch.setattr(os, "cpu_count", lambda: 4)
    ds = build_dataset(PipelineSpec.from_manifest(data, 32, **kw))
    assert ds.options().threading.private_threadpool_size == 1


@pytest.fixture(scope="module")
def columnar(tmp_path_factory):
    from columnar_data import indexed_columns, write_columnar_set

    d = tmp_path_factory.mktemp("graphplan_columnar")
    write_columnar_set(d, indexed_columns(200), block_rows=16, shard_rows=50)
    return str(d)


def _count_read_plan(monkeypatch) -> list:
    """Every binding of ``read_plan`` wrapped to count its calls (the real function runs): the graph modules and
    ``pipeline.plan.manifest`` are imported first, and ``readplan``'s own name is wrapped for later imports."""
    import sys

    import pipeline.plan.manifest  # noqa: F401
    from pipeline.plan import readplan

    for g in GRAPHS:
        graph_module(g)
    real, calls = readplan.read_plan, []

    def counted(spec):
        calls.append(spec)
        return real(spec)

    for mod in list(sys.modules.values()):
        if getattr(mod, "read_plan", None) is real:
            monkeypatch.setattr(mod, "read_plan", counted)
    return calls


@pytest.mark.parametrize("kw,graph", [
    ({}, "plain"),
    ({"shuffle_buffer": 50, "seed": 1, "resumable": False}, "plain"),
    ({"shuffle_buffer": 50, "seed": 1}, "resumable"),
    ({"columnar": True}, "columnar"),
    ({"columnar": True, "shuffle_buffer": 64, "seed": 3, "resumable": False}, "columnar"),
    ({"columnar": True, "shuffle_buffer": 64, "seed": 3}, "resumable"),
])
def test_one_build_runs_read_plan_once(data, columnar, monkeypatch, kw, graph):
    kw = dict(kw)
    where = columnar if kw.pop("columnar", False) else data
    assert plan_graph(PipelineSpec.from_manifest(where, 32, **kw)).graph == graph
    calls = _count_read_plan(monkeypatch)
    next(iter(build_dataset(PipelineSpec.from_manifest(where, 32, **kw))))
    assert len(calls) == 1, f"read_plan ran {len(calls)} times from from_manifest to one {graph} dataset"
