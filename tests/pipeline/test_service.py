"""pipeline.graph.service against a real tf.data service: a dispatcher and two workers started in this
process (``tf.data.experimental.service``), two trainer ranks reading one set through it. Every record of an
epoch reaches exactly one rank (the equal-steps remainder aside, counted), both ranks run the same steps,
and ``describe`` says what runs where and why. Faults (a killed worker, a restarted dispatcher) are in
``test_service_faults``."""
from __future__ import annotations

from collections import Counter

import pytest
from pipeline_data import batches_of, write_indexed_set
from service_procs import service  # noqa: F401 (a fixture)

from converters.shardset.reader import read_manifest
from pipeline import PipelineSpec, build_dataset, describe
from sharding.plan import plan
from sharding.topology import Topology

tf = pytest.importorskip("tensorflow")

N = 1500
BATCH = 32


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    out = tmp_path_factory.mktemp("svc") / "set"
    m = write_indexed_set(out, N, shard_bytes=4 << 10)
    assert len(m.shards) >= 6
    return out


def _epochs(batches: list[list[int]], steps: int, epochs: int) -> list[list[int]]:
    assert len(batches) == steps * epochs
    return [[x for b in batches[e * steps:(e + 1) * steps] for x in b] for e in range(epochs)]


@pytest.mark.parametrize("shuffle, drop", [(0, False), (200, True)])
def test_two_ranks_record_shard_every_record_once_equal_steps(service, data, shuffle, drop):
    ranks = [PipelineSpec.from_manifest(data, BATCH, num_shards=2, shard_index=r, epochs=2, seed=7,
                                        shuffle_buffer=shuffle, drop_remainder=drop, service=service,
                                        service_job=f"rs{shuffle}") for r in range(2)]
    from pipeline.plan.servicejob import service_steps

    steps = service_steps(ranks[0])[0]
    assert steps == service_steps(ranks[1])[0]
    got = [batches_of(build_dataset(s)) for s in ranks]
    assert all(len(b) == steps * 2 for b in got)                       # equal steps, both epochs
    for r in got:                                                      # full batches but an epoch's last
        assert all(len(b) == BATCH for e in range(2) for b in r[e * steps:(e + 1) * steps - 1])
    per_rank = [_epochs(b, steps, 2) for b in got]
    for e in range(2):
        seen = Counter(per_rank[0][e] + per_rank[1][e])
        assert max(seen.values()) == 1                                 # nothing twice in an epoch
        kept = sum(len(per_rank[r][e]) for r in range(2))
        assert kept == len(seen) and kept <= N
        assert N - kept <= 2 * BATCH + len(read_manifest(data).shards)  # the equal-steps remainder at most
        assert not set(per_rank[0][e]) & set(per_rank[1][e])
    if not shuffle:
        assert sorted(per_rank[0][0]) == sorted(per_rank[0][1])        # the same records every epoch


def test_two_ranks_per_rank_files_from_a_plan(service, data):
    p = plan(read_manifest(data), Topology(hosts=1, workers_per_host=2), batch_size=BATCH)
    ranks = [PipelineSpec.from_manifest(data, BATCH, plan=p, rank=r, service=service, service_job="plan")
             for r in range(2)]
    got = [[x for b in batches_of(build_dataset(s)) for x in b] for s in ranks]
    assert [len(g) for g in got] == [p.steps_per_epoch * BATCH] * 2
    assert not set(got[0]) & set(got[1]) and all(len(set(g)) == len(g) for g in got)
    assert N - len(got[0]) - len(got[1]) == p.dropped                  # exactly the plan's remainder


def test_one_rank_reads_everything_once(service, data):
    s = PipelineSpec.from_manifest(data, BATCH, service=service, service_job="one")
    got = [x for b in batches_of(build_dataset(s)) for x in b]
    assert sorted(got) == list(range(N))


def test_same_graph_locally_and_through_the_service(service, data):
    """The batches' structure (features, label; dtypes and shapes) does not depend on where they were made."""
    local = PipelineSpec.from_manifest(data, BATCH)
    remote = local.with_(service=service, service_job="same")
    assert build_dataset(local).element_spec == build_dataset(remote).element_spec


def test_describe_says_what_runs_where_and_why(data):
    s = PipelineSpec.from_manifest(data, BATCH, num_shards=2, shard_index=1, service="grpc://127.0.0.1:5050",
                                   service_job="chk")
    text = describe(s)
    for part in ("workers", "ShardingPolicy.DYNAMIC", "job=chk-shard1of2", "compression=none", "fast link",
                 "rebatch", "equal steps on every rank", "shard(2, 1) of each file"):
        assert part in text, part


@pytest.mark.parametrize("argv, rc, out", [
    (["--service", "grpc://10.0.0.5:5050", "--service-job", "chk", "--ranks", "2", "--rank", "1"], 0,
     "job=chk-shard1of2"),
    (["--service", "10.0.0.5:5050"], 2, "'10.0.0.5:5050'"),
    (["--service", "grpc://10.0.0.5:5050", "--resumable"], 2, "resumable=True enters one global order"),
])
def test_explain_cli(data, capsys, argv, rc, out):
    from converters.cli import main

    assert main(["pipeline", "explain", str(data), "--batch-size", "32", *argv]) == rc
    captured = capsys.readouterr()
    assert out in (captured.out if rc == 0 else captured.err)
