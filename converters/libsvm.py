"""Pure LibSVM parsing: a block of input bytes in, numpy arrays plus line accounting out (no I/O).

``parse_block`` is the conversion core shared by the local converter, and meant for a Beam DoFn or a
SageMaker Processing job: it takes whole lines (a block ending at a newline, as ``sources.iter_blocks``
yields) and returns ``label`` float32 [n], ``ids`` int64 [n, field_size] (zero-based) and ``values``
float32 [n, field_size], with blank lines counted and every bad line counted by reason (the first few
kept with their line number).

Semantics follow scikit-learn's ``load_svmlight_file`` exactly (its values are what the tests compare to):

* a line is cut at its first ``#`` (comment); the rest is split on ASCII whitespace (space, tab, CR,
  VT, FF), so tabs, repeated spaces, CRLF and a missing final newline need no special case;
* a line with no token is blank: skipped and counted, not an error;
* the first token is the label (Python ``float`` syntax); a first feature token ``qid:...`` is ignored
  (as scikit-learn does with ``query_id=False``);
* each other token is ``index:value``; index a (non-negative) integer, strictly increasing along the line;
  value a Python ``float``; numbers are read as float64 (correctly rounded, like ``strtod``) and then cast
  to float32.

One compiled pass (numba) parses the regular lines. Numbers it cannot convert *exactly* with the
fast path (mantissa >= 2**53, decimal exponent beyond +-22, ``nan``/``inf``, underscores, signs on
indices, ...) make it hand that one line to ``parse_line`` — the pure-Python reference — so results equal
Python's ``float()``/``int()`` bit for bit. Such lines are rare in real data.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np

from ._jit import njit

__all__ = ["REASONS", "REASON_TEXT", "ParseOptions", "BadLine", "ParsedBlock", "LineError", "parse_block",
           "parse_line", "min_index", "has_zero_index", "convert_block", "serialize_parsed"]

# Reason codes for bad lines (the kernel uses their positions). Order = documentation order.
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
)
(_NUL, _NON_ASCII, _BAD_LABEL, _BAD_TOKEN, _MISSING_INDEX, _BAD_INDEX, _NEGATIVE, _INDEX_ZERO, _UNSORTED,
 _DUPLICATE, _TOO_LARGE, _MISSING_VALUE, _BAD_VALUE, _NONFINITE, _PAIR_COUNT) = range(len(REASONS))
_CODE = {r: i for i, r in enumerate(REASONS)}

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
}

MAX_EXAMPLES = 20  # bad lines kept per block (the first ones, in line order)
_INT64_MAX = (1 << 63) - 1
# kernel exit statuses
_DONE, _ROWS_FULL, _FALLBACK = 0, 1, 2


@dataclass(frozen=True)
class ParseOptions:
    """How lines become records. ``index_base`` is 0 or 1 here (``auto`` is decided by the caller over all
    inputs with ``min_index``). ``max_index`` bounds indices as written in the file."""

    field_size: int
    index_base: int = 1
    pad: bool = False
    truncate: bool = False
    allow_nonfinite: bool = False
    max_index: int | None = None

    def __post_init__(self):
        if not isinstance(self.field_size, int) or isinstance(self.field_size, bool) or self.field_size <= 0:
            raise ValueError(f"field_size must be a positive integer, got {self.field_size!r}")
        if self.index_base not in (0, 1) or isinstance(self.index_base, bool):
            raise ValueError(f"index_base must be 0 or 1 here, got {self.index_base!r}")
        if self.max_index is not None and (not isinstance(self.max_index, int) or self.max_index < 0):
            raise ValueError(f"max_index must be a non-negative integer or None, got {self.max_index!r}")


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


@dataclass
class ParsedBlock:
    """What ``parse_block`` returns. ``records_read == len(label) + sum(skipped.values())``."""

    label: np.ndarray
    ids: np.ndarray
    values: np.ndarray
    first_line: int
    lines: int                      # physical lines in the block
    blank: int                      # blank and comment-only lines (not records)
    skipped: dict[str, int] = field(default_factory=dict)
    bad: list[BadLine] = field(default_factory=list)  # the first MAX_EXAMPLES bad lines, in line order
    fallback_lines: int = 0         # lines parsed by the Python reference (exactness fallback)

    @property
    def n(self) -> int:
        return int(self.label.shape[0])

    @property
    def records_read(self) -> int:
        return self.n + sum(self.skipped.values())


class LineError(ValueError):
    """Raised by ``parse_line`` for a bad line: ``reason`` is one of ``REASONS``; ``token`` the culprit."""

    def __init__(self, reason: str, token: bytes = b""):
        self.reason = reason
        self.token = token
        super().__init__(f"{reason}: {token!r}")


# --------------------------------------------------------------------------------------------------------
# Python reference (exact by construction): used for the lines the kernel hands over, and by the tests.

_PY_WS = b" \t\r\x0b\x0c\n"


def parse_line(line: bytes, opts: ParseOptions) -> tuple[float, list[int], list[float]] | None:
    """Parse one line (without its newline). Returns None for a blank/comment-only line, else
    ``(label32, ids, values32)`` with ids zero-based and padded/truncated to ``field_size``; raises
    ``LineError`` for a bad line."""
    nul = line.find(b"\x00")
    if nul >= 0:
        raise LineError("nul_byte", line[max(0, nul - 10): nul + 10])
    content = line.split(b"#", 1)[0]
    if not content.isascii():
        bad = next(i for i, c in enumerate(content) if c >= 0x80)
        raise LineError("non_ascii", content[max(0, bad - 10): bad + 10])
    parts = content.split()
    if not parts:
        return None
    try:
        label = float(parts[0])
    except ValueError:
        raise LineError("bad_label", parts[0]) from None
    label32 = _to_f32(label)
    if not opts.allow_nonfinite and not math.isfinite(label32):
        raise LineError("nonfinite", parts[0])
    feats = parts[1:]
    if feats and feats[0].startswith(b"qid:"):
        feats = feats[1:]
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
        if idx == prev:
            raise LineError("duplicate_index", tok)
        if idx < prev:
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
        v32 = _to_f32(v)
        if not opts.allow_nonfinite and not math.isfinite(v32):
            raise LineError("nonfinite", tok)
        ids.append(idx - opts.index_base)
        vals.append(v32)
    k, f = len(ids), opts.field_size
    if k != f:
        if k < f and opts.pad:
            ids += [0] * (f - k)
            vals += [0.0] * (f - k)
        elif k > f and opts.truncate:
            del ids[f:], vals[f:]
        else:
            raise LineError("pair_count", _pair_count_token(k, f))
    return label32, ids, vals


def _to_f32(v: float) -> float:
    with np.errstate(over="ignore"):
        return float(np.float32(v))


# --------------------------------------------------------------------------------------------------------
# The compiled kernel.

_POW10 = np.array([10.0 ** k for k in range(23)], dtype=np.float64)  # all exact doubles
_MANT_LIMIT = 1 << 53


@njit(cache=True, nogil=True, inline="always")
def _is_ws(c):
    return c == 32 or c == 9 or c == 13 or c == 11 or c == 12


@njit(cache=True, nogil=True, inline="always")
def _is_delim(c):
    """Ends a token: whitespace, newline or the start of a comment."""
    return c == 32 or c == 9 or c == 13 or c == 11 or c == 12 or c == 10 or c == 35


@njit(cache=True, nogil=True, inline="always")
def _scan_float(buf, i, n, pow10):
    """Parse the token at ``i`` as ``[+-]digits[.digits][(e|E)[+-]digits]``, exactly.

    Returns (status, value, end): status 0 = value is the correctly rounded float64 and the token ends at
    ``end``; 1 = not decided here (irregular syntax, or not exactly convertible with one multiplication or
    division by an exact power of ten) — never 'bad'; 2 = empty token."""
    a = i
    neg = False
    if i < n and (buf[i] == 43 or buf[i] == 45):
        neg = buf[i] == 45
        i += 1
    m = np.int64(0)
    nd = 0
    e10 = 0
    while i < n:
        c = buf[i]
        if c < 48 or c > 57:
            break
        m = m * 10 + (c - 48)
        if m >= _MANT_LIMIT:
            return 1, 0.0, i
        nd += 1
        i += 1
    if i < n and buf[i] == 46:
        i += 1
        while i < n:
            c = buf[i]
            if c < 48 or c > 57:
                break
            m = m * 10 + (c - 48)
            if m >= _MANT_LIMIT:
                return 1, 0.0, i
            nd += 1
            e10 -= 1
            i += 1
    if nd == 0:
        if i == a and (i >= n or _is_delim(buf[i])):
            return 2, 0.0, i
        return 1, 0.0, i
    if i < n and (buf[i] == 101 or buf[i] == 69):
        i += 1
        eneg = False
        if i < n and (buf[i] == 43 or buf[i] == 45):
            eneg = buf[i] == 45
            i += 1
        ne = 0
        ex = 0
        while i < n:
            c = buf[i]
            if c < 48 or c > 57:
                break
            ex = ex * 10 + (c - 48)
            ne += 1
            if ne > 4:
                return 1, 0.0, i
            i += 1
        if ne == 0:
            return 1, 0.0, i
        e10 += -ex if eneg else ex
    if i < n and not _is_delim(buf[i]):
        return 1, 0.0, i
    if m == 0:
        v = 0.0
    elif e10 == 0:
        v = float(m)
    elif 0 < e10 <= 22:
        v = float(m) * pow10[e10]
    elif -22 <= e10 < 0:
        v = float(m) / pow10[-e10]
    else:
        return 1, 0.0, i
    return 0, -v if neg else v, i


@njit(cache=True, nogil=True)
def _token_end(buf, i, n):
    while i < n and not _is_delim(buf[i]):
        i += 1
    return i


@njit(cache=True, nogil=True)
def _line_check(buf, start, n):
    """Scan a whole line: returns (eol, reason, at) with reason 0 for a NUL byte anywhere, 1 for a byte
    >= 0x80 before the first '#', -1 if neither."""
    p = start
    cmt = False
    nul = -1
    na = -1
    while p < n:
        c = buf[p]
        if c == 10:
            break
        if c == 0:
            if nul < 0:
                nul = p
        elif c == 35:
            cmt = True
        elif c >= 128 and not cmt and na < 0:
            na = p
        p += 1
    if nul >= 0:
        return p, 0, nul
    if na >= 0:
        return p, 1, na
    return p, -1, -1


@njit(cache=True, nogil=True)
def _record_bad(counts, ex, state, reason, line, t0, t1):
    counts[reason] += 1
    k = state[4]
    if k < ex.shape[0]:
        ex[k, 0] = line
        ex[k, 1] = reason
        ex[k, 2] = t0
        ex[k, 3] = t1
        state[4] = k + 1


@njit(cache=True, nogil=True)
def _parse_kernel(buf, state, field_size, base, pad, truncate, allow_nonfinite, max_index,
                  labels, ids, values, counts, ex, pow10):
    """Parse lines from state[0] on, one pass over the bytes. state = [pos, line, row, blank, n_examples].
    Returns _DONE, _ROWS_FULL (grow the arrays and call again) or _FALLBACK (the line at state[0] needs the
    Python reference; the caller parses it, advances state and calls again)."""
    n = buf.shape[0]
    cap = labels.shape[0]
    pos = state[0]
    line = state[1]
    row = state[2]
    while pos < n:
        if row >= cap:
            state[0] = pos
            state[1] = line
            state[2] = row
            return 1
        start = pos
        q = pos
        while q < n and _is_ws(buf[q]):
            q += 1
        if q >= n or buf[q] == 10 or buf[q] == 35:  # blank or comment-only line
            eol, why, at = _line_check(buf, q, n)
            if why >= 0:
                _record_bad(counts, ex, state, why, line, max(start, at - 10), min(eol, at + 10))
            else:
                state[3] += 1
            pos = eol + 1
            line += 1
            continue
        t0 = q
        st, lab, q = _scan_float(buf, q, n, pow10)
        if st != 0:
            state[0] = start
            state[1] = line
            state[2] = row
            return 2
        lab32 = np.float32(lab)
        bad = -1
        b0 = t0
        b1 = q
        if not allow_nonfinite and not np.isfinite(lab32):
            bad = 13
        labels[row] = lab32
        k = 0
        prev = np.int64(-1)
        first = True
        fallback = False
        while bad < 0:
            while q < n and _is_ws(buf[q]):
                q += 1
            if q >= n or buf[q] == 10 or buf[q] == 35:
                break
            t0 = q
            idx = np.int64(0)
            nd = 0
            while q < n:
                c = buf[q]
                if c < 48 or c > 57:
                    break
                if nd < 18:
                    idx = idx * 10 + (c - 48)
                nd += 1
                q += 1
            if nd == 0 or nd > 18 or q >= n or buf[q] != 58:
                # irregular token: qid, no colon, no index, or something Python must judge
                t1 = q
                colon = -1
                while t1 < n and not _is_delim(buf[t1]):
                    if buf[t1] == 58 and colon < 0:
                        colon = t1
                    t1 += 1
                if (first and t1 - t0 >= 4 and buf[t0] == 113 and buf[t0 + 1] == 105 and buf[t0 + 2] == 100
                        and buf[t0 + 3] == 58):
                    for j in range(t0, t1):  # qid:... ignored, unless it hides bytes Python must judge
                        if buf[j] == 0 or buf[j] >= 128:
                            fallback = True
                    first = False
                    q = t1
                    if fallback:
                        break
                    continue
                b0 = t0
                b1 = t1
                if colon < 0:
                    bad = 3
                elif colon == t0:
                    bad = 4
                else:
                    fallback = True
                break
            first = False
            q += 1  # past ':'
            if idx == 0 and base == 1:
                bad = 7
            elif idx == prev:
                bad = 9
            elif idx < prev:
                bad = 8
            elif max_index >= 0 and idx > max_index:
                bad = 10
            if bad >= 0:
                b0 = t0
                b1 = _token_end(buf, q, n)
                break
            prev = idx
            st, v, q = _scan_float(buf, q, n, pow10)
            if st == 1:
                fallback = True
                break
            if st == 2:
                bad = 11
                b0 = t0
                b1 = q
                break
            v32 = np.float32(v)
            if not allow_nonfinite and not np.isfinite(v32):
                bad = 13
                b0 = t0
                b1 = q
                break
            if k < field_size:
                ids[row, k] = idx - base
                values[row, k] = v32
            k += 1
        if fallback:
            state[0] = start
            state[1] = line
            state[2] = row
            return 2
        if bad >= 0:
            # a NUL anywhere / non-ASCII before '#' takes precedence (as in the Python reference)
            eol, why, at = _line_check(buf, start, n)
            if why >= 0:
                bad = why
                b0 = max(start, at - 10)
                b1 = min(eol, at + 10)
        else:
            eol = q
            if q < n and buf[q] == 35:  # comment: only a NUL byte matters there
                eol, why, at = _line_check(buf, q, n)
                if why == 0:
                    bad = 0
                    b0 = max(start, at - 10)
                    b1 = min(eol, at + 10)
            if bad < 0 and k != field_size:
                if k < field_size and pad:
                    for j in range(k, field_size):
                        ids[row, j] = 0
                        values[row, j] = 0.0
                elif not (k > field_size and truncate):
                    bad = 14
                    b0 = -1  # no token: the example carries the pair count instead
                    b1 = k
        if bad >= 0:
            _record_bad(counts, ex, state, bad, line, b0, b1)
        else:
            row += 1
        pos = eol + 1
        line += 1
    state[0] = min(pos, n)
    state[1] = line
    state[2] = row
    return 0


@njit(cache=True, nogil=True)
def _min_index_kernel(buf):
    """Smallest index (>= 0) among feature tokens ``[+-]digits:...`` outside comments; -1 if none."""
    n = buf.shape[0]
    best = np.int64(-1)
    q = 0
    while q < n:
        # label (first token of the line)
        while q < n and _is_ws(buf[q]):
            q += 1
        tok = 0
        while q < n:
            while q < n and _is_ws(buf[q]):
                q += 1
            if q >= n or buf[q] == 10 or buf[q] == 35:
                break
            if tok > 0:
                j = q
                if buf[j] == 43 or buf[j] == 45:
                    j += 1
                v = np.int64(0)
                nd = 0
                while j < n and 48 <= buf[j] <= 57:
                    if nd < 18:
                        v = v * 10 + (buf[j] - 48)
                    nd += 1
                    j += 1
                if 0 < nd <= 18 and j < n and buf[j] == 58 and (best < 0 or v < best):
                    best = v
                    if best == 0:
                        return 0
                q = j
            while q < n and not _is_delim(buf[q]):
                q += 1
            tok += 1
        while q < n and buf[q] != 10:  # rest of the line (a comment)
            q += 1
        q += 1
    return best


@njit(cache=True, nogil=True)
def _has_zero_index_kernel(buf):
    """True if some feature token (not a label, not in a comment) has index 0 (``0:``, ``00:``, ``+0:``)."""
    n = buf.shape[0]
    for i in range(1, n):
        if buf[i] != 58 or buf[i - 1] != 48:
            continue
        j = i - 1
        while j >= 0 and buf[j] == 48:
            j -= 1
        if j >= 0 and (buf[j] == 43 or buf[j] == 45):
            j -= 1
        if j >= 0 and not (_is_ws(buf[j]) or buf[j] == 10):
            continue
        # the token starts at j + 1: an index only if a label precedes it on its line, outside a comment
        ls = j
        while ls >= 0 and buf[ls] != 10:
            ls -= 1
        seen = False
        comment = False
        for k in range(ls + 1, j + 1):
            if buf[k] == 35:
                comment = True
                break
            if not _is_ws(buf[k]):
                seen = True
        if seen and not comment:
            return True
    return False


def has_zero_index(block: bytes) -> bool:
    """Whether ``block`` holds an index 0 — the ``--index-base auto`` test, at memory-scan speed."""
    return bool(len(block)) and bool(_has_zero_index_kernel(np.frombuffer(block, dtype=np.uint8)))


def min_index(block: bytes) -> int | None:
    """The smallest index written in ``block`` (None if it has no feature token). For ``--index-base
    auto``: scan every input; any index 0 anywhere means zero-based, otherwise one-based."""
    if not block:
        return None
    v = int(_min_index_kernel(np.frombuffer(block, dtype=np.uint8)))
    return None if v < 0 else v


# --------------------------------------------------------------------------------------------------------

def parse_block(block: bytes, *, field_size: int, index_base: int = 1, pad: bool = False, truncate: bool = False,
                allow_nonfinite: bool = False, max_index: int | None = None, first_line: int = 1,
                path: str = "<input>", max_examples: int = MAX_EXAMPLES) -> ParsedBlock:
    """Parse whole LibSVM lines (``block`` ends at a newline, or is the end of the input). Pure: bytes in,
    arrays and accounting out. ``path`` is only used for messages."""
    opts = ParseOptions(field_size, index_base, pad, truncate, allow_nonfinite, max_index)
    return _parse(block, opts, first_line, max_examples)


def convert_block(block: bytes, *, field_size: int, keys: tuple[str, str, str] = ("label", "ids", "values"),
                  **parse_options) -> tuple[np.ndarray, np.ndarray, ParsedBlock]:
    """The whole pure conversion step: whole lines in, ``(framed, lengths, parsed)`` out — TFRecord-framed
    ``tf.train.Example`` bytes of the good lines (see ``examples.serialize_batch``) plus the accounting.
    ``parse_options`` are those of ``parse_block``."""
    parsed = parse_block(block, field_size=field_size, **parse_options)
    framed, lengths = serialize_parsed(parsed, keys)
    return framed, lengths, parsed


def serialize_parsed(parsed: ParsedBlock, keys: tuple[str, str, str] = ("label", "ids", "values")
                     ) -> tuple[np.ndarray, np.ndarray]:
    from .examples import serialize_batch
    from .synthetic import libsvm_schema

    if parsed.n == 0:
        return np.zeros(0, np.uint8), np.zeros(0, np.int64)
    lk, ik, vk = keys
    schema = libsvm_schema(parsed.ids.shape[1], lk, ik, vk)
    return serialize_batch(schema, {lk: parsed.label, ik: parsed.ids, vk: parsed.values})


def _parse(block: bytes, opts: ParseOptions, first_line: int, max_examples: int) -> ParsedBlock:
    buf = np.frombuffer(block, dtype=np.uint8)  # read-only view: one kernel signature for every caller
    f = opts.field_size
    # a valid record needs >= 1 + 4*f bytes ("L i:v ..."), except label-only lines with --pad; the
    # arrays grow if this guess is short
    cap = max(1, len(block) // 2 + 1 if opts.pad else len(block) // (1 + 4 * f) + 1)
    cap = min(cap, 1 << 16) if opts.pad else cap
    labels = np.empty(cap, np.float32)
    ids = np.empty((cap, f), np.int64)
    values = np.empty((cap, f), np.float32)
    counts = np.zeros(len(REASONS), np.int64)
    ex = np.zeros((max(max_examples, 1), 4), np.int64)
    state = np.array([0, first_line, 0, 0, 0], np.int64)
    max_idx = -1 if opts.max_index is None else min(opts.max_index, _INT64_MAX)
    py_bad: list[BadLine] = []
    fallback = 0
    while True:
        status = _parse_kernel(buf, state, f, opts.index_base, opts.pad, opts.truncate, opts.allow_nonfinite,
                               max_idx, labels, ids, values, counts, ex, _POW10)
        if status == _DONE:
            break
        if status == _ROWS_FULL:
            labels, ids, values = _grow(labels, ids, values)
            continue
        # _FALLBACK: the line at state[0] goes through the Python reference
        fallback += 1
        start = int(state[0])
        end = block.find(b"\n", start)
        nxt = len(block) if end < 0 else end + 1
        line = block[start: len(block) if end < 0 else end]
        try:
            parsed = parse_line(line, opts)
        except LineError as e:
            counts[_CODE[e.reason]] += 1
            if len(py_bad) < max_examples:
                py_bad.append(BadLine(int(state[1]), e.reason, e.token))
            parsed = None
        else:
            if parsed is None:
                state[3] += 1
        if parsed is not None:
            r = int(state[2])
            if r >= labels.shape[0]:
                labels, ids, values = _grow(labels, ids, values)
            labels[r] = parsed[0]
            ids[r] = parsed[1]
            values[r] = parsed[2]
            state[2] = r + 1
        state[0] = nxt
        state[1] += 1
    n = int(state[2])
    bad = [BadLine(int(ex[i, 0]), REASONS[int(ex[i, 1])], _example_token(block, ex[i], f))
           for i in range(int(state[4]))]
    if py_bad:
        bad = sorted(bad + py_bad, key=lambda b: b.line)
    skipped = {REASONS[i]: int(c) for i, c in enumerate(counts) if c}
    return ParsedBlock(labels[:n], ids[:n], values[:n], first_line=first_line, lines=int(state[1]) - first_line,
                       blank=int(state[3]),
                       skipped=skipped, bad=bad[:max_examples], fallback_lines=fallback)


def _example_token(block: bytes, row: np.ndarray, field_size: int) -> bytes:
    if row[2] < 0:
        return _pair_count_token(int(row[3]), field_size)
    return bytes(block[int(row[2]): int(row[3])])


def _pair_count_token(k: int, field_size: int) -> bytes:
    return f"{k} pairs, field_size {field_size}".encode()


def _grow(labels, ids, values):
    m = labels.shape[0] * 2
    nl = np.empty(m, labels.dtype)
    ni = np.empty((m, ids.shape[1]), ids.dtype)
    nv = np.empty((m, values.shape[1]), values.dtype)
    k = labels.shape[0]
    nl[:k], ni[:k], nv[:k] = labels, ids, values
    return nl, ni, nv
