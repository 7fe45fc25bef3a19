"""The batches of an epoch, written once (pure, no TensorFlow): the planner's equal steps, every graph's steps per
epoch and the bench's epoch lengths are this function of the records a rank's epoch holds."""
from __future__ import annotations

__all__ = ["epoch_batches"]


def epoch_batches(records: int, batch_size: int, drop_remainder: bool) -> int:
    """Batches of ``batch_size`` that ``records`` records make: whole batches only with ``drop_remainder``, else
    one more for a short last batch."""
    return records // batch_size if drop_remainder else -(-records // batch_size)
