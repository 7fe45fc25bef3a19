"""tfpipe pipeline: the tf.data input graphs trainers import.

``PipelineSpec.from_manifest(dir, batch_size, ...)`` → ``build_dataset(spec)`` yields ``(features, label)``
batches (a finite spec tells Keras its batch count); ``epoch_steps(spec)`` is one epoch's batches (Keras
``steps_per_epoch`` for an endless spec); ``describe(spec)`` explains the stages; ``lint(dataset)`` names order
mistakes in any tf.data graph; ``configure_threads()`` sets TF/OpenMP threading; ``tune(dir, batch_size)``
measures the read strategy for this machine and data and stores the winner, which ``read="auto"`` then uses.
TensorFlow is imported only when a function needs it.
"""
from __future__ import annotations

from converters.util.lazy import lazy_exports

__all__ = ["PipelineSpec", "build_dataset", "describe", "plan_stages", "lint", "Finding", "configure_threads",
           "parse_fn", "feature_spec", "keras_dataset", "distributed_dataset_fn", "tune", "read_plan", "SourceOptions",
           "ReadOptions", "ShuffleOptions", "ShardingOptions", "CacheOptions", "BatchOptions", "ParsingOptions",
           "ResumeOptions", "input_state", "ResumeError", "InputStateCallback", "save_input_state", "restore_input_state",
           "fit_calls", "epoch_steps"]

__getattr__, __dir__ = lazy_exports(__name__, {
    "PipelineSpec": ".plan.manifest", "build_dataset": ".build", "plan_stages": ".build", "parse_fn": ".build",
    "feature_spec": ".build", "describe": ".describe", "lint": ".lint", "Finding": ".lint",
    "configure_threads": ".threads", "keras_dataset": ".training", "distributed_dataset_fn": ".training",
    "tune": ".training", "read_plan": ".plan.readplan", "input_state": ".resume.state",
    "ResumeError": ".resume.state", "InputStateCallback": ".resume.checkpoint",
    "save_input_state": ".resume.checkpoint", "restore_input_state": ".resume.checkpoint",
    "fit_calls": ".training", "epoch_steps": ".graph.cardinality",
    **{name: ".spec.options" for name in ("SourceOptions", "ReadOptions", "ShuffleOptions", "ShardingOptions",
                                          "CacheOptions", "BatchOptions", "ParsingOptions", "ResumeOptions")},
}, globals())
