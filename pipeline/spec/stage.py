"""``Stage``: one stage of a planned tf.data graph, with its settings and why (what ``describe`` prints)."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

__all__ = ["Stage"]


@dataclass(frozen=True)
class Stage:
    """One stage of the graph: its name, its settings and why it is there (or why it is off)."""

    name: str
    enabled: bool
    settings: dict[str, Any] = field(default_factory=dict)
    why: str = ""
