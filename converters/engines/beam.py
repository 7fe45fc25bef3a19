"""The two-pass conversion on Apache Beam: the same bytes as the local converter, on any runner.

Only this module (and, lazily, the Beam-FileSystems storage) imports ``apache_beam``, at its top: it is
itself imported only when the Beam engine is used. The pipeline maps a job's steps (``steps`` describes
them) onto Beam transforms; only small values move between stages (units, summaries, shard specs, shard
results) — no record bytes ever go through a GroupByKey or a side input:

    Create(units) ─ Reshuffle ─┬─ [Map(prepass) ─ ToList ─ Map(resolve)] ──────────── ctx (side input)
                               └─ Map(pass1, ctx) ─ ToList ─┬─ FlatMap(size_tasks) ─ Reshuffle ─ Map(sizes) ─ ToList
                                                            └─ Map(plan, sizes, ctx) ─┬─ FlatMap(scatter tasks)
                                                               ─ Reshuffle ─ Map(scatter) ─ ToList ─ scattered │
                                                               FlatMap(shards) ─ Reshuffle ─ Map(pass2, scattered)
                                                               ─ ToList ─ Map(write outcome, plan)

(The pre-pass stages exist only for a job that needs a pre-pass, ``ctx`` is None for a job without
``steps.Prepass``; the size stage has work only for a ``steps.Sizing`` job, the scatter stage only with
``--shuffle``: its records go through files of the run's temporary area, and pass 2 waits for all of it
through its side input.)

The driver (the process that calls ``run_beam``) prepares the output, runs the pipeline, then reads the
outcome from the run's temporary area and finalizes (rename shards, write ``index.json`` last) — or raises the
plan's ``InputError`` — and removes the temporary area in every case.

Runner: by default (and for ``runner=DirectRunner``) Beam's in-process ``FnApiRunner``, chosen explicitly:
``DirectRunner`` itself first tries the Prism runner, which downloads a binary. ``runner=PrismRunner`` is
refused. Any other runner name (``DataflowRunner``, ``FlinkRunner``, ``SparkRunner``, ``PortableRunner``) is
passed to Beam with the other options.
"""
from __future__ import annotations

import contextlib
import functools
import io
import json
import logging
import os
import re
from typing import Mapping, Sequence

from .. import registry
from ..shardset.manifest import Manifest
from ..util.errors import TfpipeError
from .beamstop import quiet_workers, stop_interrupted_sampler
from .core import OUTCOME_NAME, Outcome
from .group import finalize_outcome
from .interrupt import interruptible
from .options import IN_PROCESS_RUNNERS, REFUSED_RUNNERS, parse_beam_options, runner_key
from .steps import lite_of, needs_prepass, resolve, scatter_step, size_tasks


class _DropLine(logging.Filter):
    def __init__(self, text: str):
        super().__init__()
        self.text = text

    def filter(self, record: logging.LogRecord) -> bool:
        return self.text not in record.getMessage()


class _DropOwnErrors(logging.Filter):
    """Beam logs a step's exception (with its traceback) before the run fails; a tfpipe error among them is
    shown once, as the run's one-line error (``_failure``), so its log record is dropped."""

    def filter(self, record: logging.LogRecord) -> bool:
        e = record.exc_info[1] if record.exc_info else None
        seen = set()
        while e is not None and id(e) not in seen:
            if isinstance(e, TfpipeError):
                return False
            seen.add(id(e))
            e = e.__cause__ or e.__context__
        return True


@contextlib.contextmanager
def _quiet_own_errors():
    logger = logging.getLogger("apache_beam.runners.common")
    drop = _DropOwnErrors()
    logger.addFilter(drop)
    try:
        yield
    finally:
        logger.removeFilter(drop)


def _import_beam():
    """``import apache_beam`` without the root-logger warning its BigQuery client module prints when the
    optional apitools package is missing (nothing here uses BigQuery)."""
    os.environ.setdefault("GRPC_VERBOSITY", "ERROR")  # gRPC's INFO lines (fork handlers skipped...) are noise
    root = logging.getLogger()
    drop = _DropLine("apitools not found")
    root.addFilter(drop)
    try:
        import apache_beam
    finally:
        root.removeFilter(drop)
    return apache_beam


