"""How many batches a finite input graph yields, told to tf.data (``assert_cardinality``) so that Keras ``fit`` and
``evaluate`` know an epoch's steps: a progress bar with an end, and no "Your input ran out of data" warning.

:func:`run_batches` counts, for a plan (and the input state a resumed read starts from), this rank's batches over
the spec's ``epochs``: each epoch :func:`sharding.epochs.epoch_batches` of the records (a columnar set: the
rows) the rank reads, no more than the planned ``take``; a resumed read the rest of its epoch and the epochs after
it. None where the count is not known exactly: ``epochs=None`` (endless), Pipe mode (the FIFO holds what the
channel streams), a spec without per-file record counts, or a tf.data service run without equal steps.
:func:`with_cardinality` tells it to the dataset where tf.data cannot count itself (files read record by record);
a graph whose count tf.data knows (a ``take`` of an endless stream) is left as it is. :func:`epoch_steps` is
one epoch's count: ``steps_per_epoch`` for Keras with an endless spec."""
from __future__ import annotations

from typing import Any

from sharding.epochs import epoch_batches

from ..plan.graphplan import GraphPlan

__all__ = ["run_batches", "epoch_steps", "with_cardinality"]


def run_batches(plan: GraphPlan, resume: dict | None = None) -> int | None:
    """Batches the graph of ``plan`` yields on this rank over the whole run (from ``resume``), or None (above)."""
    spec = plan.spec
    if spec.epochs is None:
        return None
    if plan.graph == "resumable":
        from ..resume.state import resume_position
        from .resumeweighted import sampled_steps

        e0, pos = resume_position(spec, resume) if resume is not None else (0, 0)
        return sampled_steps(spec, e0, pos)
    if plan.graph in ("service", "weighted"):   # equal steps per epoch, when planned
        return plan.steps * spec.epochs if plan.steps is not None else None
    if spec.mode != "file" or len(spec.file_records) != len(spec.files) or spec.rank_records is None:
        return None
    per_epoch = epoch_batches(spec.rank_records, spec.batch_size, spec.drop_remainder)
    if plan.steps is not None:
        per_epoch = min(per_epoch, plan.steps)
    return per_epoch * spec.epochs


def epoch_steps(spec) -> int | None:
    """Batches of one epoch of ``spec`` on this rank (None: not known, e.g. Pipe mode): Keras ``fit``'s
    ``steps_per_epoch`` for an endless spec (``epochs=None``), so that every Keras epoch is one epoch of the data
    and its last, short batch (without ``drop_remainder``) ends the Keras epoch instead of starting the next."""
    from ..plan.graphplan import plan_graph

    return run_batches(plan_graph(spec.with_(epochs=1)))


def with_cardinality(ds: Any, plan: GraphPlan, resume: dict | None = None) -> Any:
    """``ds`` with its batch count asserted (:func:`run_batches`) where tf.data does not know it."""
    import tensorflow as tf

    n = run_batches(plan, resume)
    if n is None or int(ds.cardinality()) != tf.data.UNKNOWN_CARDINALITY:
        return ds
    return ds.apply(tf.data.experimental.assert_cardinality(n))
