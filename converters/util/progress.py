"""One way to show progress on long work: a tqdm bar on stderr, or a silent stand-in with the same methods
(so callers never branch on whether progress is on)."""
from __future__ import annotations

import sys
from typing import Any

__all__ = ["progress_bar"]


class _Silent:
    def update(self, n: float = 1) -> None:
        pass

    def set_postfix(self, *args: Any, **kwargs: Any) -> None:
        pass

    def close(self) -> None:
        pass

    def __enter__(self) -> "_Silent":
        return self

    def __exit__(self, *exc: Any) -> None:
        pass


def progress_bar(enabled: bool, *, desc: str, total: float | None = None, unit: str = "B", leave: bool = True):
    """A progress bar for ``desc`` (bytes by default, scaled with binary units) or a silent stand-in."""
    if not enabled:
        return _Silent()
    from tqdm import tqdm

    scale = {"unit_scale": True, "unit_divisor": 1024} if unit == "B" else {"unit_scale": True}
    return tqdm(total=total, desc=desc, unit=unit, leave=leave, file=sys.stderr, dynamic_ncols=True, **scale)
