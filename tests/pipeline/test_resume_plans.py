"""``pipeline.resume.state`` with a sharding plan's per-rank file lists, and every refusal that remains: a plan's ranks
resume from rank 0's state exactly (each its own files, the plan's equal steps); a rank's entry alone, unequal
steps, ``remainder="pad"`` short of records, a state of another plan and a cache stage are refused with one line;
``RESUME_LIMITS`` is what ``tfpipe pipeline explain --resumable`` prints and what docs/pipeline.md's Known
limits lists, and each of its entries is a real refusal."""
from __future__ import annotations

import re
from pathlib import Path
from types import SimpleNamespace

import pytest
from pipeline_data import batches_of, write_indexed_set

from converters import read_manifest
from pipeline import PipelineSpec, ResumeError, build_dataset, input_state
from pipeline.resume.state import RESUME_LIMITS
from sharding import Topology, plan

N = 1000          # records; 21 shards of ~48 records
BATCH = 32
DOC = Path(__file__).resolve().parents[2] / "docs" / "pipeline.md"
BASE = dict(shuffle_buffer=100, seed=7, epochs=2, resumable=True)


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    d = tmp_path_factory.mktemp("plans")
    write_indexed_set(d, N, shard_bytes=4 << 10)
    return str(d)


def _plan(data, workers, **kw):
    return plan(read_manifest(data), Topology(hosts=1, workers_per_host=workers), batch_size=BATCH, **kw)


@pytest.mark.parametrize("workers, kw", [(2, {}), (3, {}), (2, {"s3_sharded": True})])
def test_every_rank_of_a_plan_resumes_from_rank_0s_state(data, workers, kw):
    """files: each rank its own files; s3_sharded: the host's files under shard(2, local_rank). Rank 0's state
    after k steps continues every rank at its own batch k, across the epoch boundary."""
    p = _plan(data, workers, **kw)
    specs = [PipelineSpec.from_manifest(data, BATCH, plan=p, rank=r, **BASE) for r in range(workers)]
    full = [batches_of(build_dataset(s)) for s in specs]
    assert all(len(f) == 2 * p.steps_per_epoch for f in full)            # equal steps on every rank
    first_epoch = [x for f in full for b in f[:p.steps_per_epoch] for x in b]
    assert len(first_epoch) == len(set(first_epoch))                      # no record on two ranks
    for k in (1, p.steps_per_epoch - 1, p.steps_per_epoch, p.steps_per_epoch + 2):
        state = input_state(specs[0], k)
        assert state["plan"] == specs[0].plan_fingerprint and state["steps"] == k
        assert all(input_state(s, k) == state for s in specs)             # every rank computes the same dict
        for s, f in zip(specs, full):
            assert batches_of(build_dataset(s, resume=state)) == f[k:]


def _one_line(fn, match):
    with pytest.raises(ValueError, match=match) as e:
        fn()
    assert "\n" not in str(e.value)
    return str(e.value)


def test_a_ranks_entry_alone_is_refused(data):
    entry = _plan(data, 2).for_rank(0)
    _one_line(lambda: PipelineSpec.from_manifest(data, BATCH, plan=entry, **BASE), "needs the whole plan")


def test_a_plan_with_unequal_steps_is_refused(data):
    names = [s.name for s in read_manifest(data).shards]
    ranks = [SimpleNamespace(rank=0, files=names[:10], shard=None, steps=14, channel=None),
             SimpleNamespace(rank=1, files=names[10:], shard=None, steps=15, channel=None)]
    _one_line(lambda: PipelineSpec.from_manifest(data, BATCH, plan=SimpleNamespace(ranks=ranks), rank=0, **BASE),
              r"same steps per epoch on every rank .* got \['14', '15'\]")


def test_a_padded_plan_short_of_records_is_refused(data):
    p = _plan(data, 2, remainder="pad")          # 17 steps; rank 0's 483 records make 16
    spec = PipelineSpec.from_manifest(data, BATCH, plan=p, rank=0, **BASE)
    _one_line(lambda: build_dataset(spec), "make 16 steps per epoch, fewer than the plan's 17.*remainder='drop'")


@pytest.mark.parametrize("other", ["three ranks", "no plan"])
def test_a_state_of_another_plan_is_refused(data, other):
    two = PipelineSpec.from_manifest(data, BATCH, plan=_plan(data, 2), rank=0, **BASE)
    saver = (PipelineSpec.from_manifest(data, BATCH, plan=_plan(data, 3), rank=0, **BASE) if other == "three ranks"
             else PipelineSpec.from_manifest(data, BATCH, **BASE))
    _one_line(lambda: build_dataset(two, resume=input_state(saver, 3)), "another sharding plan")
    _one_line(lambda: build_dataset(saver, resume=input_state(two, 3)), "another sharding plan")


