"""``tfpipe convert libsvm`` and ``tfpipe quickstart`` (filled in by the LibSVM converter work)."""
from __future__ import annotations

__all__ = ["register"]


def register(convert_sub, top_sub) -> None:
    pass
