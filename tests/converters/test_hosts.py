"""The pure Processing host plan: places, contiguous weighted splits, input channels and distributions, the
ShardedByS3Key layout and the work area's run name (no processes, no files)."""
from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from converters.engines.processing.hosts import (
    FULLY_REPLICATED,
    SHARDED,
    Place,
    channel_of,
    distribution_of,
    run_id,
    sharded_layout,
    split_contiguous,
)


@pytest.mark.parametrize("hosts, current, index, finalizer", [
    (("algo-1",), "algo-1", 0, True),
    (("algo-1", "algo-2", "algo-3"), "algo-2", 1, False),
    (["algo-2", "algo-10", "algo-1"], "algo-2", 0, True),  # the given order, not sorted
])
def test_place(hosts, current, index, finalizer):
    p = Place(hosts, current)
    assert p.index == index and p.is_finalizer == finalizer and p.finalizer == tuple(hosts)[0]
    assert p.hosts == tuple(hosts)


@pytest.mark.parametrize("hosts, current, match", [
    ((), "a", "must not be empty"),
    (("a", "b", "a"), "a", "a repeated"),
    (("a", "b"), "c", "'c' is not one of hosts"),
    (("a", ""), "a", "non-empty strings"),
    (("a/b",), "a/b", "without '/'"),
    ("algo-1", "algo-1", "list of host names"),
    (tuple(f"algo-{i}" for i in range(1, 102)), "algo-1", "101 hosts; a Processing job has at most 100 instances"),
    (["algo-1"] * 2_000_000, "algo-1", "2,000,000 hosts"),  # refused before the (quadratic) repeat check
    (("a" * 256,), "a" * 256, "at most 255 characters"),
])
def test_place_refuses(hosts, current, match):
    with pytest.raises(ValueError, match=match):
        Place(hosts, current)


@pytest.mark.parametrize("weights, parts, expected", [
    ([10, 10, 10, 10], 2, [(0, 2), (2, 4)]),
    ([10, 10, 10, 10], 4, [(0, 1), (1, 2), (2, 3), (3, 4)]),
    ([100, 1, 1, 1], 2, [(0, 1), (1, 4)]),
    ([1, 1], 3, [(0, 1), (1, 1), (1, 2)]),  # fewer items than parts: an empty range in between
    ([], 2, [(0, 0), (0, 0)]),
    ([0, 0, 0, 0], 2, [(0, 2), (2, 4)]),  # zero weights count as 1
    ([5], 1, [(0, 1)]),
])
def test_split_contiguous_table(weights, parts, expected):
    assert split_contiguous(weights, parts) == expected


@given(st.lists(st.integers(0, 10**12), max_size=60), st.integers(1, 20))
def test_split_contiguous_covers_in_order_and_balances(weights, parts):
    ranges = split_contiguous(weights, parts)
    assert len(ranges) == parts
    assert ranges[0][0] == 0 and ranges[-1][1] == len(weights)
    for (a, b), (c, d) in zip(ranges, ranges[1:]):
        assert a <= b == c <= d
    w = [max(x, 1) for x in weights]
    total = sum(w)
    if total:
        # midpoint rule: no part exceeds its fair share by more than one item's weight
        for a, b in ranges:
            assert sum(w[a:b]) <= total / parts + max(w)


@pytest.mark.parametrize("weights, parts, match", [
    ([1, -1], 2, "non-negative"),
    ([1.5], 2, "non-negative integers"),
    ([1], 0, "positive integer"),
])
def test_split_contiguous_refuses(weights, parts, match):
    with pytest.raises(ValueError, match=match):
        split_contiguous(weights, parts)


CHANNELS = {"/opt/ml/processing/input/train": SHARDED, "/opt/ml/processing/input/eval": FULLY_REPLICATED,
            "/opt/ml/processing/input/train/extra": FULLY_REPLICATED}


@pytest.mark.parametrize("path, expected", [
    ("/opt/ml/processing/input/train", "/opt/ml/processing/input/train"),
    ("/opt/ml/processing/input/train/day-0.txt", "/opt/ml/processing/input/train"),
    ("/opt/ml/processing/input/train/extra/x.txt", "/opt/ml/processing/input/train/extra"),  # the longest
    ("/opt/ml/processing/input/training/x.txt", None),  # a prefix of the name is not a parent
    ("/opt/ml/processing/input/eval/../train/a", "/opt/ml/processing/input/train"),
    ("/data/x.txt", None),
])
def test_channel_of(path, expected):
    assert channel_of(path, CHANNELS) == expected


@pytest.mark.parametrize("inputs, expected", [
    (["/opt/ml/processing/input/train"], SHARDED),
    (["/opt/ml/processing/input/eval/a", "/data/b"], FULLY_REPLICATED),
    (["/data/b"], FULLY_REPLICATED),
    ([], FULLY_REPLICATED),
])
def test_distribution_of(inputs, expected):
    assert distribution_of(inputs, CHANNELS) == expected


def test_distribution_of_refuses_a_mix():
    with pytest.raises(ValueError, match="mix ShardedByS3Key .*/train/a.* and FullyReplicated .*/eval/b"):
        distribution_of(["/opt/ml/processing/input/train/a", "/opt/ml/processing/input/eval/b"], CHANNELS)


@pytest.mark.parametrize("counts, expected", [
    ([2, 0, 1], [(0, 0), (0, 1), (2, 0)]),
    ([0, 0], []),
    ([1, 2], [(0, 0), (1, 0), (1, 1)]),
])
def test_sharded_layout(counts, expected):
    assert sharded_layout(counts) == expected


def test_sharded_layout_refuses_negative_counts():
    with pytest.raises(ValueError, match="-1 for host #1"):
        sharded_layout([1, -1])


def test_run_id_is_stable_and_depends_on_command_hosts_and_distribution():
    argv = ["convert", "libsvm", "/in", "--out", "s3://b/o"]
    hosts = ["algo-1", "algo-2"]
    a = run_id(argv, hosts, SHARDED)
    assert a == run_id(list(argv), tuple(hosts), SHARDED) and a.startswith("proc-") and "/" not in a
    assert len({a, run_id(argv + ["--pad"], hosts, SHARDED), run_id(argv, hosts[:1], SHARDED),
                run_id(argv, hosts, FULLY_REPLICATED)}) == 4