def test_a_plan_that_cannot_resume_keeps_the_default_graph_unless_resumable_is_demanded(data):
    from pipeline.resume.state import resume_choice

    seeded = dict(shuffle_buffer=100, seed=7)
    alone = PipelineSpec.from_manifest(data, BATCH, plan=_plan(data, 2).for_rank(0), **seeded)
    builds, why = resume_choice(alone)
    assert not builds and "needs the whole plan" in why and "\n" not in why
    whole = PipelineSpec.from_manifest(data, BATCH, plan=_plan(data, 2), rank=0, **seeded)
    assert resume_choice(whole)[0] and whole.resuming.plan_fingerprint            # the default: resumable
    assert not PipelineSpec.from_manifest(data, BATCH, plan=_plan(data, 2), rank=0, resumable=False,
                                          **seeded).resuming.plan_fingerprint


@pytest.mark.parametrize("cache", ["memory", "file:cached"])
def test_a_cache_stage_is_refused(data, cache):
    _one_line(lambda: PipelineSpec.from_manifest(data, BATCH, cache=cache, **BASE), f"cache='{cache}' would freeze")
    assert PipelineSpec.from_manifest(data, BATCH, cache="none", **BASE).resumable


def _limit(start: str) -> int:
    (i,) = [i for i, text in enumerate(RESUME_LIMITS) if text.startswith(start)]
    return i


def _refusals(data):
    """Each entry of RESUME_LIMITS -> a call that meets it (a spec, or a state under another plan)."""
    spec = PipelineSpec.from_manifest(data, BATCH, **BASE)
    two = _plan(data, 2)
    return {
        _limit("Pipe mode"): (lambda: input_state(spec.with_(mode="pipe", channel="train", files=()), 1),
                              "Pipe mode cannot resume mid-epoch"),
        _limit("shuffle_buffer > 0 without a seed"): (lambda: input_state(spec.with_(seed=None), 1), "needs a seed"),
        _limit("a spec without per-file"): (lambda: input_state(spec.with_(file_records=()), 1), "file_records"),
        _limit("several ranks"): (lambda: input_state(spec.with_(num_shards=40, shard_index=0), 1),
                                  "less than one global batch"),
        _limit("cache="): (lambda: spec.with_(cache="memory"), "would freeze"),
        _limit("a plan's per-rank file lists given as one"): (
            lambda: PipelineSpec.from_manifest(data, BATCH, plan=two.for_rank(1), **BASE), "whole plan"),
        _limit("a plan whose ranks"): (
            lambda: build_dataset(PipelineSpec.from_manifest(data, BATCH, plan=_plan(data, 2, remainder="pad"),
                                                             rank=0, **BASE)), "remainder='pad'"),
        _limit("a state saved under another plan"): (
            lambda: build_dataset(PipelineSpec.from_manifest(data, BATCH, plan=two, rank=0, **BASE),
                                  resume=input_state(spec, 2)), "another sharding plan"),
        _limit("a read on a tf.data service"): (lambda: spec.with_(service="grpc://localhost:5050"),
                                                "resumable=True enters one global order"),
    }


@pytest.mark.parametrize("i", range(len(RESUME_LIMITS)))
def test_every_listed_limit_is_a_one_line_refusal(data, i):
    refusals = _refusals(data)
    assert sorted(refusals) == list(range(len(RESUME_LIMITS)))
    call, match = refusals[i]
    _one_line(call, match)


def test_known_limits_in_the_docs_list_every_refusal():
    text = DOC.read_text()
    limits = text[text.index("## Known limits"):text.index("## Where the code lives")]
    for entry in RESUME_LIMITS:
        assert f"- {entry}\n" in limits, f"docs/pipeline.md Known limits does not list: {entry}"


def test_explain_resumable_prints_the_limits(data, capsys):
    from converters.cli import main

    assert main(["pipeline", "explain", data, "--batch-size", "32", "--shuffle-buffer", "100", "--seed", "1",
                 "--resumable"]) == 0
    out = capsys.readouterr().out
    assert "cannot resume mid-epoch" in out and all(f"  - {entry}" in out for entry in RESUME_LIMITS)
    assert main(["pipeline", "explain", data, "--batch-size", "32", "--cache", "memory", "--resumable"]) != 0
    err = capsys.readouterr().err
    assert "would freeze" in err and len(err.strip().splitlines()) == 1


def test_explain_without_resumable_prints_no_limits(data, capsys):
    from converters.cli import main

    assert main(["pipeline", "explain", data, "--batch-size", "32"]) == 0
    assert "cannot resume" not in capsys.readouterr().out


def test_limits_name_no_lifted_refusal():
    """Streamed remote sets and label_weights groups resume: not listed as limits."""
    text = " ".join(RESUME_LIMITS)
    assert not re.search(r"label_weights|s3://|remote|stream", text)
