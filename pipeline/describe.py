"""``describe(spec)``: the stages ``build_dataset`` builds, in order, with their settings and why."""
from __future__ import annotations

from .build import Stage, plan_stages
from .spec.pipelinespec import PipelineSpecBase

__all__ = ["describe", "format_stages"]


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
    head = [f"pipeline: mode={spec.mode} batch_size={spec.batch_size} epochs={spec.epochs or 'forever'}"
            + (f" records={spec.records}" if spec.records is not None else "")]
    return "\n".join(head) + "\n" + format_stages(plan_stages(spec))
