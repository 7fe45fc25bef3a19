"""A LibSVM conversion's accounting, shared by the local converter and the two-pass job: per-input counts
(``account``), the sparse layout's row totals (``RowTotals``), the log lines and the error for a run that
wrote nothing."""
from __future__ import annotations

import logging

from ..shardset.manifest import MAX_EXAMPLES, InputStats
from ..util.errors import InputError
from .reasons import field_size_hint

__all__ = ["RowTotals", "account", "log_totals", "empty_input", "nothing_written", "DEFAULT_BLOCK_BYTES",
           "UNORDERED_NOTE"]

log = logging.getLogger(__name__)

DEFAULT_BLOCK_BYTES = 4 << 20  # 4 MiB of text per parse task
UNORDERED_NOTE = "ids_unordered"  # InputStats.notes: written rows whose positional ids repeat or do not increase


def empty_input(stats, path: str | None = None, *, what: str = "the input holds no valid line") -> InputError:
    """The error for a conversion that wrote no record at all (``stats``: InputStats): see ``nothing_written``."""
    return InputError(nothing_written(stats, what), path=path, reason="empty_input")


class RowTotals:
    """The sparse layout's manifest figures, summed over blocks (``sparse.row_stats`` of each)."""

    def __init__(self):
        self.rows = self.nonzeros = 0
        self.min = self.max = 0
        self.max_id = -1

    def add(self, s: dict | None) -> None:
        if not s or not s["rows"]:
            return
        self.min = s["min_nonzeros"] if not self.rows else min(self.min, s["min_nonzeros"])
        self.max = max(self.max, s["max_nonzeros"])
        self.rows += s["rows"]
        self.nonzeros += s["nonzeros"]
        self.max_id = max(self.max_id, s["max_id"])

    def stats(self) -> dict[str, int]:
        """The totals in ``sparse.row_stats``'s form (so totals of parts add up like blocks)."""
        return {"rows": self.rows, "nonzeros": self.nonzeros, "min_nonzeros": self.min, "max_nonzeros": self.max,
                "max_id": self.max_id}

    def extra(self) -> dict:
        """``num_features``: largest zero-based id + 1 (1 when no row has a feature, as scikit-learn's
        ``n_features``); ``nonzeros``: per-row min/mean/max and the total."""
        mean = round(self.nonzeros / self.rows, 4) if self.rows else 0.0
        return {"num_features": max(self.max_id + 1, 1),
                "nonzeros": {"min": self.min, "mean": mean, "max": self.max, "total": self.nonzeros}}


def account(st: InputStats, written: int, skipped: dict[str, int], blank: int, bad, path: str, *,
            unordered: int = 0) -> None:
    """Add one block's (or unit's) result to its input file's accounting (read == written + skipped), with the
    first bad lines as examples and the written rows whose positional ids repeat or do not increase
    (``unordered``, a note: data, not a skip); every engine adds results this way."""
    st.note(UNORDERED_NOTE, unordered)
    st.records_written += written
    st.records_read += written + sum(skipped.values())
    st.blank_lines += blank
    for reason, count in skipped.items():
        st.skipped[reason] = st.skipped.get(reason, 0) + count
    for b in bad:
        if len(st.examples) < MAX_EXAMPLES:
            st.examples.append(b.describe(path))
            log.info("skipped %s", b.describe(path))


def nothing_written(stats, what: str = "the input holds no valid line") -> str:
    """Why a run wrote no record (``stats``: InputStats): no valid line, or ``--balance`` sampled out all of
    them (rows it removed are not bad lines)."""
    stats = list(stats)
    blank = sum(st.blank_lines for st in stats)
    read = sum(st.records_read for st in stats)
    sampled = sum(st.skipped.get("sampled_out", 0) for st in stats)
    if sampled:
        return (f"no records to write: --balance sampled out all {sampled} valid record(s) ({blank} blank/comment "
                f"line(s), {read - sampled} bad line(s) skipped); give the labels rates above 0")
    skipped: dict[str, int] = {}
    for st in stats:
        for k, v in st.skipped.items():
            skipped[k] = skipped.get(k, 0) + v
    hint = field_size_hint(skipped, 0, [e for st in stats for e in st.examples])
    return (f"no records to write: {what} ({blank} blank/comment line(s), {read} bad line(s) skipped)"
            f"{': ' + hint if hint else ''}")


def log_totals(stats, read: int, fallback: int) -> None:
    """Log the skipped lines by reason and the lines the exact Python parser took (``stats``: InputStats)."""
    stats = list(stats)
    skipped = sum(st.records_skipped for st in stats)
    if skipped:
        by_reason: dict[str, int] = {}
        for st in stats:
            for k, v in st.skipped.items():
                by_reason[k] = by_reason.get(k, 0) + v
        log.info("skipped %d bad line(s) of %d: %s", skipped, read,
                 ", ".join(f"{k}={v}" for k, v in sorted(by_reason.items())))
    if fallback:
        log.info("%d line(s) needed the exact Python number parser", fallback)
