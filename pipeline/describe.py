"""``describe(spec)``: which graph ``build_dataset`` builds (the resumable order or the default one, and why), and
its stages, in order, with their settings and why."""
from __future__ import annotations

from .build import Stage, graph_stages
from .plan.graphplan import GraphPlan, plan_graph
from .spec.pipelinespec import PipelineSpecBase

__all__ = ["describe", "format_stages", "graph_line"]


def _fmt(value) -> str:
    return str(value) if value is not None else "-"


def format_stages(stages: list[Stage]) -> str:
    """Human-readable lines: ``N. name [on|off]  k=v ...`` then ``   why: ...``."""
    lines = []
    for i, st in enumerate(stages, 1):
        settings = " ".join(f"{k}={_fmt(v)}" for k, v in st.settings.items())
        lines.append(f"{i}. {st.name:<8} {'on ' if st.enabled else 'off'}  {settings}".rstrip())
        if st.why:
            lines.append(f"   why: {st.why}")
    return "\n".join(lines)


def describe(spec: PipelineSpecBase) -> str:
    """A readable explanation of the graph for ``spec`` (e.g. "cache: memory, dataset 180 MiB < 25% of RAM")."""
    plan = plan_graph(spec)
    head = [f"pipeline: mode={spec.mode} batch_size={spec.batch_size} epochs={spec.epochs or 'forever'}"
            + (f" records={spec.records}" if spec.records is not None else ""), graph_line(plan)]
    return "\n".join(head) + "\n" + format_stages(graph_stages(plan))


def graph_line(spec: PipelineSpecBase | GraphPlan) -> str:
    """Which graph ``build_dataset(spec)`` builds, the resumable order or the default one, and why (one line)."""
    plan = spec if isinstance(spec, GraphPlan) else plan_graph(spec)
    builds, why = plan.resumable, plan.why
    return f"graph: resumable order: {why}" if builds else f"graph: default: not resumable because {why}"
