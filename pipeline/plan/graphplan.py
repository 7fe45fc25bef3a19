"""Which graph a spec builds, and what it reads, caches and takes: decided once, by :func:`plan_graph` (pure).

``build_dataset``, ``describe``/``tfpipe pipeline explain`` and every graph's stages read the one
:class:`GraphPlan` it returns. The graphs, in the order they are asked for:

======================  ==============================================================  =====================
graph                   when                                                            module
======================  ==============================================================  =====================
``service``             ``service=`` set (read + parse on a tf.data service's workers)  ``pipeline.graph.service``
``resumable``           :func:`resume_choice` says so, or an input state is resumed     ``pipeline.graph.resumable``
``columnar``            a columnar set (``layout``)                                     ``pipeline.graph.columnar``
``weighted``            a balanced group (``part_weights``)                             ``pipeline.graph.weighted``
``pipe``                Pipe mode (one FIFO per epoch)                                  ``pipeline.graph.pipe``
``plain``               File mode, anything else                                        ``pipeline.graph.plain``
======================  ==============================================================  =====================

:func:`resume_choice`: ``resumable=None`` (the default) builds the resumable order for a seeded, shuffled
File-mode spec on one rank that :func:`resume_refusal` does not refuse, ``True`` demands it, ``False`` opts out.

The steps of an epoch (:func:`graph_steps`) are :func:`sharding.epochs.epoch_batches` of the records each
graph's epoch holds on this rank. The resumable order's step arithmetic is here too (:func:`global_batch`,
:func:`epoch_records`, :func:`steps_for`, :func:`order_epoch_steps`): every step takes ``batch_size x
num_shards`` records of one global order, rank ``i`` the ``i``-th ``batch_size`` of them.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from sharding.epochs import epoch_batches

from ..spec.options import ResumeError
from .cachepolicy import choose_cache
from .readplan import ReadPlan, read_plan

__all__ = ["GRAPHS", "GraphPlan", "plan_graph", "resume_choice", "resume_refusal", "graph_steps", "group_steps",
           "global_batch", "epoch_records", "steps_for", "order_epoch_steps"]

GRAPHS = ("service", "resumable", "columnar", "weighted", "pipe", "plain")


@dataclass(frozen=True)
class GraphPlan:
    """What ``build_dataset(spec)`` builds, decided once (:func:`plan_graph`)."""

    spec: Any
    graph: str                        # one of GRAPHS
    resumable: bool                   # resume_choice's answer (explain's "graph:" line)
    why: str                          # ... and its reason
    read: ReadPlan | None             # the read (explicit > tuned > rule): File mode, or a columnar set's decode
                                      # rows in Pipe mode; None for a Pipe-mode Example set
    cache: tuple[str, str | None, str]   # (policy, path, why): pipeline.plan.cachepolicy.choose_cache
    steps: int | None                 # batches per epoch on this rank (the take), None: every batch
    stream: bool                      # a remote set read as its shards arrive in the host's cache

    def __post_init__(self):
        if self.graph not in GRAPHS:
            raise ValueError(f"graph must be one of {GRAPHS}, got {self.graph!r}")


def plan_graph(spec, resuming: bool = False) -> GraphPlan:
    """The one decision of which graph ``spec`` builds (``resuming``: an input state is given, which only the
    resumable graph continues), with its read, cache and steps (pure; raises :class:`ResumeError` for
    ``resumable=True`` on a spec that cannot resume)."""
    builds, why = resume_choice(spec)
    if spec.service is not None and not resuming:
        graph = "service"
    elif resuming or builds:
        graph = "resumable"
    elif spec.layout is not None:
        graph = "columnar"
    elif spec.part_weights:
        graph = "weighted"
    elif spec.mode == "pipe":
        graph = "pipe"
    else:
        graph = "plain"
    read = read_plan(spec) if spec.mode == "file" or spec.layout is not None else None
    return GraphPlan(spec, graph, builds, why, read, choose_cache(spec), graph_steps(spec, graph),
                     spec.stream is not None)


def graph_steps(spec, graph: str) -> int | None:
    """Batches per epoch on this rank for ``graph`` (None: every batch)."""
    if graph == "service":
        from .servicejob import service_steps

        return service_steps(spec)[0]
    if graph == "resumable":
        if resume_refusal(spec) is not None:   # the graph refuses it, in one line, when built
            return None
        return order_epoch_steps(spec)
    if graph == "weighted":
        return group_steps(spec, spec.records)
    return spec.take_steps


def group_steps(spec, records: int | None) -> int | None:
    """Batches in one epoch of a balanced group's endless sampled stream: as many records as the group's
    ``records`` per rank (explicit ``steps`` first; None without a count)."""
    if spec.steps is not None:
        return spec.steps
    if records is None:
        return None
    return epoch_batches(records // spec.num_shards, spec.batch_size, spec.drop_remainder)


def resume_refusal(spec) -> str | None:
    """Why ``spec`` cannot build the resumable order (one line), or None when it can; ``spec.resumable`` aside."""
    if spec.offload.service is not None:
        return ("it reads on a tf.data service's workers (service=...), which hand files to whichever worker asks "
                "next: no position names the records consumed")
    if spec.mode != "file":
        return ("Pipe mode cannot resume mid-epoch: SageMaker restarts each channel's FIFO from its first record; "
                "restart at an epoch boundary with first_epoch=E, or use File mode")
    if spec.cache not in ("auto", "none"):
        return (f"cache={spec.cache!r} would freeze one order, and the resumable order reads each epoch's files in "
                f"its own seeded order; use cache='auto' or 'none' (the OS page cache keeps recently read shards)")
    if spec.shuffle_buffer and spec.seed is None:
        return ("shuffle_buffer > 0 needs a seed to resume: the order must be a pure function of (seed, epoch, "
                "position)")
    if spec.resuming.resume_refusal:
        return spec.resuming.resume_refusal
    if len(spec.file_records) != len(spec.files):
        return (f"it needs the record count of every file (file_records): got {len(spec.file_records)} counts for "
                f"{len(spec.files)} files; use PipelineSpec.from_manifest")
    if spec.file_sha256 and len(spec.file_sha256) != len(spec.files):
        return (f"file_sha256 gives {len(spec.file_sha256)} digests for {len(spec.files)} files: one per file, or "
                f"none; use PipelineSpec.from_manifest")
    if spec.steps is None and spec.num_shards > 1 and epoch_records(spec) < global_batch(spec):
        return (f"an epoch of {epoch_records(spec)} records is less than one global batch ({spec.batch_size} x "
                f"{spec.num_shards} ranks)")
    if spec.resuming.plan_fingerprint and spec.steps is not None and order_epoch_steps(spec) < spec.steps:
        return (f"this rank's {sum(spec.file_records)} records make {order_epoch_steps(spec)} steps per epoch, "
                f"fewer than the plan's {spec.steps}: a plan with remainder='pad' repeats a rank's records to fill "
                f"its steps, which the resumable order does not; plan with remainder='drop'")
    return None


def resume_choice(spec) -> tuple[bool, str]:
    """(whether ``build_dataset(spec)`` builds the resumable order, why) (pure). ``resumable=None``: when
    possible, i.e. a seeded, shuffled File-mode spec that :func:`resume_refusal` does not refuse; ``True``:
    always, a spec that cannot is a :class:`ResumeError` (one line); ``False``: never."""
    asked = spec.resumable
    if asked is False:
        return False, "resumable=False (asked for)"
    why = resume_refusal(spec)
    if asked is True:
        if why is not None:
            raise ResumeError(f"resumable=True: {why}")
        return True, "resumable=True (asked for)"
    if why is not None:
        return False, why
    if not spec.shuffle_buffer:
        return False, ("no shuffle (shuffle_buffer=0): the unshuffled read keeps its tuned strategy (resumable=True "
                       "reads the files in manifest order, resumable)")
    if spec.num_shards > 1:
        return False, (f"{spec.num_shards} ranks share one order here (num_shards): each rank would run the delay "
                       f"order over every record, which costs more than its shuffle of its own share (0.86x the "
                       f"default graph's records per CPU-second for rank 0 of 2: tfpipe bench resume --ranks 2); "
                       f"resumable=True to resume anyway, or per-rank file lists (a plan) resume at no such cost")
    rows = " (a columnar set: the order runs over its decoded rows)" if spec.layout is not None else ""
    return True, f"seeded File-mode set{rows} (resumable=None: when possible; resumable=False opts out)"


def global_batch(spec) -> int:
    """Records one step takes from the global order: ``batch_size`` per rank × ranks."""
    return spec.batch_size * spec.num_shards


def epoch_records(spec) -> int:
    """Records of an epoch's global order that steps use at most (all, or ``steps`` global batches)."""
    if spec.part_weights:   # a balanced group's endless sampled stream: as many records as the group per rank
        group = spec.records if spec.records is not None else sum(spec.file_records)
        return group_steps(spec, group) * global_batch(spec)
    total = sum(spec.file_records)
    return total if spec.steps is None else min(total, spec.steps * global_batch(spec))


def steps_for(spec, remaining: int) -> int:
    """Steps (per rank) that ``remaining`` records of an epoch's order make: full global batches when sharded
    (every rank runs the same steps; the remainder is dropped) or with ``drop_remainder``, else
    ``ceil(remaining / batch_size)`` on a single rank."""
    if remaining <= 0:
        return 0
    return epoch_batches(remaining, global_batch(spec), spec.num_shards > 1 or spec.drop_remainder)


def order_epoch_steps(spec) -> int:
    """Steps in a whole epoch of the global order."""
    return steps_for(spec, epoch_records(spec))
