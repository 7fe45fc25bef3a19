"""The batches of an epoch, written once (pure): every graph's steps per epoch are this function of the records
its rank's epoch holds (``pipeline.plan.graphplan.plan_graph`` says which records, per graph)."""
from __future__ import annotations

__all__ = ["epoch_batches"]


def epoch_batches(records: int, batch_size: int, drop_remainder: bool) -> int:
    """Batches of ``batch_size`` that ``records`` records make: whole batches only with ``drop_remainder``, else
    one more for a short last batch."""
    return records // batch_size if drop_remainder else -(-records // batch_size)
