"""FullyReplicated: every instance sees every input, and the instances split the two-pass conversion's work
(``converters.engines``), so the shard set is byte-identical to a local ``tfpipe convert`` of the same inputs.

A format whose conversion belongs to the whole input (``Format.one_job_when_sharded``: tabular's vocabularies,
min-max and negative draws) runs the same rounds on ShardedByS3Key inputs, where each instance sees only its
own objects: the instances first exchange their file lists (``inputs/``), the job's input is every host's files
in host order, and each instance runs the steps that read input files (``prepass``, ``pass1``) on its own files;
the other steps split as below. The set is the local conversion of every host's files in host order.

The steps of the core's contract (``engines.steps``), mapped onto instances:

==========================  ==================================================================================
``units()``                 every instance, the same list (pure given the files, which every instance sees)
``prepass`` (``Prepass``)   units split across hosts (``hosts.split_contiguous`` by bytes); all wait for all,
                            then each resolves the same context (LibSVM auto: the index base)
``pass1``                   units split across hosts by bytes; all wait for all summaries
``sizes`` (``Sizing``)      size tasks split across hosts; the first host waits for them
``plan``                    the first host, written as ``plan/`` in the work area; the others wait for it
``pass2``                   shards split across hosts by records; the first host waits for every result
finalize                    the first host: the core's checks, publish, ``index.json`` last
==========================  ==================================================================================

Each round's results travel as ``<round>/<host>.pkl`` plus a marker (``.workarea``); the files the core
writes (record lengths, token ids, window sizes, temporary shards) go to the same work area and the output
location, exactly as on any other engine. A rerun reuses every round whose marker matches the same input files
and the same split. Within an instance, ``--workers`` processes run the steps.

Results are pickled: the work area must be writable only by the job (as the code prefix must).
"""
from __future__ import annotations

import hashlib
import logging
import os
import pickle
from typing import Any, Sequence

from converters.shardset.manifest import Manifest, ShardInfo, manifest_bytes
from converters.storage import open_storage
from converters.tfrecord.layout import RecordLayout
from converters.util.errors import TfpipeError

from ..steps import lite_of, needs_prepass, resolve, scatter_step, size_tasks
from .job import ConvertJob
from .finalize import check_output, commit
from .hosts import Place, split_contiguous
from .config import ProcessingConfig
from .workarea import WorkArea

__all__ = ["run_replicated", "core_job"]

log = logging.getLogger(__name__)

PLAN = "plan"


def core_job(job: ConvertJob, files: Sequence[str], run: str, unit_size: int | None = None):
    """The format's two-pass job for this conversion, its temporary area the work area ``run`` (the output
    location is checked by the Processing engine, not here); ``unit_size``: input bytes per work unit, where the
    format cuts files into units."""
    from ..area import RunArea

    return job.fmt.files_job(job.options, files, RunArea(job.out, run), prep=job.prep, unit_size=unit_size)


def _call(job, step: str, item, args: tuple):
    return getattr(job, step)(item, *args)


def _worker_init() -> None:
    os.environ.setdefault("RAYON_NUM_THREADS", "1")  # one tokenizer thread per worker process