beam = _import_beam()
from apache_beam.options.pipeline_options import PipelineOptions, StandardOptions  # noqa: E402
from apache_beam.runners.portability.fn_api_runner import FnApiRunner  # noqa: E402

__all__ = ["TwoPassConversion", "run_beam", "convert", "pipeline_options", "parse_beam_options", "finish"]

log = logging.getLogger(__name__)

JOB_SERVER_TIMEOUT = 60  # seconds a PortableRunner waits for its job service to answer (Beam's default: 300)


# -- options -------------------------------------------------------------------------------------------

def pipeline_options(beam_options: Mapping[str, object] | None = None):
    """``(runner, PipelineOptions)`` for these options: unknown keys and bad values are a ValueError naming
    them; the in-process runner is an explicit ``FnApiRunner`` (never Prism); its worker processes log
    errors only unless ``default_sdk_harness_log_level`` is given."""
    opts = dict(beam_options or {})
    key = runner_key(opts.get("runner"))  # type: ignore[arg-type]
    if key in REFUSED_RUNNERS:
        raise ValueError(f"runner {opts['runner']!r} downloads a runner binary: use the in-process runner (the "
                         "default) or a cluster runner (DataflowRunner, FlinkRunner, SparkRunner, PortableRunner)")
    in_process = key in IN_PROCESS_RUNNERS
    if in_process:
        opts.pop("runner", None)
        opts.setdefault("default_sdk_harness_log_level", "ERROR")
    else:  # a job service (PortableRunner, Flink, Spark) that never answers fails in a minute, not Beam's five
        opts.setdefault("job_server_timeout", JOB_SERVER_TIMEOUT)
    argv = []
    for k, v in opts.items():
        if v is True:
            argv.append(f"--{k}")
        elif v is not False and v is not None:
            argv.append(f"--{k}={v}")
    options = PipelineOptions(argv)
    noise = logging.getLogger("apache_beam.options.pipeline_options")
    drop = _DropLine("Discarding unparseable args")
    noise.addFilter(drop)
    err = io.StringIO()
    try:
        with contextlib.redirect_stderr(err):
            known = options.get_all_options()
            every = options.get_all_options(retain_unknown_options=True)
    except SystemExit as exc:  # argparse's way of rejecting a value (exit 2); its message went to err
        if exc.code != 2:  # a SIGTERM (the CLI's exit 143) on the way
            raise
        why = err.getvalue().strip().splitlines()
        raise ValueError(f"bad Beam pipeline option: {why[-1].split(' error: ', 1)[-1] if why else argv}") from None
    finally:
        noise.removeFilter(drop)
    unknown = sorted(set(every) - set(known))
    if unknown:
        raise ValueError(f"unknown Beam pipeline option(s): {', '.join(unknown)}")
    _check_workers(options)
    runner = _in_process_runner(options) if in_process else options.view_as(StandardOptions).runner
    return runner, options


def max_direct_workers() -> int:
    """The most ``direct_num_workers`` accepted: 4 per core, at least 4, at most 64 (each is a thread or a
    process; more only slows the run down)."""
    from ..util.system import cpu_count

    return max(4, min(64, 4 * cpu_count()))


def _check_workers(options) -> None:
    from apache_beam.options.pipeline_options import DirectOptions

    n = options.view_as(DirectOptions).direct_num_workers
    cap = max_direct_workers()
    if n is not None and not 0 <= n <= cap:
        raise ValueError(f"direct_num_workers must be 1..{cap} (4 per core of this machine, at most 64; 0: one "
                         f"per core), got {n}")


def _in_process_runner(options) -> FnApiRunner:
    """Beam's in-process runner, with the pipeline options handed to its worker processes (as Beam's own
    DirectRunner does when it picks the FnApiRunner), so that e.g. their log level applies."""
    from apache_beam.portability.api import beam_provision_api_pb2
    from apache_beam.runners.portability.fn_api_runner import fn_runner
    from apache_beam.runners.portability.portable_runner import JobServiceHandle

    encoded = JobServiceHandle.encode_pipeline_options(options.get_all_options())
    return FnApiRunner(provision_info=fn_runner.ExtendedProvisionInfo(
        beam_provision_api_pb2.ProvisionInfo(pipeline_options=encoded)))


# -- the pipeline ----------------------------------------------------------------------------------------

