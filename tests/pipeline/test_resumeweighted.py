"""A balanced group (``label_weights``) with ``resumable=True`` (pipeline.graph.resumeweighted, resumable.sampled_batches):
the sampled stream is a pure function of (seed, position): resumes equal the uninterrupted run batch for batch,
on one rank and on two; the proportions match the weights; each part reads its records once per part-epoch."""
from __future__ import annotations

import math

import numpy as np
import pytest

from converters.libsvm.convert import convert_libsvm
from converters.prep.options import PrepOptions
from pipeline import PipelineSpec, ResumeError, build_dataset, describe, input_state
from pipeline.graph.resumeweighted import block_positions, part_counts

ZEROS, ONES, BATCH = 6_000, 2_000, 100      # 80 steps an epoch on one rank, 40 on two


@pytest.fixture(scope="module")
def group(tmp_path_factory):
    """A per-label group whose records are identified by their first value (the line number)."""
    d = tmp_path_factory.mktemp("resumeweighted")
    (d / "in.libsvm").write_bytes(b"".join(b"%d 1:%d 2:7\n" % (int(i >= ZEROS), i) for i in range(ZEROS + ONES)))
    convert_libsvm(d / "in.libsvm", d / "g", field_size=2, shard_size=20_000, prep=PrepOptions(split_by_label=True))
    return str(d / "g")


def _spec(group, **kw):
    return PipelineSpec.from_manifest(group, BATCH, **{**dict(label_weights={0: 0.5, 1: 0.5}, seed=3,
                                                           shuffle_buffer=200, epochs=2, resumable=True), **kw})


def records(ds) -> list[list[int]]:
    """Each batch's record numbers (the first value of every record)."""
    return [[int(v) for v in features["values"][:, 0].numpy()] if isinstance(features, dict) else
            [int(v) for v in features.values[:, 0].numpy()] for features, _ in ds]


@pytest.fixture(scope="module")
def full(group):
    return records(build_dataset(_spec(group)))


@pytest.mark.parametrize("weights, size, counts", [
    ([0.5, 0.5], 4096, [2048, 2048]),
    ([0.9, 0.1], 4096, [3686, 410]),
    ([0.25, 0.5, 0.25], 4096, [1024, 2048, 1024]),
    ([0.995, 0.005], 16384, [16302, 82]),       # a small weight: a bigger block keeps it to ±1 %
    ([0.9999, 0.0001], 16384, [16382, 2]),       # the largest block: at least one record a block
])
def test_block_plan(weights, size, counts):
    assert block_positions(weights) == size
    assert part_counts(weights, size) == counts and sum(counts) == size


def test_uninterrupted_run_is_balanced_and_reads_each_part_in_part_epochs(group, full):
    assert len(full) == 160 and all(len(b) == BATCH for b in full)
    flat = np.array([x for b in full for x in b])
    ones = (flat >= ZEROS).mean()
    # i.i.d. draws would give ones within 4 standard deviations of 0.5 (p = 0.5, n = 16,000); stratified
    # blocks of 4,096 are much closer: every block holds 2,048 of each
    assert abs(ones - 0.5) <= 4 * math.sqrt(0.25 / len(flat))
    # three whole blocks hold 3 x 2,048 records of each part; a part-epoch reads each of its records once, so
    # the 2,000 ones come 3 or 4 times each and the 6,000 zeros once or twice
    seen = np.bincount(flat[:3 * 4096], minlength=ZEROS + ONES)
    assert seen[ZEROS:].sum() == seen[:ZEROS].sum() == 3 * 2048
    assert set(seen[ZEROS:]) == {3, 4} and set(seen[:ZEROS]) == {1, 2}
    assert records(build_dataset(_spec(group))) == full                  # a pure function of (seed, position)
    assert records(build_dataset(_spec(group, seed=4))) != full


@pytest.mark.parametrize("steps", [1, 37, 80, 121, 160])
def test_resume_equals_uninterrupted_run(group, full, steps):
    spec = _spec(group)
    assert records(build_dataset(spec, resume=input_state(spec, steps))) == full[steps:]


def test_skewed_weights_match_their_proportions(group):
    spec = _spec(group, label_weights={0: 0.8, 1: 0.2}, epochs=1)
    flat = np.array([x for b in records(build_dataset(spec)) for x in b])
    assert abs((flat >= ZEROS).mean() - 0.2) <= 4 * math.sqrt(0.2 * 0.8 / len(flat))
    state = input_state(spec, 50)
    assert records(build_dataset(spec, resume=state)) == records(build_dataset(spec))[50:]


def test_two_ranks_resume_and_a_new_world_size_is_refused(group, full):
    ranks = [_spec(group, num_shards=2, shard_index=i) for i in range(2)]
    runs = [records(build_dataset(s)) for s in ranks]
    assert [b for pair in zip(*runs) for b in pair] == full            # rank i takes batches i, i+2, ...
    state = input_state(ranks[0], 30)                                   # rank 0 saves; every rank resumes
    assert [records(build_dataset(s, resume=state)) for s in ranks] == [r[30:] for r in runs]
    with pytest.raises(ResumeError, match="from 2 rank.*this spec has 1"):
        build_dataset(_spec(group), resume=state)


def test_describe_shows_the_stratified_sample(group):
    text = describe(_spec(group))
    assert "sample" in text and "block=4096" in text and "resumable=True" in text
