"""The pure-Python LibSVM line parser: exact by construction (Python's ``float``/``int``), slow. The compiled
kernel hands it the rare lines it cannot decide exactly, and the tests compare the kernel against it."""
from __future__ import annotations

import math

import numpy as np

from .options import ParseOptions
from .reasons import CODE, BadLine, pair_count_token

__all__ = ["parse_line", "parse_sparse_line", "LineError", "to_f32", "hand_over"]

_INT64_MAX = (1 << 63) - 1


class LineError(ValueError):
    """Raised by ``parse_line`` for a bad line: ``reason`` is one of ``REASONS``; ``token`` the culprit."""

    def __init__(self, reason: str, token: bytes = b""):
        self.reason = reason
        self.token = token
        super().__init__(f"{reason}: {token!r}")


# --------------------------------------------------------------------------------------------------------
# Python reference (exact by construction): used for the lines the kernel hands over, and by the tests.


def parse_line(line: bytes, opts: ParseOptions) -> tuple[float, list[int], list[float], bool] | None:
    """Parse one line (without its newline) into a fixed-width row. Returns None for a blank/comment-only
    line, else ``(label32, ids, values32, unordered)`` with ids shifted by the index base and padded/truncated
    to ``field_size``; ``unordered``: the line's ids do not increase (positional ids, ``strict_ids`` off).
    Raises ``LineError`` for a bad line."""
    parts = _tokens(line)
    if not parts:
        return None
    label32 = _number(parts[0], opts, "bad_label")
    feats = parts[1:]
    if feats and feats[0].startswith(b"qid:"):
        feats = feats[1:]
    ids, vals = _pairs(feats, opts, strict=opts.strict_ids)
    unordered = any(b <= a for a, b in zip(ids, ids[1:]))
    k, f = len(ids), opts.field_size
    if k != f:
        if k < f and opts.pad:
            ids += [0] * (f - k)
            vals += [0.0] * (f - k)
        elif k > f and opts.truncate:
            del ids[f:], vals[f:]
        else:
            raise LineError("pair_count", pair_count_token(k, f))
    return label32, ids, vals, unordered


def parse_sparse_line(line: bytes, opts: ParseOptions
                      ) -> tuple[list[float], int | None, list[int], list[float]] | None:
    """Parse one line (without its newline) into a sparse row, as scikit-learn's ``load_svmlight_file``
    does. Returns None for a blank/comment-only line, else ``(labels32, qid, ids, values32)``: one label, or
    with ``multilabel`` the comma-separated labels sorted ascending (none when the first token is already
    ``index:value``); ``qid`` the int of a leading ``qid:N`` with ``keep_qid`` (else None); ids zero-based.
    Raises ``LineError`` for a bad line."""
    parts = _tokens(line)
    if not parts:
        return None
    if not opts.multilabel:
        labels, feats = [_number(parts[0], opts, "bad_label")], parts[1:]
    elif b":" in parts[0]:
        labels, feats = [], parts
    else:
        try:
            ys = sorted(float(y) for y in parts[0].split(b","))
        except ValueError:
            raise LineError("bad_label", parts[0]) from None
        labels, feats = [_finite32(y, parts[0], opts) for y in ys], parts[1:]
    qid = None
    if feats and feats[0].startswith(b"qid:"):
        if opts.keep_qid:
            try:
                qid = int(feats[0][4:])
            except ValueError:
                raise LineError("bad_qid", feats[0]) from None
            if not -_INT64_MAX - 1 <= qid <= _INT64_MAX:
                raise LineError("bad_qid", feats[0])
        feats = feats[1:]
    elif opts.keep_qid:
        raise LineError("missing_qid")
    ids, vals = _pairs(feats, opts)
    return labels, qid, ids, vals


def _tokens(line: bytes) -> list[bytes]:
    """The line's tokens (comment cut, split on ASCII whitespace), after the NUL / non-ASCII checks."""
    nul = line.find(b"\x00")
    if nul >= 0:
        raise LineError("nul_byte", line[max(0, nul - 10): nul + 10])
    content = line.split(b"#", 1)[0]
    if not content.isascii():
        bad = next(i for i, c in enumerate(content) if c >= 0x80)
        raise LineError("non_ascii", content[max(0, bad - 10): bad + 10])
    return content.split()


def _number(tok: bytes, opts: ParseOptions, reason: str) -> float:
    """A label or value token as float32 (exact: Python's float, then a float32 cast)."""
    try:
        v = float(tok)
    except ValueError:
        raise LineError(reason, tok) from None
    return _finite32(v, tok, opts)


def _finite32(v: float, tok: bytes, opts: ParseOptions) -> float:
    v32 = to_f32(v)
    if not opts.allow_nonfinite and not math.isfinite(v32):
        raise LineError("nonfinite", tok)
    return v32


def _pairs(feats: list[bytes], opts: ParseOptions, strict: bool = True) -> tuple[list[int], list[float]]:
    """The ``index:value`` tokens of a line: ids shifted by the base and float32 values, checked in line
    order; ``strict``: ids must increase (scikit-learn's rule), else any order and repeats are kept."""
    ids: list[int] = []
    vals: list[float] = []
    prev = -1
    for tok in feats:
        if b":" not in tok:
            raise LineError("bad_token", tok)
        idx_s, val_s = tok.split(b":", 1)
        if not idx_s:
            raise LineError("missing_index", tok)
        try:
            idx = int(idx_s)
        except ValueError:
            raise LineError("bad_index", tok) from None
        if idx < 0:
            raise LineError("negative_index", tok)
        if idx > _INT64_MAX:
            raise LineError("bad_index", tok)
        if idx == 0 and opts.index_base == 1:
            raise LineError("index_zero", tok)
        if strict and idx == prev:
            raise LineError("duplicate_index", tok)
        if strict and idx < prev:
            raise LineError("unsorted_index", tok)
        if opts.max_index is not None and idx > opts.max_index:
            raise LineError("index_too_large", tok)
        prev = idx
        if not val_s:
            raise LineError("missing_value", tok)
        try:
            v = float(val_s)
        except ValueError:
            raise LineError("bad_value", tok) from None
        ids.append(idx - opts.index_base)
        vals.append(_finite32(v, tok, opts))
    return ids, vals


def to_f32(v: float) -> float:
    with np.errstate(over="ignore"):
        return float(np.float32(v))


# --------------------------------------------------------------------------------------------------------


def hand_over(block: bytes, state, parse, opts: ParseOptions, counts, bad: list, max_examples: int):
    """The line a kernel handed over (FALLBACK at ``state[0]``) through the Python ``parse`` (``parse_line``
    or ``parse_sparse_line``): a bad line is counted by reason (and kept among the first ``max_examples``), a
    blank one counted in ``state[3]``; ``state`` then moves past the line. Returns the parsed row or None."""
    start = int(state[0])
    end = block.find(b"\n", start)
    try:
        parsed = parse(block[start: len(block) if end < 0 else end], opts)
    except LineError as e:
        counts[CODE[e.reason]] += 1
        if len(bad) < max_examples:
            bad.append(BadLine(int(state[1]), e.reason, e.token))
        parsed = None
    else:
        if parsed is None:
            state[3] += 1
    state[0] = len(block) if end < 0 else end + 1
    state[1] += 1
    return parsed
