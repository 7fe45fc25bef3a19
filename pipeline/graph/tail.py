"""The tail every input graph ends with, written once: the vectorized parse of batches (``tf.io.parse_example``
from the spec's schema) unless the graph parsed already, the repeat of graphs that leave their epochs to it,
and prefetch; and the stages ``describe`` shows for them. Each graph's ``build`` returns its :class:`Tail`;
``pipeline.build`` applies it (:func:`graph_tail`)."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable

from ..plan.readplan import AUTOTUNE
from ..spec.pipelinespec import PipelineSpecBase
from ..spec.stage import Stage
from .parse import spec_parse_fn

__all__ = ["Tail", "parse_batches", "graph_tail", "tail_stages"]


@dataclass(frozen=True)
class Tail:
    """How a graph's batches end: the parse's threads and order, whether the graph parsed already, whether
    the tail repeats the epochs."""

    calls: int
    deterministic: bool
    parsed: bool = False
    repeat: bool = False


def parse_batches(ds: Any, spec: PipelineSpecBase, calls: int, deterministic: bool) -> Any:
    """``ds`` (vectors of serialized records) mapped through the spec's vectorized parse."""
    return ds.map(spec_parse_fn(spec), num_parallel_calls=calls, deterministic=deterministic)


def graph_tail(ds: Any, spec: PipelineSpecBase, tail: Tail, count: Callable[[Any], Any] | None = None) -> Any:
    """parse (unless ``tail.parsed`` already, or ``parse=False``) → repeat ``spec.epochs`` times (``tail.repeat``:
    the graph leaves its epochs to this stage) → ``count`` (the run's batch count told to tf.data) → prefetch,
    last."""
    calls, deterministic, parsed, repeat = tail.calls, tail.deterministic, tail.parsed, tail.repeat
    if spec.parse and not parsed:
        ds = parse_batches(ds, spec, calls, deterministic)
    if repeat and spec.epochs != 1:
        ds = ds.repeat(spec.epochs)
    if count is not None:
        ds = count(ds)
    if spec.prefetch != 0:
        ds = ds.prefetch(AUTOTUNE if spec.prefetch is None else spec.prefetch)
    return ds


def tail_stages(spec: PipelineSpecBase, *, calls: int, deterministic: bool, repeat_why: str | None = None
                ) -> list[Stage]:
    """The tail's stages: parse, repeat (when ``repeat_why`` says what an epoch is) and prefetch."""
    settings = {"fn": "tf.io.parse_example", "num_parallel_calls": "AUTOTUNE" if calls == AUTOTUNE else calls,
                "deterministic": deterministic, "output": spec.output}
    why = "vectorized parse from the manifest's schema" if spec.parse else "off: serialized batches"
    if spec.parse and spec.schema.varlen:
        kind = "SparseTensor" if spec.sparse_as == "sparse" else "RaggedTensor"
        settings["varlen"] = f"{','.join(spec.schema.varlen)} as tf.{kind}"
        why += "; " + _varlen_why(spec)
    stages = [Stage("parse", spec.parse, settings, why)]
    if repeat_why is not None:
        repeat = spec.epochs != 1
        stages.append(Stage("repeat", repeat, {"epochs": spec.epochs if spec.epochs else "forever"},
                            repeat_why if repeat else "one epoch"))
    stages.append(Stage("prefetch", spec.prefetch != 0,
                        {"buffer": "AUTOTUNE" if spec.prefetch is None else spec.prefetch},
                        "last: overlaps input with the training step" if spec.prefetch != 0 else "off (prefetch=0)"))
    return stages


def _varlen_why(spec: PipelineSpecBase) -> str:
    """How ``describe`` explains the variable-length features."""
    if spec.sparse_as == "ragged":
        return (f"variable-length {', '.join(spec.schema.varlen)} as tf.RaggedTensor [batch, None] "
                f"(sparse_as='ragged')")
    if spec.sparse_features:
        ids, values = spec.sparse_features
        return (f"{ids}/{values} as tf.SparseTensor [batch, {spec.num_features}] with indices [row, id] "
                f"(num_features from the manifest): ready for tf.sparse.sparse_dense_matmul({values}, W) and "
                f"tf.nn.embedding_lookup_sparse(table, {ids}, {values})")
    return f"variable-length {', '.join(spec.schema.varlen)} as tf.SparseTensor [batch, longest row]"
