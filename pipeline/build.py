"""``build_dataset(spec)``: a :class:`~pipeline.PipelineSpec` turned into a tf.data graph.

:func:`pipeline.plan.graphplan.plan_graph` decides once which graph a spec builds, with its read, cache and
steps; the graph is looked up in :data:`GRAPH_MODULES` (one module per graph in ``pipeline/graph``, each with
``stages(plan)`` and ``build(plan, resume)``), and every graph is finished the same way here: the tail
(parse, repeat, prefetch: ``pipeline.graph.tail``), tf.data's threads sized to this process's CPU share, and
its Python iteration packed without ``tf.nest`` (``pipeline.graph.pyiter``).
``plan_stages`` lists the stages of the same plan, so ``describe`` explains exactly what ``build_dataset``
builds. A finite graph reports its batch count (``pipeline.graph.cardinality``), so Keras knows an epoch's steps.
"""
from __future__ import annotations

import logging
import os

from .graph.cardinality import with_cardinality
from .graph.parse import feature_spec, parse_fn
from .graph.pyiter import packed_iteration
from .graph.tail import graph_tail
from .plan.cachepolicy import MEMORY_CACHE_FRACTION, choose_cache, total_memory
from .plan.cpushare import process_cpus
from .plan.graphplan import GraphPlan, plan_graph
from .plan.readplan import LARGE_RECORD_BYTES, choose_read, read_plan
from .spec.pipelinespec import PipelineSpecBase
from .spec.stage import Stage

__all__ = ["Stage", "plan_stages", "graph_stages", "graph_module", "choose_read", "read_plan", "choose_cache",
           "build_dataset", "feature_spec", "parse_fn", "LARGE_RECORD_BYTES", "MEMORY_CACHE_FRACTION",
           "total_memory"]

log = logging.getLogger(__name__)


def graph_module(name: str):
    """The module of graph ``name`` (a row of ``pipeline.plan.graphplan.GRAPHS``): ``stages`` and ``build``."""
    from .graph import columnar, pipe, plain, resumable, service, weighted

    return {"service": service, "resumable": resumable, "columnar": columnar, "weighted": weighted,
            "pipe": pipe, "plain": plain}[name]


def plan_stages(spec: PipelineSpecBase) -> list[Stage]:
    """The stages ``build_dataset(spec)`` builds, in order, with settings and reasons (pure)."""
    return graph_stages(plan_graph(spec))


def graph_stages(plan: GraphPlan) -> list[Stage]:
    """The stages of the graph ``plan`` names."""
    return graph_module(plan.graph).stages(plan)


def build_dataset(spec: PipelineSpecBase, resume: dict | None = None):
    """The tf.data graph for ``spec``: batches of ``(features, label)`` (or a dict, or serialized records).
    ``resume``: an input state (``pipeline.input_state``) of a spec that builds the resumable order (a seeded
    File-mode spec, unless ``resumable=False``: ``pipeline.plan.graphplan.resume_choice``) to continue from."""
    plan = plan_graph(spec, resuming=resume is not None)
    if plan.graph == "plain" and spec.tune == "on-first-use":
        tuned = _tune_on_first_use(spec)
        if tuned is not spec:
            plan = plan_graph(tuned)
    ds, tail = graph_module(plan.graph).build(plan, resume)
    ds = _cpu_share(graph_tail(ds, plan.spec, tail, count=lambda d: with_cardinality(d, plan, resume)))
    return packed_iteration(ds)


def _cpu_share(ds):
    """Where this process may use fewer vCPUs than the host shows (a cgroup quota, other local ranks), size
    tf.data's thread pool and autotune's CPU budget to that share, not to every core (records unchanged)."""
    cpus = process_cpus()
    if cpus >= (os.cpu_count() or 1):
        return ds
    import tensorflow as tf

    opts = tf.data.Options()
    opts.threading.private_threadpool_size = cpus
    opts.autotune.cpu_budget = cpus
    log.info("tf.data sized to this process's %d vCPU(s) of %d", cpus, os.cpu_count())
    return ds.with_options(opts)


def _tune_on_first_use(spec: PipelineSpecBase) -> PipelineSpec:
    """``tune="on-first-use"``: no stored result matches, so time the candidates now (≤ 10 s), store the
    winner and use it. Specs that cannot be tuned (shuffle, Pipe mode, no manifest, ...) keep the rule."""
    from .plan.readplan import data_fingerprint, tunable
    from .plan.tunestore import machine_fingerprint

    data = data_fingerprint(spec)
    tuning = spec.tuning
    if (tunable(spec) is not None or data is None or spec.cores != machine_fingerprint()["cpu_count"]
            or (tuning is not None and tuning.config is not None and tuning.matches(data))):
        return spec
    from .plan.tuning import ON_FIRST_USE_ROUNDS, ON_FIRST_USE_SECONDS, tune_read

    log.info("tune='on-first-use': timing the read candidates for up to %.0f s", ON_FIRST_USE_SECONDS)
    report = tune_read(spec, build_dataset, seconds=ON_FIRST_USE_SECONDS, rounds=ON_FIRST_USE_ROUNDS, quick=True)
    return spec.with_(tuning=report.lookup())