class _Rounds:
    """One instance's side of the rounds: its share of each step, results and markers in the work area."""

    def __init__(self, area: WorkArea, place: Place, inputs: dict, workers: int, *, timeout: float, poll: float):
        self.area, self.place, self.inputs, self.workers = area, place, inputs, workers
        self.timeout, self.poll = timeout, poll
        self.reused: dict[str, bool] = {}
        self.done: dict[str, str] = {}  # round -> "k of n"
        self._pool = None

    def close(self) -> None:
        if self._pool is not None:
            self._pool.shutdown(wait=True, cancel_futures=True)

    def _map(self, job, step: str, items: list, args: tuple) -> list:
        if self.workers == 1 or len(items) <= 1:
            return [_call(job, step, x, args) for x in items]
        if self._pool is None:
            import multiprocessing as mp
            from concurrent.futures import ProcessPoolExecutor

            # forkserver: workers never share this process's S3 connections
            self._pool = ProcessPoolExecutor(self.workers, mp_context=mp.get_context("forkserver"),
                                             initializer=_worker_init)
        n = len(items)
        return list(self._pool.map(_call, [job] * n, [step] * n, items, [args] * n))

    def run(self, name: str, job, step: str, items: list, weights: Sequence[int], args: tuple = (), *,
            gather: bool, shares: Sequence[tuple[int, int]] | None = None) -> list:
        """Run this host's contiguous share of ``items`` (by ``weights``, or ``shares[host index]``) through
        ``job.<step>``; with ``gather``, wait for every host's share and return all results in item order (else
        this host's)."""
        host, hosts = self.place.current_host, self.place.hosts
        a, b = (shares or split_contiguous(weights, len(hosts)))[self.place.index]
        mine = self._reuse(name, a, b)
        self.reused[name] = mine is not None
        self.done[name] = f"{b - a} of {len(items)}"
        if mine is None:
            self.area.unmark(name, host)
            mine = self._map(job, step, items[a:b], args)
            blob = pickle.dumps(mine, protocol=pickle.HIGHEST_PROTOCOL)
            self.area.storage(name).write_bytes_atomic(f"{host}.pkl", blob)
            self.area.mark(name, host, {"inputs": self.inputs, "range": [a, b],
                                        "sha256": hashlib.sha256(blob).hexdigest()})
        log.info("%s: %s of %d of %d item(s) %s", host, name, b - a, len(items),
                 "reused" if self.reused[name] else "done")
        if not gather:
            return mine
        markers = self.area.wait(name, hosts, timeout=self.timeout, poll=self.poll, what=name)
        out: list = []
        for h in hosts:
            out.extend(mine if h == host else self.load(name, h, markers[h]))
        if len(out) != len(items):
            raise TfpipeError(f"{name}: {len(out)} results for {len(items)} items: were all instances run with "
                              "the same command on the same inputs?")
        return out

    def _reuse(self, name: str, a: int, b: int) -> list | None:
        old = self.area.marker(name, self.place.current_host, any_job=True)
        if old is None or old.get("inputs") != self.inputs or old.get("range") != [a, b]:
            return None
        try:
            results = self.load(name, self.place.current_host, old)
        except TfpipeError:
            return None
        self.area.mark(name, self.place.current_host, {k: old[k] for k in ("inputs", "range", "sha256")})
        return results

    def load(self, name: str, host: str, marker: dict) -> Any:
        """``host``'s results of round ``name``, checked against the sha256 its marker records."""
        try:
            blob = self.area.storage(name).read_bytes(f"{host}.pkl")
        except FileNotFoundError:
            blob = b""
        if hashlib.sha256(blob).hexdigest() != marker.get("sha256"):
            raise TfpipeError(f"{self.area.sub_url(name)}/{host}.pkl does not match its marker: remove the work area "
                              f"{self.area.url} and rerun the job")
        return pickle.loads(blob)  # noqa: S301 - written by this job's own instances (see the module docstring)


def _weights(units, file_bytes: Sequence[int]) -> list[int]:
    return [file_bytes[u.input_index] if u.whole else u.stop - u.start for u in units]


INPUTS = "inputs"


def _every_hosts_files(area: WorkArea, place: Place, files: list[str], *, timeout: float,
                       poll: float) -> tuple[list[list], list[tuple[int, int]]]:
    """ShardedByS3Key, one job: this host's ``[path, size]`` list published, every host's read back. Returns
    the job's input (every host's files in host order) and each host's ``[first, stop)`` of it."""
    area.mark(INPUTS, place.current_host, {"files": [[f, os.path.getsize(f)] for f in files]})
    seen = area.wait(INPUTS, place.hosts, timeout=timeout, poll=poll, what="input list")
    every, shares = [], []
    for h in place.hosts:
        got = seen[h].get("files") or []
        shares.append((len(every), len(every) + len(got)))
        every.extend(got)
    if not every:
        raise TfpipeError("no instance had an input file: nothing to convert")
    return every, shares


