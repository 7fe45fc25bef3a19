"""Helpers for Keras ``fit`` and ``tf.distribute`` input contexts, and ``tune`` (the read strategy for this
machine and data, measured)."""
from __future__ import annotations

from typing import Any

from converters.util.checks import as_int

from .build import build_dataset
from .plan.manifest import PipelineSpec
from .resume.state import input_state, resume_position

__all__ = ["keras_dataset", "distributed_dataset_fn", "tune", "fit_calls"]


def keras_dataset(manifest: str, batch_size: int, **options: Any):
    """``build_dataset(PipelineSpec.from_manifest(manifest, batch_size, **options))``: ready for
    ``model.fit(dataset, ..., shuffle=False)`` (the spec shuffles; Keras's own flag is ignored for a dataset)."""
    return build_dataset(PipelineSpec.from_manifest(manifest, batch_size, **options))


def distributed_dataset_fn(manifest: str, global_batch_size: int, **options: Any):
    """A ``dataset_fn(input_context)`` for ``strategy.distribute_datasets_from_function``.

    Each input pipeline reads ``shard(num_input_pipelines, input_pipeline_id)`` of the records (before any
    random op) with the per-replica batch size, and runs the same number of steps as every other pipeline.
    """
    def dataset_fn(input_context):
        per_replica = input_context.get_per_replica_batch_size(global_batch_size)
        spec = PipelineSpec.from_manifest(manifest, per_replica, num_shards=input_context.num_input_pipelines,
                                          shard_index=input_context.input_pipeline_id, **options)
        return build_dataset(spec)

    return dataset_fn


def tune(manifest: str, batch_size: int, *, seconds: float = 30.0, rounds: int = 7, store: bool = True,
         on_round: Any = None, **options: Any):
    """Time the output-equivalent read strategies for this shard set and batch size on this machine, in
    paired rounds, and store the winner (``tfpipe pipeline tune``); returns a ``pipeline.plan.tuning.TuneReport``.
    Afterwards ``read="auto"`` (the default) uses the winner here for this data and batch size."""
    from .plan.tuning import tune_read

    spec = PipelineSpec.from_manifest(manifest, batch_size, **options)
    return tune_read(spec, build_dataset, seconds=seconds, rounds=rounds, store=store, where=str(manifest),
                     on_round=on_round)


def fit_calls(spec, state: dict | None, *, epochs: int, steps_per_epoch: int) -> list[dict[str, Any]]:
    """The ``model.fit(**call, callbacks=...)`` calls that train Keras epochs ``0 .. epochs - 1`` of
    ``steps_per_epoch`` steps each, going on from ``state`` (``None``: a first run) — exactly the steps and
    batches the uninterrupted run has left, whatever step the state was saved at.

    Each call is ``{"x": dataset, "epochs", "initial_epoch", "steps_per_epoch", "shuffle": False}`` (the spec
    shuffles; Keras's ``shuffle=True`` default is ignored for a dataset and warns at every ``fit``). A state saved at an epoch
    end (or none) makes one call. A state saved ``k`` steps into Keras epoch ``e`` (``save_freq`` not a multiple
    of ``steps_per_epoch``) makes two: epoch ``e``'s other ``steps_per_epoch - k`` steps as a short epoch of its
    own, then epochs ``e + 1 ..`` from the state after it; so epoch ends (and what runs there: epoch-end
    checkpoints, schedules, logs) fall on the uninterrupted run's steps. ``initial_epoch = steps //
    steps_per_epoch`` alone would train the partial epoch again on new batches. No call once all steps are
    done. Give every call the same callbacks: ``InputStateCallback`` and ``ModelCheckpoint`` count steps
    across calls. Use ``epochs=None`` in the spec, so the data outlasts any number of Keras epochs."""
    epochs = as_int(epochs, "epochs", minimum=0, must="an integer >= 0")
    steps_per_epoch = as_int(steps_per_epoch, "steps_per_epoch", minimum=1, must="an integer >= 1")
    done = 0
    if state is not None:
        resume_position(spec, state)        # refuses a state of another set, seed, ... before any call
        done = state["steps"]
    epoch, into = divmod(done, steps_per_epoch)
    calls: list[dict[str, Any]] = []
    if epoch >= epochs:
        return calls
    if into:
        rest = steps_per_epoch - into
        calls.append({"x": build_dataset(spec, resume=state), "epochs": epoch + 1, "initial_epoch": epoch,
                      "steps_per_epoch": rest, "shuffle": False})
        state, epoch = input_state(spec, rest, start=state), epoch + 1
    if epoch < epochs:
        calls.append({"x": build_dataset(spec, resume=state), "epochs": epochs, "initial_epoch": epoch,
                      "steps_per_epoch": steps_per_epoch, "shuffle": False})
    return calls
