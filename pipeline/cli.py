"""``tfpipe`` subcommands of the pipeline package."""
from __future__ import annotations

__all__ = ["register"]


def register(sub) -> None:
    pass
