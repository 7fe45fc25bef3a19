"""Short, capped excerpts of what a message quotes (a bad field, a skipped line's report), so that no error
line, skip report or manifest grows with the input: the first bytes and the whole length."""
from __future__ import annotations

__all__ = ["excerpt", "capped", "FIELD_BYTES", "EXAMPLE_CHARS"]

FIELD_BYTES = 40  # bytes of a bad field a message quotes
EXAMPLE_CHARS = 300  # characters of one skipped-record report a manifest keeps


def excerpt(raw: bytes, limit: int = FIELD_BYTES) -> str:
    """``raw`` quoted as text (``'260.5'``), or its first ``limit`` bytes and its length when longer
    (``'aaaa...'... (27,262,976 bytes)``)."""
    text = bytes(raw[:limit]).decode("utf-8", "replace")  # raw may be a view: only its first bytes are copied
    return repr(text) if len(raw) <= limit else f"{text!r}... ({len(raw):,} bytes)"


def capped(text: str, limit: int = EXAMPLE_CHARS) -> str:
    """``text``, or its first ``limit`` characters and its length when longer."""
    return text if len(text) <= limit else f"{text[:limit]}... ({len(text):,} characters)"
