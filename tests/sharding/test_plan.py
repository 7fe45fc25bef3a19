"""The planner: the four Horovod cases, plain File mode, refusals, and a property test that simulates what
every rank reads (its files, then shard(n, i), then drop/pad to the planned steps)."""
from __future__ import annotations

import itertools
import json
import random
import re
import subprocess
import sys
from types import SimpleNamespace as NS

import pytest
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from sharding import ChannelConfig, PlanError, RankPlan, ShardPlan, Topology, plan
from sharding.plan import partition_by_records, shard_count


def manifest(counts):
    n = len(counts)
    return NS(shards=[NS(name=f"train-{i:05d}-of-{n:05d}.tfrecord", records=c) for i, c in enumerate(counts)])


def simulate(m, p: ShardPlan, assignment=None):
    """What each rank consumes in one epoch: global record ids, in order.

    ``assignment`` (rank -> file names) replaces the planned files (another ShardedByS3Key split)."""
    ids, start = {}, 0
    for s in m.shards:
        ids[s.name] = list(range(start, start + s.records))
        start += s.records
    everything = [s.name for s in m.shards]
    out = []
    for r in p.ranks:
        files = assignment[r.rank] if assignment else r.files
        stream = [x for f in (everything if files is None else files) for x in ids[f]]
        if r.shard is not None:
            n, i = r.shard
            stream = stream[i::n]
        want = r.steps * p.batch_size
        if p.remainder == "drop":
            assert len(stream) >= want, (r, len(stream), want)
            out.append(stream[:want])
        else:
            assert 0 < len(stream) <= want, (r, len(stream), want)
            out.append(list(itertools.islice(itertools.cycle(stream), want)))
    return out


def check_invariants(m, p: ShardPlan):
    R = sum(s.records for s in m.shards)
    consumed = simulate(m, p)
    flat = [x for rank in consumed for x in rank]
    assert {r.steps for r in p.ranks} == {p.steps_per_epoch}
    assert p.steps_per_epoch >= 1
    assert all(len(c) == p.steps_per_epoch * p.batch_size for c in consumed)
    if p.remainder == "drop":
        assert len(set(flat)) == len(flat), "a record read twice without padding"
        assert R - len(flat) == p.dropped, "records left out must be declared"
    else:
        assert set(flat) == set(range(R)), "records missing under pad"
        assert len(flat) - R == p.padded, "duplicates must be declared padding"
    assert sum(p.records_per_rank) == R  # the streams partition the set exactly
    return consumed


# -- the four Horovod cases and File mode ------------------------------------------------------------------

H, W = 2, 4
EQUAL16 = manifest([100] * 16)


