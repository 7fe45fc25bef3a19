"""Work units: the inputs cut into pieces that independent tasks convert (pure planning + one reader).

A *unit* is one element of work for an engine: a line-aligned byte range of a plain file, or a whole file
where a byte range cannot be read on its own (a compressed stream; a text input, whose documents and line
numbers are read file by file). Units are numbered in input order; everything an engine computes per unit is
merged back in that order, so the output never depends on how the units were scheduled.

``plan_units`` is pure (file sizes in, units out); ``input_files`` stats the inputs (local files, or objects
named by URLs: ``sources``); ``read_unit`` reads the whole lines of a range unit (the lines that *start* inside
``[start, stop)``, so consecutive ranges partition a file into whole lines).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

from ..sources import compression_of, input_size, read_range
from ..util.checks import as_int
from ..util.errors import InputError

__all__ = ["Unit", "InputFile", "plan_units", "input_files", "unit_count", "read_unit", "DEFAULT_UNIT_BYTES"]

DEFAULT_UNIT_BYTES = 16 << 20  # 16 MiB of input per unit: far above Beam's ~20k elements/s per-element cost


@dataclass(frozen=True)
class InputFile:
    """One input: its path, size in bytes and whether it may be cut into byte ranges."""

    path: str
    size: int
    splittable: bool

    def __post_init__(self):
        if self.size < 0:
            raise ValueError(f"{self.path}: negative size {self.size}")


@dataclass(frozen=True)
class Unit:
    """Unit ``index`` (global, input order) of input ``input_index``: bytes ``[start, stop)`` of ``path``, or
    the whole file when ``whole`` (then ``start == 0`` and ``stop`` is the file size)."""

    index: int
    input_index: int
    path: str
    start: int
    stop: int
    whole: bool

    def __post_init__(self):
        if self.index < 0 or self.input_index < 0:
            raise ValueError(f"unit index and input index must be >= 0, got {self.index}, {self.input_index}")
        if not 0 <= self.start <= self.stop:
            raise ValueError(f"unit {self.index}: bad byte range [{self.start}, {self.stop})")

    @property
    def key(self) -> str:
        """The unit's name in the run's temporary area."""
        return f"u{self.index:07d}"


def plan_units(files: Sequence[InputFile], unit_size: int, *, even: bool = False) -> list[Unit]:
    """Pure: cut each splittable file into byte ranges of ``unit_size`` (the last one shorter), keep the others
    whole. ``even``: into as many ranges but of equal size (the last one shorter by less than their count), so
    that no range is a sliver. An empty splittable file gets one empty unit, so every input has at least one
    unit (and its accounting)."""
    unit_size = as_int(unit_size, "unit_size", minimum=1, must="a positive number of bytes")
    units: list[Unit] = []
    for i, f in enumerate(files):
        if not f.splittable:
            units.append(Unit(len(units), i, f.path, 0, f.size, True))
            continue
        size = -(-f.size // len(_starts(f.size, unit_size))) if even and f.size else unit_size
        for a in _starts(f.size, size):
            units.append(Unit(len(units), i, f.path, a, min(a + size, f.size), False))
    return units


def _starts(size: int, unit_size: int) -> range:
    """The offsets a splittable file of ``size`` bytes is cut at: one unit, empty, for an empty file."""
    return range(0, size, unit_size) if size else range(1)


def input_files(paths: Sequence[str], *, split: bool = True) -> list[InputFile]:
    """Stat the inputs: plain files are splittable (when ``split``), compressed ones never are."""
    return [InputFile(p, _size(p), split and compression_of(p) is None) for p in paths]


def unit_count(paths: Sequence[str], unit_size: int, *, at_most: int | None = None) -> int:
    """``len(plan_units(input_files(paths), unit_size))``, counted up to ``at_most``: the sizes are looked up
    only that far (an S3 object each), and a compressed file, one unit whatever its size, needs none."""
    n = 0
    for p in paths:
        n += 1 if compression_of(p) is not None else len(_starts(_size(p), unit_size))
        if at_most is not None and n >= at_most:
            break
    return n


def _size(path: str) -> int:
    try:
        return input_size(path)
    except OSError as exc:
        raise InputError(f"cannot read: {exc.strerror}", path=path) from None


def read_unit(unit: Unit) -> bytes:
    """The whole lines of a range unit (those that start in ``[start, stop)``); InputError if unreadable."""
    if unit.whole:
        raise ValueError(f"unit {unit.index} is a whole file: read it as a stream")
    try:
        return read_range(unit.path, unit.start, unit.stop)
    except OSError as exc:
        raise InputError(f"cannot read: {exc}", path=unit.path, offset=unit.start) from None