def _unit_shares(units, file_shares: Sequence[tuple[int, int]]) -> list[tuple[int, int]]:
    """Each host's ``[first, stop)`` of ``units`` (in input order): the units of its files."""
    import bisect

    inputs = [u.input_index for u in units]
    return [(bisect.bisect_left(inputs, a), bisect.bisect_left(inputs, b)) for a, b in file_shares]


def run_replicated(job: ConvertJob, cfg: ProcessingConfig, area: WorkArea, files: list[str], *, timeout: float,
                   poll: float, unit_size: int | None = None, own_files: bool = False
                   ) -> tuple[Manifest | None, bool, str]:
    """This instance's share of every parallel step; the first host also plans and finalizes. ``own_files``:
    ``files`` are this instance's alone (ShardedByS3Key, one job: see the module docstring). Returns the
    manifest (finalizer, else None), whether this instance's pass 1 was reused from an earlier run, and its
    share in words."""
    from converters.util.system import cpu_count

    place = cfg.place
    if own_files:
        every, file_shares = _every_hosts_files(area, place, files, timeout=timeout, poll=poll)
    else:
        every, file_shares = [[f, os.path.getsize(f)] for f in files], None
    cj = core_job(job, [f for f, _ in every], area.run, unit_size)
    lite = lite_of(cj)
    inputs = {"files": every, "unit_size": getattr(cj, "unit_size", None)}
    rounds = _Rounds(area, place, inputs, job.workers or cpu_count(), timeout=timeout, poll=poll)
    try:
        try:
            manifest = _steps(job, cj, lite, rounds, place, area, [s for _, s in every], file_shares)
            work = ", ".join(f"{k} {v}" for k, v in rounds.done.items())
            return manifest, rounds.reused.get("pass1", False), work
        except FileNotFoundError as exc:  # a temporary file of an earlier step is gone
            raise TfpipeError(f"the work area lost a file ({exc}): remove {area.url} and rerun the job") from None
    finally:
        rounds.close()


def _steps(job: ConvertJob, cj, lite, rounds: _Rounds, place: Place, area: WorkArea, file_bytes: Sequence[int],
           file_shares: Sequence[tuple[int, int]] | None) -> Manifest | None:
    units = cj.units()
    weights = _weights(units, file_bytes)
    own = _unit_shares(units, file_shares) if file_shares is not None else None  # steps that read the inputs
    pre = rounds.run("prepass", lite, "prepass", units, weights, gather=True, shares=own) if needs_prepass(cj) else []
    ctx = resolve(cj, pre)
    summaries = rounds.run("pass1", cj, "pass1", units, weights, (ctx,), gather=True, shares=own)
    tasks = size_tasks(cj, summaries)
    sizes = rounds.run("sizes", lite, "sizes", tasks, [1] * len(tasks), gather=place.is_finalizer) if tasks else []
    if place.is_finalizer:
        plan = lite.plan(summaries, sizes, ctx)
        if plan.error is not None:
            raise plan.error.exception()  # the local converter's error for the first bad input
        _put(area, PLAN, place.current_host, plan)
    else:
        marker = area.wait(PLAN, [place.finalizer], timeout=rounds.timeout, poll=rounds.poll, what="plan")
        plan = rounds.load(PLAN, place.finalizer, marker[place.finalizer])
    if plan.scatter:  # --shuffle: every host's pass 2 reads what every host scattered
        scatter_step(lite)
        rounds.run("scatter", lite, "scatter", list(plan.scatter), [t.records for t in plan.scatter], gather=True)
    results = rounds.run("pass2", lite, "pass2", list(plan.shards), [s.records for s in plan.shards],
                         gather=place.is_finalizer)
    if not place.is_finalizer:
        return None
    return _finalize(job, cj, area, plan, results)