def _prepass(unit, job):
    return job.prepass(unit)


def _resolve(prepasses, job):
    return resolve(job, prepasses)


def _pass1(unit, job, ctx):
    return job.pass1(unit, ctx)


def _size_tasks(summaries, job):
    return size_tasks(job, summaries)


def _sizes(task, job):
    return job.sizes(task)


def _plan(summaries, job, sizes, ctx):
    return job.plan(summaries, sizes, ctx)


def _shards(plan):
    return plan.shards


def _scatter_tasks(plan):
    return plan.scatter


def _scatter(task, job):
    return scatter_step(job)(task)


def _pass2(spec, job, scattered=()):
    return job.pass2(spec)


def _write_outcome(plan, job, results):
    job.area.temp().write_bytes_atomic(OUTCOME_NAME, Outcome.of(plan, results).dumps())
    return len(results)


class TwoPassConversion(beam.PTransform):
    """``pipeline | TwoPassConversion(job)``: the conversion's stages for a job made by a format's ``job.create``
    (``registry.get(name).create_job(...)``). They write shards under temporary names and the outcome into the
    run's temporary area; after the pipeline ran, ``finish(job)`` finalizes (or raises the input error) —
    ``run_beam`` does both."""

    def __init__(self, job):
        super().__init__()
        self.job = job

    def expand(self, pbegin):
        job, lite = self.job, lite_of(self.job)  # only pass 1 needs the whole job (a tokenizer file's bytes)
        side = beam.pvalue.AsSingleton
        units = (pbegin | "Units" >> beam.Create(job.units()) | "SpreadUnits" >> beam.Reshuffle())
        if needs_prepass(job):
            ctx = (units | "Prepass" >> beam.Map(_prepass, lite) | "AllPrepass" >> beam.combiners.ToList()
                   | "Resolve" >> beam.Map(_resolve, lite))
        else:
            ctx = pbegin | "NoPrepass" >> beam.Create([[]]) | "Resolve" >> beam.Map(_resolve, lite)
        summaries = (units | "Pass1" >> beam.Map(_pass1, job, side(ctx))
                     | "AllSummaries" >> beam.combiners.ToList())
        sizes = (summaries | "SizeTasks" >> beam.FlatMap(_size_tasks, lite) | "SpreadSizes" >> beam.Reshuffle()
                 | "Sizes" >> beam.Map(_sizes, lite) | "AllSizes" >> beam.combiners.ToList())
        plan = summaries | "Plan" >> beam.Map(_plan, lite, side(sizes), side(ctx))
        scattered = (plan | "ScatterTasks" >> beam.FlatMap(_scatter_tasks) | "SpreadScatter" >> beam.Reshuffle()
                     | "Scatter" >> beam.Map(_scatter, lite) | "AllScattered" >> beam.combiners.ToList())
        results = (plan | "Shards" >> beam.FlatMap(_shards) | "SpreadShards" >> beam.Reshuffle()
                   | "Pass2" >> beam.Map(_pass2, lite, side(scattered)) | "AllResults" >> beam.combiners.ToList())
        return plan | "Outcome" >> beam.Map(_write_outcome, lite, side(results))


def finish(job) -> Manifest:
    """After the pipeline: the outcome from the temporary area -> ``finalize`` (raises the plan's error)."""
    temp = job.area.temp()
    if not temp.exists(OUTCOME_NAME):
        raise TfpipeError(f"the Beam pipeline finished without writing {OUTCOME_NAME} in {job.area.temp_url}")
    outcome = Outcome.from_json(json.loads(temp.read_bytes(OUTCOME_NAME)))
    return finalize_outcome(job.area, job.output, job.schema, job.kind, outcome)


_RUNNING = re.compile(r" \[while running '[^']*'\]$")
_RAISED = re.compile(r"^converters\.util\.errors\.(\w+): (.*)$")


