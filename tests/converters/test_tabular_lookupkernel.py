"""converters.tabular.lookupkernel: the lookup written in place (``table_put``) against ``table_get``."""
from __future__ import annotations

import numpy as np
import pytest

from converters.tabular.lookupkernel import table_build, table_get, table_put, table_slots


@pytest.mark.parametrize("dtype", [np.uint32, np.int64])
@pytest.mark.parametrize("offset", [0, 13, 70_000])
def test_table_put_is_table_get_plus_the_offset_in_its_column(dtype, offset):
    rng = np.random.default_rng(offset)
    keys = np.unique(rng.integers(1, np.iinfo(np.uint64).max, 5_000, dtype=np.uint64))
    ids = rng.permutation(keys.size).astype(np.int64) + 1
    table = table_build(keys, ids, table_slots(keys.size))
    query = np.concatenate([keys[::3], np.zeros(1, np.uint64),
                            rng.integers(1, np.iinfo(np.uint64).max, 500, dtype=np.uint64)])
    rng.shuffle(query)
    out = np.full((query.size, 3), 99, dtype)
    table_put(table, query, out, 1, offset)
    assert np.array_equal(out[:, 1], (table_get(table, query) + offset).astype(dtype))
    assert (out[:, [0, 2]] == 99).all()  # the other columns untouched
