"""A run that keeps too little fails: when the rows skipped as bad input (``--on-error skip``) are every row
read, or more than ``--max-skip-fraction`` of them, the plan fails with one line naming the top reasons, their
counts and a sample ``file:line`` of each, and nothing is written. Rows dropped on purpose (``--negative-rate``'s
``sampled_out``) are not bad input and do not count."""
from __future__ import annotations

from typing import Sequence

from ..engines.core import ErrorRecord
from ..shardset.manifest import InputStats

__all__ = ["too_many_skipped", "ROUTINE", "TOP_REASONS"]

ROUTINE = ("sampled_out",)  # skips that are choices, not bad input
TOP_REASONS = 3              # reasons a refusal names


def too_many_skipped(stats: Sequence[InputStats], max_fraction: float) -> ErrorRecord | None:
    """The error that stops a run whose inputs (``stats``) lost every row, or more than ``max_fraction`` of
    them, to bad input; None when it kept enough."""
    read = sum(s.records_read for s in stats)
    counts: dict[str, int] = {}
    for s in stats:
        for reason, n in s.skipped.items():
            if reason not in ROUTINE:
                counts[reason] = counts.get(reason, 0) + n
    bad = sum(counts.values())
    if not bad or (bad < read and bad <= max_fraction * read):
        return None
    top = sorted(counts.items(), key=lambda kv: (-kv[1], kv[0]))[:TOP_REASONS]
    reasons = ", ".join(f"{r} {n:,}" + (f" (e.g. {_sample(stats, r)})" if _sample(stats, r) else "")
                        for r, n in top)
    how = ("every row read", "") if bad >= read else (f"more than --max-skip-fraction {max_fraction:g}",
                                                       "; --max-skip-fraction 1 keeps what is left")
    return ErrorRecord(f"{bad:,} of {read:,} rows were skipped as bad input ({how[0]}): {reasons}; nothing was "
                       f"written{how[1]}", reason="too_many_skipped")


def _sample(stats: Sequence[InputStats], reason: str) -> str | None:
    """The ``file:line`` of the first skipped row of ``reason`` the inputs' examples hold."""
    mark = f": {reason}: "
    for s in stats:
        for example in s.examples:
            if mark in example:
                return example.split(mark, 1)[0]
    return None