def _failure(exc: BaseException, options=None) -> TfpipeError:
    """The error to show for a failed pipeline: a tfpipe error raised inside a step with its own class and
    text (found in the exception chain, or — from worker processes — in the traceback text the runner
    forwards), a job service that did not answer, else the runner's last line."""
    seen = set()
    e: BaseException | None = exc
    while e is not None and id(e) not in seen:
        if isinstance(e, TfpipeError):
            return _rebuilt(type(e).__name__, str(e)) or e
        if type(e).__name__ == "FutureTimeoutError" and options is not None:
            from apache_beam.options.pipeline_options import PortableOptions

            portable = options.view_as(PortableOptions)
            return TfpipeError(f"the Beam job service at {portable.job_endpoint} did not answer within "
                               f"{portable.job_server_timeout} s (job_server_timeout): check runner and "
                               "job_endpoint; nothing was written")
        seen.add(id(e))
        e = e.__cause__ or e.__context__
    lines = [ln.strip() for ln in str(exc).splitlines() if ln.strip()]
    for ln in reversed(lines):
        m = _RAISED.match(ln)
        if m and (err := _rebuilt(m.group(1), m.group(2))) is not None:
            return err
    last = _RUNNING.sub("", lines[-1]) if lines else type(exc).__name__
    return TfpipeError(f"the Beam pipeline failed: {last}")


def _rebuilt(name: str, text: str) -> TfpipeError | None:
    from ..util import errors

    cls = getattr(errors, name, None)
    if not (isinstance(cls, type) and issubclass(cls, TfpipeError)):
        return None
    return cls(_RUNNING.sub("", text))


def run_beam(job, beam_options: Mapping[str, object] | None = None) -> Manifest:
    """Build and run the pipeline for ``job``, then finalize; the temporary area is removed in every case."""
    runner, options = pipeline_options(beam_options)
    log.info("converting on Beam (%s), run %s -> %s", runner if isinstance(runner, str) else type(runner).__name__,
             job.area.run_id, job.area.out)
    try:
        # from the pipeline's construction on: a signal there is noted too, even if Beam's code swallows it
        with interruptible() as interrupts:
            interrupts.on_stuck += [job.area.cleanup, job.area.release]  # a clean-up stuck past the deadline
            pipeline = beam.Pipeline(runner=runner, options=options)
            _ = pipeline | "Convert" >> TwoPassConversion(job)
            with quiet_workers(interrupts), _quiet_own_errors():
                try:
                    result = pipeline.run()
                    state = result.wait_until_finish()
                except BaseException as exc:  # noqa: BLE001 - a failed step: its own error if we can find it
                    if interrupts:  # Ctrl-C / kill, however Beam wrapped it: the signal's own exit, one line
                        interrupts.reraise()
                    if not isinstance(exc, Exception):
                        raise
                    raise _failure(exc, options) from exc
                finally:
                    if interrupts:
                        stop_interrupted_sampler()
            if interrupts:  # a signal whose exception Beam swallowed: the run still ends as the signal says
                interrupts.reraise()
        if state is not None and str(state).rsplit(".", 1)[-1] not in ("DONE", "UNKNOWN"):
            raise TfpipeError(f"the Beam pipeline ended in state {state}")
        return finish(job)
    finally:
        job.area.cleanup()
        job.area.release()


def convert(format_name: str, inputs: str | os.PathLike | Sequence[str | os.PathLike], out: str | os.PathLike,
            options, *, beam_options: Mapping[str, object] | None = None, overwrite: bool = False, prep=None,
            **kwargs) -> Manifest:
    """Convert inputs of format ``format_name`` (``converters.registry``) on Beam, as the format's local converter
    does (same options object and ``prep.PrepOptions``, same bytes); ``beam_options`` are Beam pipeline options
    (``{"runner": ...}``); other keyword arguments go to the format's ``job.create`` (LibSVM ``unit_size``, text
    ``chunk_tokens``: None means its default; storage options). ``convert_libsvm(...)``, ``convert_text(...)``
    and ``convert_<name>`` for any registered format are this function with the name filled in."""
    fmt = registry.get(format_name)
    pipeline_options(beam_options)  # bad options fail before the output is touched
    kwargs = {k: v for k, v in kwargs.items() if v is not None}
    job = fmt.create_job(inputs, out, options, overwrite=overwrite, prep=prep, **kwargs)
    return run_beam(job, beam_options)


def __getattr__(name: str):
    """``convert_<format>``: ``convert`` for that format (``convert_libsvm``, ``convert_text``, ...)."""
    fmt = name[len("convert_"):] if name.startswith("convert_") else None
    if fmt is None or fmt not in registry.names():
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return functools.partial(convert, fmt)