@pytest.mark.parametrize("kw, strategy, shard_of, channel_of", [
    # one channel per worker, FullyReplicated: shard(hosts, rank // wph)
    (dict(pipe=True, channel_per_worker=True), "channel_per_worker", lambda r: (H, r // W), lambda r: f"train_{r % W}"),
    # one channel per worker, ShardedByS3Key: no shard call
    (dict(pipe=True, channel_per_worker=True, s3_sharded=True), "channel_per_worker_s3", lambda r: None,
     lambda r: f"train_{r % W}"),
    # one channel, ShardedByS3Key (File mode: several workers may share the host's files): shard(wph, local_rank)
    (dict(s3_sharded=True), "s3_sharded", lambda r: (W, r % W), lambda r: "train"),
    # one channel, FullyReplicated, record sharding: shard(world_size, rank)
    (dict(record_sharding=True), "records", lambda r: (H * W, r), lambda r: "train"),
    # plain File mode: each rank its own files
    (dict(), "files", lambda r: None, lambda r: "train"),
])
def test_cases(kw, strategy, shard_of, channel_of):
    p = plan(EQUAL16, Topology(hosts=H, workers_per_host=W), batch_size=32, **kw)
    assert p.strategy == strategy
    for r in p.ranks:
        assert r.shard == shard_of(r.rank)
        assert r.channel == channel_of(r.rank)
        assert r.host == f"algo-{r.rank // W + 1}" and r.local_rank == r.rank % W
    # 1600 records over 8 ranks: 200 each, 6 batches of 32, 8 left per rank
    assert p.steps_per_epoch == 6 and p.dropped == 64
    check_invariants(EQUAL16, p)


def test_pipe_one_worker_per_host_uses_world_shard():
    p = plan(EQUAL16, Topology(hosts=4, workers_per_host=1), batch_size=10, pipe=True)
    assert p.strategy == "records"
    assert [r.shard for r in p.ranks] == [(4, i) for i in range(4)]
    assert [r.files for r in p.ranks] == [None] * 4
    check_invariants(EQUAL16, p)


def test_channel_per_worker_channels_cover_set_once():
    p = plan(manifest([10, 20, 30, 40, 50, 60]), Topology(hosts=2, workers_per_host=3), batch_size=5,
             pipe=True, channel_per_worker=True)
    files = [f for fs in p.channels.values() for f in fs]
    assert sorted(files) == sorted(s.name for s in manifest([0] * 6).shards)
    assert list(p.channels) == ["train_0", "train_1", "train_2"]
    # workers on one host never share a channel
    for host in ("algo-1", "algo-2"):
        chans = [r.channel for r in p.ranks if r.host == host]
        assert len(chans) == len(set(chans))


def test_single_rank_gets_everything():
    p = plan(manifest([5, 7]), Topology(), batch_size=4)
    assert p.strategy == "files"
    assert p.ranks[0].files == ("train-00000-of-00002.tfrecord", "train-00001-of-00002.tfrecord")
    assert p.ranks[0].shard is None and p.steps_per_epoch == 3 and p.dropped == 0


@pytest.mark.parametrize("remainder, steps, dropped, padded", [("drop", 2, 9, 0), ("pad", 3, 0, 3)])
def test_remainder_policies(remainder, steps, dropped, padded):
    m = manifest([10, 11, 12])  # record sharding over 3 ranks: 11 records each; batch 4
    p = plan(m, Topology(hosts=3), batch_size=4, record_sharding=True, remainder=remainder)
    assert (p.steps_per_epoch, p.dropped, p.padded) == (steps, dropped, padded)
    check_invariants(m, p)
    assert any(f"remainder={remainder}" in n for n in p.notes)


def test_defaults_come_from_topology_channels():
    chans = {f"train_{k}": ChannelConfig("Pipe", "ShardedByS3Key") for k in range(4)}
    p = plan(EQUAL16, Topology(hosts=2, workers_per_host=4, channels=chans), batch_size=8)
    assert p.strategy == "channel_per_worker_s3"
    p = plan(EQUAL16, Topology(hosts=4, channels={"train": ChannelConfig("Pipe")}), batch_size=8)
    assert p.strategy == "records" and any(n.startswith("Pipe mode") for n in p.notes)
    with pytest.raises(PlanError, match="share one FIFO"):
        plan(EQUAL16, Topology(hosts=2, workers_per_host=2, channels={"train": ChannelConfig("Pipe")}), batch_size=8)


# -- refusals ---------------------------------------------------------------------------------------------

@pytest.mark.parametrize("counts, hosts, wph, kw, match", [
    ([10] * 3, 2, 2, dict(), r"fewer files \(3\) than readers \(4"),
    ([10] * 3, 2, 2, dict(), r"--num-shards 4"),
    ([100] * 8, 2, 2, dict(pipe=True), r"share one FIFO"),
    ([100] * 8, 2, 2, dict(pipe=True, s3_sharded=True), r"share one FIFO"),
    ([100] * 5, 2, 1, dict(s3_sharded=True), r"divisible by the host count.*5 files for 2 hosts"),
    ([100] * 6, 2, 2, dict(pipe=True, channel_per_worker=True, s3_sharded=True),
     r"divisible by workers per host x hosts \(2 x 2 = 4\).*--num-shards 8"),
    ([100] * 2, 1, 3, dict(pipe=True, channel_per_worker=True), r"at least one file per channel"),
    ([1000] * 30, 1, 21, dict(pipe=True, channel_per_worker=True), r"at most 20"),
    ([1, 1, 1], 2, 2, dict(record_sharding=True), r"more ranks \(4 = 2 host\(s\) x 2 worker\(s\)\) than records \(3\)"),
    ([10] * 4, 2, 2, dict(batch_size=11), r"rank \d gets only 10 records, fewer than one batch of 11"),
    ([0, 0, 50, 50], 2, 2, dict(), r"could receive no records"),
    ([0, 0], 1, 1, dict(), r"no records"),
])
def test_refusals(counts, hosts, wph, kw, match):
    kw = dict(kw)
    batch = kw.pop("batch_size", 1)
    with pytest.raises(PlanError, match=match):
        plan(manifest(counts), Topology(hosts=hosts, workers_per_host=wph), batch_size=batch, **kw)


def test_refusal_exit_code_is_distinct():
    assert PlanError("x").exit_code not in (0, 1, 2)


@pytest.mark.parametrize("kw", [dict(batch_size=0), dict(batch_size=4, remainder="wrap")])
def test_bad_arguments(kw):
    with pytest.raises(ValueError):
        plan(EQUAL16, Topology(), **kw)


# -- the dataclasses --------------------------------------------------------------------------------------

def test_to_json_shape_and_for_rank():
    p = plan(EQUAL16, Topology(hosts=2, workers_per_host=2), batch_size=16, pipe=True, channel_per_worker=True)
    d = json.loads(p.to_json_str())
    assert [set(r) for r in d["ranks"]] == [{"rank", "host", "local_rank", "channel", "files", "shard", "steps"}] * 4
    assert d["ranks"][3]["shard"] == [2, 1] and isinstance(d["ranks"][3]["files"], list)
    assert d["steps_per_epoch"] == p.steps_per_epoch and d["strategy"] == "channel_per_worker"
    assert p.for_rank(3).channel == "train_1"
    with pytest.raises(ValueError, match="rank 4 out of range"):
        p.for_rank(4)


@pytest.mark.parametrize("kwargs, match", [
    (dict(rank=0, host="h", local_rank=0, channel="c", files=None, shard=(2, 2), steps=1), r"shard must be"),
    (dict(rank=0, host="h", local_rank=0, channel="c", files=None, shard=(0, 0), steps=1), r"shard must be"),
    (dict(rank=0, host="h", local_rank=0, channel="c", files=None, shard=None, steps=-1), r"steps must be"),
    (dict(rank=-1, host="h", local_rank=0, channel="c", files=None, shard=None, steps=1), r"rank"),
])
def test_rankplan_validation(kwargs, match):
    with pytest.raises(ValueError, match=match):
        RankPlan(**kwargs)


def test_shardplan_refuses_unequal_steps():
    a = RankPlan(0, "h", 0, "c", None, (2, 0), 3)
    b = RankPlan(1, "h", 1, "c", None, (2, 1), 2)
    with pytest.raises(ValueError, match="same number of steps"):
        ShardPlan(ranks=(a, b), batch_size=4, steps_per_epoch=3, strategy="records")
    with pytest.raises(ValueError, match="strategy must be"):
        ShardPlan(ranks=(a,), batch_size=4, steps_per_epoch=3, strategy="magic")


# -- pure helpers -----------------------------------------------------------------------------------------

@pytest.mark.parametrize("total, n", [(0, 1), (1, 3), (10, 3), (11, 4), (100, 7)])
def test_shard_count_matches_slicing(total, n):
    assert [shard_count(total, n, i) for i in range(n)] == [len(range(total)[i::n]) for i in range(n)]


def test_partition_is_deterministic_and_balanced():
    counts = [5, 9, 1, 7, 3, 8, 2, 6]
    g = partition_by_records(counts, 3)
    assert g == partition_by_records(counts, 3)
    assert sorted(i for grp in g for i in grp) == list(range(8))
    totals = [sum(counts[i] for i in grp) for grp in g]
    assert max(totals) - min(totals) <= max(counts)
    eq = partition_by_records(counts, 4, equal_files=True)
    assert [len(x) for x in eq] == [2, 2, 2, 2]


# -- property: any topology, any set: a correct plan or a refusal with a reason ---------------------------

STRUCTURAL = [r"share one FIFO", r"divisible", r"fewer files", r"at least one file per channel", r"at most 20",
              r"more ranks", r"fewer than one batch", r"could receive no records", r"no records"]


@st.composite
def cases(draw):
    hosts = draw(st.integers(1, 8))
    wph = draw(st.integers(1, 8))
    nfiles = draw(st.integers(1, 40))
    if draw(st.booleans()):
        counts = [draw(st.integers(0, 300))] * nfiles
    else:
        counts = draw(st.lists(st.integers(0, 300), min_size=nfiles, max_size=nfiles))
    return dict(hosts=hosts, wph=wph, counts=counts, batch=draw(st.integers(1, 64)),
                pipe=draw(st.booleans()), s3=draw(st.booleans()), cpw=draw(st.booleans()),
                record_sharding=draw(st.booleans()), remainder=draw(st.sampled_from(["drop", "pad"])),
                seed=draw(st.integers(0, 2**16)))


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(cases())
def test_property_plan_or_refusal(case):
    m = manifest(case["counts"])
    H, W, F = case["hosts"], case["wph"], len(case["counts"])
    topo = Topology(hosts=H, workers_per_host=W)
    try:
        p = plan(m, topo, batch_size=case["batch"], pipe=case["pipe"], s3_sharded=case["s3"],
                 channel_per_worker=case["cpw"], record_sharding=case["record_sharding"], remainder=case["remainder"])
    except PlanError as exc:
        msg = str(exc)
        assert msg and any(re.search(s, msg) for s in STRUCTURAL), msg
        event(f"refused: {next(s for s in STRUCTURAL if re.search(s, msg))}")
        # the structural refusals happen exactly when their condition holds
        if case["pipe"] and not case["cpw"] and W > 1:
            assert any(k in msg for k in ("share one FIFO", "more ranks", "divisible", "holds no records"))
        if "share one FIFO" in msg:
            assert case["pipe"] and not case["cpw"] and W > 1
        if "divisible" in msg:
            assert case["s3"] and (F % (W * H) if case["cpw"] else F % H)
        return
    # structural conditions that must have been refused
    assert not (case["pipe"] and not case["cpw"] and W > 1)
    assert not (case["s3"] and (F % (W * H) if case["cpw"] else F % H))
    assert len(p.ranks) == H * W
    check_invariants(m, p)
    event(f"planned: {p.strategy}")
    # Pipe mode: two workers of one host never read one channel
    if case["pipe"]:
        for h in topo.hosts:
            chans = [r.channel for r in p.ranks if r.host == h]
            assert len(chans) == len(set(chans))
    # ShardedByS3Key: steps hold for any split of each channel's objects across hosts
    if p.strategy in ("s3_sharded", "channel_per_worker_s3"):
        rng = random.Random(case["seed"])
        assignment = {}
        per_channel = {}
        for ch, files in p.channels.items():
            files = list(files)
            rng.shuffle(files)
            k = len(files) // H
            per_channel[ch] = [sorted(files[h * k:(h + 1) * k]) for h in range(H)]
        for r in p.ranks:
            h = r.rank // W
            assignment[r.rank] = per_channel[r.channel][h]
        simulate(m, p, assignment)  # asserts every rank has enough (drop) / some but not too many (pad)


@pytest.mark.parametrize("hosts, wph", [(1, 1), (2, 8), (8, 8), (3, 5)])
@pytest.mark.parametrize("kw", [dict(), dict(record_sharding=True), dict(pipe=True, channel_per_worker=True),
                                dict(pipe=True, channel_per_worker=True, s3_sharded=True), dict(s3_sharded=True)])
def test_well_formed_sets_always_plan(hosts, wph, kw):
    """A set resharded to a multiple of hosts x wph with equal shards is always plannable."""
    m = manifest([50] * (hosts * wph * 2))
    check_invariants(m, plan(m, Topology(hosts=hosts, workers_per_host=wph), batch_size=16, **kw))


def test_import_loads_no_tensorflow():
    code = ("import sys, sharding, sharding.plan, sharding.topology, sharding.configs, sharding.cli\n"
            "from types import SimpleNamespace as NS\n"
            "m = NS(shards=[NS(name=f'train-{i:05d}-of-00004.tfrecord', records=100) for i in range(4)])\n"
            "p = sharding.plan(m, sharding.Topology(hosts=2, workers_per_host=2), batch_size=8)\n"
            "sharding.tf_config(sharding.Topology(hosts=2))\n"
            "bad = [k for k in ('tensorflow', 'boto3', 'numba') if k in sys.modules]\n"
            "assert not bad, bad\n"
            "print(p.steps_per_epoch)\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "12"
