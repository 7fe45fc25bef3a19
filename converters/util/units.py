"""Byte sizes: parse '256MiB', '1GiB', '1000000' at the CLI boundary; format for humans."""
from __future__ import annotations

import re

__all__ = ["DEFAULT_SHARD_BYTES", "parse_size", "format_size"]

DEFAULT_SHARD_BYTES = 1 << 30  # 1 GiB

_UNITS = {
    "": 1, "b": 1,
    "k": 1000, "kb": 1000, "kib": 1 << 10,
    "m": 1000 ** 2, "mb": 1000 ** 2, "mib": 1 << 20,
    "g": 1000 ** 3, "gb": 1000 ** 3, "gib": 1 << 30,
    "t": 1000 ** 4, "tb": 1000 ** 4, "tib": 1 << 40,
}
_SIZE_RE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([a-zA-Z]*)\s*$")


def parse_size(text: str | int) -> int:
    """Parse a byte size such as ``"256MiB"``, ``"1GiB"``, ``"1.5GB"`` or ``"4096"``."""
    if isinstance(text, int):
        if text <= 0:
            raise ValueError(f"size must be positive, got {text}")
        return text
    m = _SIZE_RE.match(str(text))
    if not m or m.group(2).lower() not in _UNITS:
        raise ValueError(
            f"invalid size {text!r}: use a number of bytes or a unit such as 256MiB, 1GiB, 500MB")
    value = int(float(m.group(1)) * _UNITS[m.group(2).lower()])
    if value <= 0:
        raise ValueError(f"size must be positive, got {text!r}")
    return value


def format_size(n: float) -> str:
    """Format bytes with binary units: 1536 -> '1.5 KiB'."""
    n = float(n)
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if abs(n) < 1024 or unit == "TiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    raise AssertionError("unreachable")  # pragma: no cover
