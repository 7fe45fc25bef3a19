"""The step contract stays narrow: the core every format's job writes, the optional capabilities each built-in
job has (and no stub for one it lacks), a job with the core alone converting on ``run_job``, and the helpers'
answers for a job without a capability."""
from __future__ import annotations

import dataclasses

import csvfmt
import pytest

from converters import registry
from converters.engines import steps
from converters.engines.area import RunArea, new_run_id
from converters.engines.inprocess import run_job
from converters.shardset.options import ShardOutputOptions
from converters.shardset.reader import read_manifest
from converters.util.errors import TfpipeError

CAPABILITIES = (steps.Prepass, steps.Sizing, steps.Scatter, steps.Lite, steps.SplitWrite)


def members(protocol) -> set[str]:
    return {n for n in vars(protocol) if not n.startswith("_")} | set(protocol.__annotations__)


def test_the_core_is_narrow_and_capabilities_small():
    assert members(steps.TwoPassJob) == {"kind", "area", "output", "schema", "units", "pass1", "plan", "pass2"}
    assert all(len(members(p)) <= 3 for p in CAPABILITIES)
    assert not set().union(*map(members, CAPABILITIES)) & members(steps.TwoPassJob)


@pytest.mark.parametrize("name, args, has, lacks", [  # args: the options' required ones
    ("libsvm", (39,), {steps.Prepass, steps.Scatter}, {steps.Sizing, steps.Lite, steps.SplitWrite}),
    ("text", (16,), {steps.Sizing, steps.Scatter, steps.Lite}, {steps.Prepass, steps.SplitWrite}),
    ("tabular", (), {steps.Prepass, steps.SplitWrite}, {steps.Sizing, steps.Scatter}),
])
def test_built_in_jobs_write_the_core_and_only_their_capabilities(tmp_path, name, args, has, lacks):
    fmt = registry.get(name)
    job = fmt.files_job(fmt.options_class()(*args), [], RunArea(str(tmp_path), new_run_id()))
    assert isinstance(job, steps.TwoPassJob)
    assert {p for p in CAPABILITIES if isinstance(job, p)} >= has
    assert not {p for p in lacks if isinstance(job, p)}


def _csv(tmp_path, rows: int = 50):
    path = tmp_path / "a.csv"
    path.write_text("".join(f"{i},{i + 1}\n" for i in range(rows)))
    return csvfmt.CsvOptions(2, ShardOutputOptions(shard_size=300)), str(path)


def _recording_pmap(calls: list):
    def pmap(fn, items):
        calls.append(fn)
        return [fn(x) for x in items]
    return pmap


def test_a_core_only_job_converts_on_run_job(tmp_path):
    options, path = _csv(tmp_path)
    job = csvfmt.CsvJob.create([path], tmp_path / "out", options)
    assert isinstance(job, steps.TwoPassJob) and not [p for p in CAPABILITIES if isinstance(job, p)]
    assert steps.lite_of(job) is job
    calls: list = []
    m = run_job(job, pmap=_recording_pmap(calls))
    assert [getattr(f, "__name__", getattr(f, "func", f).__name__) for f in calls] == ["pass1", "pass2"]
    back = read_manifest(tmp_path / "out")
    assert back == m and back.records == 50 and len(back.shards) > 1 and back.kind == csvfmt.NAME


@pytest.mark.parametrize("capability, ask, answer", [
    ("pre-pass", lambda job, pmap: steps.context_of(job, pmap, job.units()), None),
    ("size step", lambda job, pmap: steps.size_results(job, pmap, []), []),
    ("lite", lambda job, pmap: steps.lite_of(job) is job, True),
    ("needs a pre-pass", lambda job, pmap: steps.needs_prepass(job), False),
])
def test_helpers_answer_for_a_job_without_the_capability(tmp_path, capability, ask, answer):
    options, path = _csv(tmp_path)
    job = csvfmt.CsvJob.create([path], tmp_path / "out", options)
    calls: list = []
    try:
        assert ask(job, _recording_pmap(calls)) == answer and calls == []
    finally:
        job.area.cleanup()
        job.area.release()


def test_a_job_without_split_write_writes_whole_shards_on_a_pool(tmp_path):
    from converters.engines.localpool import LocalPool

    options, path = _csv(tmp_path)
    job = csvfmt.CsvJob.create([path], tmp_path / "out", options)
    with LocalPool(2) as pool:
        m = run_job(job, pmap=pool.map)
    assert m.records == 50 and len(m.shards) > 1


