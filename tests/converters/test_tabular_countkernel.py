"""converters.tabular.countkernel: the counting pass's radix sort against ``np.sort`` and its count of a block's
keys against a ``Counter`` of the values."""
from __future__ import annotations

from collections import Counter

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from converters.tabular.countkernel import radix_sort
from converters.tabular.vocab import _RADIX_FROM, sort_key, unique_keys

U64 = st.integers(0, (1 << 64) - 1)


@settings(max_examples=200, deadline=None)
@given(st.one_of(st.lists(U64, max_size=300),
                 st.lists(st.sampled_from([0, 1, 2047, 2048, 1 << 40, (1 << 64) - 1]), max_size=300)))
def test_radix_sort_is_np_sort(values):
    keys = np.array(values, np.uint64)
    before = keys.copy()
    assert np.array_equal(radix_sort(keys), np.sort(keys))
    assert np.array_equal(keys, before)  # a new array: the block's keys are left as they were


@pytest.mark.parametrize("n, bits", [(_RADIX_FROM - 1, 64), (_RADIX_FROM, 64), (100_000, 64), (100_000, 11),
                                     (100_000, 0)])
def test_radix_sort_of_a_block(n, bits):
    """Sizes on both sides of where the counting pass starts radix-sorting, keys of every width (0 bits: one
    value, every pass skipped)."""
    rng = np.random.default_rng(n + bits)
    top = np.iinfo(np.uint64).max
    keys = (rng.integers(0, top, n, dtype=np.uint64, endpoint=True) >> np.uint64(64 - bits) if bits
            else np.full(n, 7, np.uint64))
    keys[::5] <<= np.uint64(1)
    assert np.array_equal(radix_sort(keys), np.sort(keys))


value = st.binary(max_size=8).map(lambda b: b.rstrip(b"\0"))  # numpy S8 keeps no trailing NUL
special = st.sampled_from([b"", b"\n", b"a\n", b"\r", b"ab\r", b"a\rb", b"\r\n", b"12345678", b"1234567\r"])


def _counted(values) -> dict:
    """What a vocabulary counts: every value but the empty one, one with a newline and one ending in CR."""
    return {v: c for v, c in Counter(values).items() if v and b"\n" not in v and not v.endswith(b"\r")}


@settings(max_examples=200, deadline=None)
@given(st.lists(st.one_of(value, special), max_size=200), st.integers(1, 60))
def test_a_blocks_keys_counted_as_the_values(values, repeat):
    """``unique_keys``: the block's distinct values ascending with their counts, the empty value and values no
    vocabulary file can hold left out; ``repeat`` makes blocks past the radix sort's threshold."""
    values = values * repeat
    u, c = unique_keys(sort_key(np.array(values, "S8")))
    want = _counted(values)
    assert u.tolist() == sorted(want) and c.tolist() == [want[v] for v in sorted(want)]
