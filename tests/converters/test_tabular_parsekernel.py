"""converters.tabular.parsekernel: the one-pass parse against a Python reading of the rules, on arbitrary lines
(blank lines, CR/LF too, wrong field counts, labels other than 0/1, integers with signs, integral and fractional
decimals, non-digits and values one past int64, categorical values of any width and their 8-byte big-endian
keys)."""
from __future__ import annotations

import re
from decimal import Decimal

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from converters.tabular import parsekernel as K

ROLES = np.array([1, 2, 3, 2, 3], np.int64)  # label, I1, C1, I2, C2
SLOTS = np.array([0, 0, 0, 1, 1], np.int64)
I64 = (-(1 << 63), (1 << 63) - 1)


DECIMAL = re.compile(rb"[+-]?([0-9]+\.?[0-9]*|\.[0-9]+)([eE][+-]?[0-9]+)?")


def number(v: bytes) -> tuple[int, int]:
    """A count as the rules define it: ``(OK, value)`` for plain digits or an integral decimal in int64, else
    ``(status, 0)``."""
    if not DECIMAL.fullmatch(v):
        return K.NOT_INT, 0
    d = Decimal(v.decode())
    if d != d.to_integral_value():
        return K.NOT_INT, 0
    if not I64[0] <= d <= I64[1]:
        return K.OVERFLOW, 0
    return K.OK, int(d)


def reference(line: bytes):
    """(status, label, values, missing, errcol, count, keys) of one line as the rules define them."""
    if line.endswith(b"\r"):
        line = line[:-1]
    if not line:
        return K.BLANK, None
    fields = line.split(b"\t")
    if len(fields) != 5:
        return K.BAD_FIELDS, len(fields)
    label, values, missing, keys = 0, [0, 0], [False, False], [0, 0]
    for f, (role, slot) in enumerate(zip(ROLES, SLOTS)):
        v = fields[f]
        if role == 1:
            st, label = number(v)
            if st != K.OK or label not in (0, 1):
                return K.BAD_LABEL, None
        elif role == 2:
            if not v:
                missing[slot] = True
                continue
            st, n = number(v)
            if st != K.OK:
                return st, slot
            values[slot] = n
        else:
            keys[slot] = int.from_bytes(v[:8].ljust(8, b"\0"), "big")
    return K.OK, (label, values, missing, keys)


field = st.one_of(
    st.sampled_from([b"", b"0", b"1", b"-", b"+", b"-0", b"+7", b"12abc", b"1.5", b"260.0", b"-1.0", b"1e3", b"1.0",
                     b"1e-3", b"5.", b".0", b"1e19", b"9.223372036854775807e18", b"0e999", b"9223372036854775807",
                     b"9223372036854775808", b"-9223372036854775808", b"-9223372036854775809",
                     b"99999999999999999999x", b"68fd1e64", b"abcdefghij", b"\r"]),
    st.binary(max_size=12).filter(lambda b: b"\t" not in b and b"\n" not in b),
    st.integers(*I64).map(lambda n: str(n).encode()))
line = st.one_of(st.lists(field, min_size=5, max_size=5), st.lists(field, min_size=0, max_size=7)).map(
    lambda fs: b"\t".join(fs))
ending = st.sampled_from([b"\n", b"\r\n"])


@settings(max_examples=300, deadline=None)
@given(st.lists(st.tuples(line, ending), min_size=1, max_size=12))
def test_parse_block_follows_the_rules_line_by_line(lines):
    buf = b"".join(text + end for text, end in lines)
    status, labels, values, missing, errcol, counts, keys, widths, begins = K.parse_block(
        np.frombuffer(buf, np.uint8), 5, 9, ROLES, SLOTS, 2, 2)
    assert status.size == len(lines) and begins[-1] == len(buf)
    for r, (text, end) in enumerate(lines):
        assert buf[begins[r]:begins[r + 1]] == text + end
        want, detail = reference(text + end[:-1])
        assert status[r] == want, (text, end)
        if want == K.BAD_FIELDS:
            assert counts[r] == detail
        elif want in (K.NOT_INT, K.OVERFLOW):
            assert errcol[r] == detail
        elif want == K.OK:
            label, vals, miss, ks = detail
            assert (labels[r], values[r].tolist(), missing[r].tolist(), keys[:, r].tolist()) == (label, vals, miss, ks)
    ok = [text.rstrip(b"\r").split(b"\t") for (text, end), s in zip(lines, status) if s == K.OK]
    for j, f in enumerate((2, 4)):  # the longest value of each categorical column, over the good lines at least
        assert widths[j] >= max((len(x[f]) for x in ok), default=0)
