"""``converters.util.checks``: one validator for the counts and reals the API takes (NumPy numbers accepted and
stored as plain Python numbers, bools refused), used by every spec and option group."""
from __future__ import annotations

import json
from fractions import Fraction

import numpy as np
import pytest

from converters.util.checks import as_int, as_real, is_integral, is_real


@pytest.mark.parametrize("value,want", [
    (5, 5), (np.int64(5), 5), (np.int8(5), 5), (np.uint64(5), 5), (np.int32(0), None), (-1, None),
    (True, None), (np.bool_(True), None), (5.0, None), (np.float64(5), None), ("5", None), (None, None),
    (Fraction(5, 1), None),  # Rational, not Integral
])
def test_as_int(value, want):
    if want is None:
        with pytest.raises(ValueError, match=r"^n must be a positive integer, got "):
            as_int(value, "n", minimum=1)
    else:
        got = as_int(value, "n", minimum=1)
        assert got == want and type(got) is int and json.dumps(got) == "5"


@pytest.mark.parametrize("kw,value,message", [
    ({"minimum": 0}, -1, "n must be a non-negative integer, got -1"),
    ({"minimum": 0, "none": True}, "x", "n must be a non-negative integer or None, got 'x'"),
    ({"minimum": 0, "maximum": 3}, 4, "n must be an integer in [0, 3], got 4"),
    ({"minimum": 1, "must": ">= 1"}, np.int64(0), "n must be >= 1, got "),
])
def test_as_int_messages(kw, value, message):
    with pytest.raises(ValueError) as e:
        as_int(value, "n", **kw)
    assert str(e.value).startswith(message)


def test_none_passes_only_when_allowed():
    assert as_int(None, "n", none=True) is None and as_real(None, "x", none=True) is None
    with pytest.raises(ValueError):
        as_int(None, "n")


@pytest.mark.parametrize("value,ok", [
    (0.5, True), (np.float32(0.5), True), (np.float16(0.5), True), (3, True), (np.int64(3), True),
    (True, False), (np.bool_(False), False), (float("nan"), False), (float("inf"), False), ("0.5", False),
])
def test_as_real(value, ok):
    if ok:
        got = as_real(value, "x", minimum=0)
        assert type(got) is float and got == float(value)
    else:
        with pytest.raises(ValueError, match=r"^x must be a non-negative number, got "):
            as_real(value, "x", minimum=0)


def test_infinite_allowed_when_asked():
    assert as_real(float("inf"), "t", above=0, finite=False) == float("inf")


@pytest.mark.parametrize("value,integral,real", [
    (1, True, True), (np.uint8(1), True, True), (1.0, False, True), (np.float32(1), False, True),
    (True, False, False), (np.bool_(True), False, False), (1j, False, False), (None, False, False),
])
def test_kinds(value, integral, real):
    assert (is_integral(value), is_real(value)) == (integral, real)