@dataclasses.dataclass(frozen=True)
class _Scattering(csvfmt.CsvJob):
    """A core-only job whose plan has scatter tasks: a plan no engine can run."""

    def plan(self, summaries, sizes=(), ctx=None):
        return dataclasses.replace(super().plan(summaries, sizes, ctx), scatter=("task",))


def test_scatter_tasks_without_a_scatter_step_are_an_error(tmp_path):
    options, path = _csv(tmp_path)
    base = csvfmt.CsvJob.create([path], tmp_path / "out", options)
    job = _Scattering(base.options, base.paths, base.area)
    with pytest.raises(TfpipeError, match="the csv job planned scatter tasks .* but has no scatter step"):
        run_job(job)
    assert not (tmp_path / "out").exists()  # no shard, no manifest, no temporary area


def _specs(*indices):
    from converters.engines.core import ShardSpec

    return [ShardSpec(i, 1) for i in indices]


def _wait_for(path, seconds: float = 20.0) -> bool:
    import os
    import time

    end = time.monotonic() + seconds
    while not os.path.exists(path):
        if time.monotonic() > end:
            return False
        time.sleep(0.01)
    return True


@dataclasses.dataclass(frozen=True)
class _MarkingSplitJob:
    """A ``SplitWrite`` job that leaves a marker file for each step: shard 0 in one part per process, the others
    whole; its join starts, then waits for ``after_writes``' marker."""

    marks: str

    def _mark(self, name: str) -> None:
        import os

        with open(f"{self.marks}/{name}", "w") as f:
            f.write(str(os.getpid()))

    def pass2(self, spec):
        self._mark(f"whole-{spec.index}")
        return f"whole {spec.index}"

    def split_shard(self, spec, processes):
        return [(spec.index, k) for k in range(processes)] if spec.index == 0 else []

    def write_part(self, part):
        self._mark(f"part-{part[0]}-{part[1]}")
        return 1

    def join_shard(self, parts):
        self._mark("join-started")
        return f"joined {len(parts)} parts" if _wait_for(f"{self.marks}/after") else "the join never saw after_writes"


def test_after_writes_runs_beside_the_join_once_every_record_is_written(tmp_path):
    """``after_writes`` (the local engine: the temporary area's removal) starts once every part and whole shard
    is written, and runs while the join does: the join waits for it, and it waits for the join to start."""
    import os

    from converters.engines.localpool import LocalPool

    job = _MarkingSplitJob(str(tmp_path))
    seen = []

    def after_writes():
        seen.append(sorted(os.listdir(tmp_path)))
        if _wait_for(tmp_path / "join-started"):
            job._mark("after")

    with LocalPool(2) as pool:
        results = steps.write_step(job, pool.map, _specs(0, 1), after_writes=after_writes)
    assert results == ["joined 2 parts", "whole 1"]
    assert len(seen) == 1 and {"part-0-0", "part-0-1", "whole-1"} <= set(seen[0])


def test_this_process_writes_the_first_parts_it_joins(tmp_path):
    """On a local pool, this process takes the first part of each split shard (the join it runs continues that
    part's hash); the workers take the whole shards and the other parts first."""
    import os

    from converters.engines.localpool import LocalPool

    job = _MarkingSplitJob(str(tmp_path))
    job._mark("after")
    with LocalPool(2) as pool:
        assert steps.write_step(job, pool.map, _specs(0, 1)) == ["joined 2 parts", "whole 1"]
    assert (tmp_path / "part-0-0").read_text() == str(os.getpid())
    assert (tmp_path / "whole-1").read_text() != str(os.getpid())


def test_after_writes_is_not_called_where_nothing_is_joined(tmp_path):
    from converters.engines.localpool import LocalPool

    job, called = _MarkingSplitJob(str(tmp_path)), []
    with LocalPool(2) as pool:
        assert steps.write_step(job, pool.map, _specs(1, 2), after_writes=lambda: called.append(1)) == [
            "whole 1", "whole 2"]
    assert steps.write_step(job, lambda fn, xs: [fn(x) for x in xs], _specs(0),
                            after_writes=lambda: called.append(1)) == ["whole 0"]
    assert called == []