def _put(area: WorkArea, name: str, host: str, value: Any) -> None:
    blob = pickle.dumps(value, protocol=pickle.HIGHEST_PROTOCOL)
    area.storage(name).write_bytes_atomic(f"{host}.pkl", blob)
    area.mark(name, host, {"sha256": hashlib.sha256(blob).hexdigest()})


def _finalize(job: ConvertJob, cj, area: WorkArea, plan, results) -> Manifest:
    """The core's finalize, with the Processing engine's idempotent publish and manifest commit."""
    from ..core import Outcome

    outcome = Outcome.of(plan, results)
    got = outcome.checked(area.run, why="were all instances run with the same command on the same inputs?")
    n = len(outcome.expected)
    if outcome.parts:
        return _finalize_group(job, cj, area, outcome, got)
    names = job.options.output.names
    finals = [names.format(i, n) for i in range(n)]
    storage = open_storage(job.out)
    obsolete = check_output(storage, overwrite=job.overwrite, planned=finals,
                            side=[final for _, final, _ in outcome.files])
    manifest = Manifest(records=outcome.records,
                        shards=tuple(ShardInfo(finals[i], got[i].records, got[i].bytes, got[i].sha256)
                                     for i in range(n)),
                        schema=cj.schema, inputs=outcome.inputs, options=dict(outcome.options),
                        compression=job.options.output.compression, kind=cj.kind, extra=dict(outcome.extra),
                        location=job.out, layout=RecordLayout.from_json(outcome.layout))
    moves = [(got[i].tmp_name, finals[i], got[i].bytes) for i in range(n)] + list(outcome.files)  # + vocabularies
    commit(storage, area, moves, manifest_bytes(manifest), obsolete=obsolete)
    log.info("finalized %d record(s) in %d shard(s) -> %s", manifest.records, n, job.out)
    return manifest



def _finalize_group(job: ConvertJob, cj, area: WorkArea, outcome, got: dict) -> Manifest:
    """``--split-by-label``: per part (label order) its shards under ``label=<v>/`` and its manifest, then the
    group manifest last — the local converter's bytes, and as idempotent as a plain set's finalize."""
    from ..group import part_manifest
    from converters.shardset.group import (
        GroupManifest,
        PartInfo,
        group_bytes,
        part_path,
        union,
    )
    from converters.shardset.manifest import MANIFEST_NAME, manifest_bytes

    names, output = job.options.output.names, job.options.output
    storage = open_storage(job.out)
    paths = [part_path(label) for label, _ in outcome.parts]
    obsolete = check_output(storage, overwrite=job.overwrite, planned=[], parts=paths)
    at, infos, parts, moves, written = 0, [], [], [], []
    for (label, n), part in zip(outcome.parts, paths):
        finals = [names.format(i, n) for i in range(n)]
        inner = open_storage(f"{job.out.rstrip('/')}/{part}")
        obsolete += [f"{part}/{x}" for x in check_output(inner, overwrite=True, planned=finals)]
        shards = [ShardInfo(finals[i], got[at + i].records, got[at + i].bytes, got[at + i].sha256) for i in range(n)]
        m = part_manifest(job.out, label, shards, cj.schema, output, cj.kind, outcome.options)
        data = manifest_bytes(m)
        moves += [(got[at + i].tmp_name, f"{part}/{finals[i]}", got[at + i].bytes) for i in range(n)]
        written.append((f"{part}/{MANIFEST_NAME}", data))
        infos.append(PartInfo(label, part, m.records, m.total_bytes, n, hashlib.sha256(data).hexdigest()))
        parts.append(m)
        at += n
    group = GroupManifest(tuple(infos), outcome.records, outcome.inputs, dict(outcome.options), dict(outcome.extra))
    commit(storage, area, moves, group_bytes(group), parts=written, obsolete=obsolete)
    log.info("finalized %d record(s) in %d per-label shard set(s) -> %s", outcome.records, len(parts), job.out)
    return union(group, parts, job.out)
