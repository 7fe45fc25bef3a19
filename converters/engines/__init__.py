"""Engines: one conversion, cut into independent steps that any engine can schedule, with the local
converter's bytes.

The pure core (no engine imports; every value picklable):

* ``units``: ``Unit``, ``plan_units`` (inputs -> work units in input order), ``read_unit``;
* ``area``: ``RunArea`` (the run's temporary area ``OUT/.tfpipe-tmp-<run>/`` and temporary shard names),
  ``prepare_run``;
* ``core``: ``ErrorRecord``, ``Cutter`` (the shard-cut rule, streamed), ``ShardSpec``, ``SetPlan``,
  ``ShardFile``/``ShardResult``, ``Outcome`` and ``finalize``;
* ``prepplan``, ``scatter``, ``group``: write-time preparation's cuts, shuffle buckets and per-label finalize;
* ``steps``: the step contract: what a format's job writes (``TwoPassJob``), the optional capabilities
  (``Prepass``, ``Sizing``, ``Scatter``, ``Lite``) and the helpers engines ask them through;
* ``inprocess``: ``run_job``, the reference engine (every step in this process, in order).

Engines on top: ``beam`` (Apache Beam, any runner; the only module that imports apache_beam) and
``processing`` (SageMaker Processing instances). The format steps — each format's two-pass job (units, pass 1,
plan, pass 2, and the capabilities it has: pre-pass, size step, scatter step) — live in the format's folder
(``converters.libsvm.job.LibsvmJob``, ``converters.text.job.TextJob``), which builds on this package; engines find a format by name in
``converters.registry`` and never import one. The local converters (``converters.libsvm.convert``,
``converters.text.convert``) stay single-pass streaming engines.
"""
from __future__ import annotations

from ..util.lazy import lazy_exports

__all__ = ["Unit", "plan_units", "RunArea", "prepare_run", "SetPlan", "ShardSpec", "ShardResult", "Outcome",
           "finalize", "run_job", "TwoPassJob"]

__getattr__, __dir__ = lazy_exports(__name__, {
    "Unit": ".units", "plan_units": ".units", "RunArea": ".area", "prepare_run": ".area", "SetPlan": ".core",
    "ShardSpec": ".core", "ShardResult": ".core", "Outcome": ".core", "finalize": ".core",
    "run_job": ".inprocess", "TwoPassJob": ".steps",
}, globals())
