"""Why a LibSVM line is rejected: the reason names (in documentation order), their messages, the integer
codes the compiled kernel reports (named constants, one per reason), and ``BadLine``."""
from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Iterable

__all__ = ["REASONS", "REASON_TEXT", "CODE", "BadLine", "pair_count_token", "field_size_hint",
           "first_bad_message", "NUL_BYTE", "NON_ASCII", "BAD_LABEL",
           "BAD_TOKEN", "MISSING_INDEX", "BAD_INDEX", "NEGATIVE_INDEX", "INDEX_ZERO", "UNSORTED_INDEX",
           "DUPLICATE_INDEX", "INDEX_TOO_LARGE", "MISSING_VALUE", "BAD_VALUE", "NONFINITE", "PAIR_COUNT", "BAD_QID",
           "MISSING_QID"]

# Reason codes for bad lines: a code is the reason's position here. Order = documentation order.
REASONS = (
    "nul_byte",          # a NUL byte anywhere in the line (binary or corrupted data)
    "non_ascii",         # a byte >= 0x80 outside a comment (invalid UTF-8 or non-ASCII text)
    "bad_label",         # label is not a number
    "bad_token",         # a feature token without ':' (e.g. 'abc')
    "missing_index",     # ':4'
    "bad_index",         # index is not an integer ('x:1', '1.5:1') or does not fit int64
    "negative_index",    # '-3:1'
    "index_zero",        # index 0 in one-based input
    "unsorted_index",    # index smaller than the previous one on the line
    "duplicate_index",   # index equal to the previous one on the line
    "index_too_large",   # index above max_index
    "missing_value",     # '3:'
    "bad_value",         # value is not a number ('3:x', '3:4:5')
    "nonfinite",         # nan/inf label or value (also a float32 overflow), unless allowed
    "pair_count",        # number of index:value pairs differs from field_size (and no pad/truncate)
    "bad_qid",           # --keep-qid: 'qid:x', 'qid:' (the value is not an integer that fits int64)
    "missing_qid",       # --keep-qid: a line without 'qid:N'
)
(NUL_BYTE, NON_ASCII, BAD_LABEL, BAD_TOKEN, MISSING_INDEX, BAD_INDEX, NEGATIVE_INDEX, INDEX_ZERO, UNSORTED_INDEX,
 DUPLICATE_INDEX, INDEX_TOO_LARGE, MISSING_VALUE, BAD_VALUE, NONFINITE, PAIR_COUNT, BAD_QID,
 MISSING_QID) = range(len(REASONS))
CODE = {r: i for i, r in enumerate(REASONS)}

REASON_TEXT = {
    "nul_byte": "NUL byte in line",
    "non_ascii": "non-ASCII byte outside a comment (invalid UTF-8 or non-ASCII text)",
    "bad_label": "label is not a number",
    "bad_token": "feature token is not index:value",
    "missing_index": "feature token has no index",
    "bad_index": "index is not a non-negative integer that fits int64",
    "negative_index": "negative index",
    "index_zero": "index 0 in one-based input (pass --index-base 0 if the data is zero-based)",
    "unsorted_index": "indices are not sorted in increasing order",
    "duplicate_index": "duplicate index",
    "index_too_large": "index above --max-index",
    "missing_value": "feature token has no value",
    "bad_value": "value is not a number",
    "nonfinite": "nan/inf value (pass --allow-nonfinite to keep them)",
    "pair_count": "wrong number of index:value pairs for --field-size (see --pad / --truncate)",
    "bad_qid": "qid is not an integer that fits int64",
    "missing_qid": "no qid:N on this line (--keep-qid needs one on every line)",
}


@dataclass(frozen=True)
class BadLine:
    """One rejected line: its number in the input, the reason code and the offending token (bytes)."""

    line: int
    reason: str
    token: bytes = b""

    @property
    def message(self) -> str:
        tok = self.token[:60].decode("ascii", "backslashreplace")
        return f"{REASON_TEXT[self.reason]} ({tok!r})" if self.token else REASON_TEXT[self.reason]

    def describe(self, path: str) -> str:
        """``file:line: reason: message`` — the form used in errors, logs and the manifest."""
        return f"{path}:{self.line}: {self.reason}: {self.message}"


def pair_count_token(k: int, field_size: int) -> bytes:
    """The 'token' shown for a pair-count error, which has no single culprit token."""
    return f"{k} pairs, field_size {field_size}".encode()


_PAIRS = re.compile(r"(\d+) pairs, field_size (\d+)'?\)?$")


def field_size_hint(skipped: dict[str, int], written: int, examples: Iterable[BadLine | str]) -> str | None:
    """"every line has K pairs: did you mean --field-size K?" when nothing was valid and every rejected line
    seen (``examples``: BadLines, or their ``describe`` strings as a manifest keeps them) has the same pair count
    K: the option, not the data, is wrong. None otherwise (a few odd lines are bad data, not a wrong option)."""
    if written or set(skipped) != {"pair_count"}:
        return None
    counts = set()
    for ex in examples:
        text = ex.token.decode("ascii", "replace") if isinstance(ex, BadLine) else ex
        m = _PAIRS.search(text)
        if m is None:
            return None
        counts.add(int(m.group(1)))
    if len(counts) != 1:
        return None
    (k,) = counts
    return f"every line has {k} pairs: did you mean --field-size {k}?"


def first_bad_message(bad: list[BadLine], skipped: dict[str, int], written: int) -> str:
    """The error of ``--on-error raise`` for a block's first bad line (``bad``: its first bad lines, ``skipped``:
    its counts by reason, ``written``: its valid lines): a wrong ``--field-size`` when the block says so
    (``field_size_hint``), else the reason and the way to skip such lines."""
    b = bad[0]
    hint = field_size_hint(skipped, written, bad)
    if hint is not None:
        return f"{b.reason}: {b.message}: {hint}"
    return f"{b.reason}: {b.message} (use --on-error skip to skip bad lines)"
