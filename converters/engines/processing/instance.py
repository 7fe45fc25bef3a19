"""The SageMaker Processing entry point: one call per instance, ``run_instance(job, ...)``.

Each instance learns its place from ``resourceconfig.json`` and each input's distribution from
``processingjobconfig.json`` (``.config``), converts its share, and coordinates with the
others only through files under the output location (``.workarea``): no host name is resolved and
nothing else is shared. The first host in ``hosts`` finalizes: it waits for every part, publishes the shards and
writes ``index.json`` last; the others return once their part is durably written.

* ShardedByS3Key inputs: ``.sharded`` (each instance converts its own objects), or, for a format whose
  conversion belongs to the whole input (tabular's vocabularies), ``.replicated``'s rounds as one job, each
  instance reading its own objects (the result is a local conversion of every host's objects in host order).
* FullyReplicated inputs (every instance sees everything): ``.replicated`` (the instances split the
  two-pass conversion's work units and shards; the result is byte-identical to a local conversion).
* A failure is recorded in the work area (``failed/<host>.json``) so waiting instances stop at once; an
  instance that never starts makes the finalizer give up after ``timeout`` seconds naming it. No manifest is
  written then, and a rerun of the job reuses the parts already written.
"""
from __future__ import annotations

import logging
import os
from dataclasses import dataclass, replace

from converters.shardset.manifest import Manifest
from converters.shardset.overlap import check_disjoint
from converters.shardset.reader import read_manifest
from converters.storage import open_storage
from converters.util.checks import as_real
from converters.util.errors import OutputInUseError, TfpipeError

from .job import ConvertJob, input_files
from .finalize import check_output, finished
from .hosts import SHARDED, distribution_of, run_id
from .config import (
    DEFAULT_POLL,
    DEFAULT_WAIT_TIMEOUT,
    PROCESSING_CONFIG_DIR,
    ProcessingConfig,
    read_processing_config,
)
from .workarea import FAILED, HostClaim, WorkArea

__all__ = ["run_instance", "InstanceResult", "DEFAULT_WAIT_TIMEOUT", "DEFAULT_POLL", "one_line"]

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class InstanceResult:
    """What one instance did: its host, whether it finalized, the distribution, the work area's run name,
    (finalizer only) the shard set's manifest, whether it reused its part from an earlier run, and its share of
    the work in words."""

    host: str
    finalizer: bool
    distribution: str
    run: str
    manifest: Manifest | None = None
    reused: bool = False
    work: str = ""


def one_line(exc: BaseException) -> str:
    """An exception as the one line a job's ExitMessage and the other instances see."""
    text = " ".join(str(exc).split()) or type(exc).__name__
    return text if isinstance(exc, TfpipeError) else f"{type(exc).__name__}: {text}"


def _check_positive(name: str, value: float) -> None:
    as_real(value, name, above=0, finite=False, must="a positive number of seconds")


def run_instance(job: ConvertJob, *, config_dir: str = PROCESSING_CONFIG_DIR,
                 timeout: float = DEFAULT_WAIT_TIMEOUT, poll: float = DEFAULT_POLL,
                 run: str | None = None, unit_size: int | None = None) -> InstanceResult:
    """Run this instance's share of ``job`` (a ``tfpipe convert`` command line, parsed by the CLI).

    ``timeout``: seconds to wait for the other instances in any one wait; ``poll``: seconds between two looks
    at the work area; ``run``: the work area's name (default: a digest of the command, the hosts and the
    distribution, the same for a rerun of the job); ``unit_size``: bytes of LibSVM input per work unit of a
    FullyReplicated conversion (default: the two-pass core's)."""
    _check_positive("timeout", timeout)
    _check_positive("poll", poll)
    cfg = read_processing_config(config_dir)
    distribution = distribution_of([os.path.abspath(i) for i in job.inputs], cfg.channels)
    if distribution == SHARDED and job.prep is not None:  # each instance converts only its own objects
        raise ValueError(f"{job.prep.describe()} needs every instance to see every input: give the inputs as "
                         "FullyReplicated (the instances then share the work and write the local converter's "
                         "bytes), or shuffle the result with `tfpipe reshard --shuffle`")
    run = run or run_id(job.argv, cfg.place.hosts, distribution)
    area = WorkArea(job.out, run, cfg.job)  # checks the run id before anything is created
    check_disjoint(job.out, job.inputs)
    host = cfg.place.current_host
    log.info("%s (%d of %d, finalizer %s): %s conversion, %s inputs, work area %s", host, cfg.place.index + 1,
             len(cfg.place.hosts), cfg.place.finalizer, job.format, distribution, area.url)
    result = InstanceResult(host, cfg.place.is_finalizer, distribution, run)
    claim = None
    try:
        if area.exists():  # first, before any slower step: the others must not read an earlier attempt's failure
            area.unmark(FAILED, host)
        storage = open_storage(job.out)
        if finished(storage, area):  # an earlier attempt wrote the manifest; only the clean-up was left
            if cfg.place.is_finalizer:
                area.remove()
            return replace(result, manifest=read_manifest(job.out) if cfg.place.is_finalizer else None)
        check_output(storage, overwrite=job.overwrite)
        claim = HostClaim(area, host, cfg.job)  # a second start of this host stops here, having written nothing
        manifest, reused, work = _convert(job, cfg, area, distribution, timeout=timeout, poll=poll,
                                          unit_size=unit_size)
    except BaseException as exc:
        if claim is not None or area.exists():  # (nothing to tell when no instance has started on the area)
            if not isinstance(exc, OutputInUseError) or claim is not None:  # a duplicate: the real one goes on
                area.fail(host, one_line(exc))
        raise
    finally:
        if claim is not None:
            claim.release()
    return replace(result, manifest=manifest, reused=reused, work=work)


def _convert(job: ConvertJob, cfg: ProcessingConfig, area: WorkArea, distribution: str, *, timeout: float,
             poll: float, unit_size: int | None) -> tuple[Manifest | None, bool, str]:
    from .replicated import run_replicated

    if distribution == SHARDED:
        files = input_files(job, allow_empty_dirs=True)
        if job.fmt.one_job_when_sharded:
            return run_replicated(job, cfg, area, files, timeout=timeout, poll=poll, own_files=True)
        from .sharded import run_sharded

        return run_sharded(job, cfg, area, files, timeout=timeout, poll=poll)

    return run_replicated(job, cfg, area, input_files(job, allow_empty_dirs=False), timeout=timeout, poll=poll,
                          unit_size=unit_size)
