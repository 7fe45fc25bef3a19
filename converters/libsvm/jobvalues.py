"""The plain values the LibSVM two-pass job's steps pass each other (``job``): the pre-pass result, the
context pass 1 runs in, pass 1's per-unit summary and the pieces of a unit that pass 2 writes."""
from __future__ import annotations

from dataclasses import dataclass, field

from ..engines.core import ErrorRecord
from ..engines.units import Unit
from ..prep.balance import Thresholds
from .reasons import BadLine

__all__ = ["LibsvmPrepass", "LibsvmContext", "LibsvmSummary", "LibsvmPiece"]


@dataclass(frozen=True)
class LibsvmPrepass:
    """``--index-base auto`` for one unit: an index 0 seen, or the error that stopped the scan."""

    unit: int
    zero: bool = False
    error: ErrorRecord | None = None


@dataclass(frozen=True)
class LibsvmContext:
    """What pass 1 needs from the pre-pass: the index base, or the error that ends the run."""

    base: int | None
    error: ErrorRecord | None = None


@dataclass
class LibsvmSummary:
    """Pass 1's report for one unit. Line numbers of ``bad`` are unit-local for a range unit (the planner
    shifts them). ``blocks``: records per ``block_bytes`` block of a whole (compressed) unit."""

    unit: Unit
    records: int = 0
    nbytes: int = 0                 # framed bytes of the records
    lines: int = 0
    blank: int = 0
    skipped: dict[str, int] = field(default_factory=dict)
    bad: list[BadLine] = field(default_factory=list)
    fallback: int = 0
    blocks: tuple[int, ...] = ()
    error: ErrorRecord | None = None
    sparse: dict | None = None      # sparse layout: the unit's ``sparse.row_stats`` totals
    unordered: int = 0              # written rows whose positional ids repeat or do not increase
    ranges: dict | None = None      # columnar layout: each feature's value range (``blocks.ranges_json``)


@dataclass(frozen=True)
class LibsvmPiece:
    """Records ``[first, stop)`` of ``unit`` (which holds ``count`` records; ``blocks`` as in the summary),
    parsed with index base ``base``. With a filter — ``keep`` (balance: the records it keeps, the unit's first
    record having global index ``index0``) and/or ``label`` (a label's uint32 identity) — ``first`` and
    ``stop`` count the records the filter selects."""

    unit: Unit
    first: int
    stop: int
    count: int
    base: int
    blocks: tuple[int, ...] = ()
    keep: Thresholds | None = None
    index0: int = 0
    label: int | None = None

    @property
    def filtered(self) -> bool:
        return self.keep is not None or self.label is not None
