"""``sharding.epochs.epoch_batches``: the one count of an epoch's batches (whole batches with ``drop_remainder``,
else a short last batch too)."""
from __future__ import annotations

import pytest

from sharding.epochs import epoch_batches


@pytest.mark.parametrize("records,batch,drop,want", [(10, 3, False, 4), (10, 3, True, 3), (9, 3, False, 3),
                                                     (9, 3, True, 3), (0, 3, False, 0), (2, 3, True, 0),
                                                     (2, 3, False, 1)])
def test_epoch_batches(records, batch, drop, want):
    assert epoch_batches(records, batch, drop) == want
