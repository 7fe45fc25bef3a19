"""pipeline.plan.readplan: the built-in rule, explicit options over it, a stored tuning result, and the tuning
candidates — every one of which must yield what the spec promises (same records, uniform batches, the
same order every time; one record order on every rank under a record-level shard)."""
from __future__ import annotations

from collections import Counter

import pytest
from pipeline_data import batches_of, labels_of, write_indexed_set

from converters.libsvm.options import libsvm_schema
from pipeline import PipelineSpec, build_dataset
from pipeline.plan.readplan import (
    AUTOTUNE,
    ReadConfig,
    candidates,
    chunk_for,
    data_fingerprint,
    read_plan,
    rule_config,
    tunable,
)
from pipeline.plan.tunestore import TuneLookup

N = 2000
B = 64


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    d = tmp_path_factory.mktemp("indexed")
    write_indexed_set(d, N, shard_bytes=32 << 10)   # 6 files of ~330 records
    return str(d)


def _spec(data, cores=2, **kw):
    """A spec that claims ~2 KB records, so the candidates' chunks (256-1024 records) cut inside files."""
    spec = PipelineSpec.from_manifest(data, B, cores=cores, tune="off", **kw)
    return spec.with_(total_bytes=spec.records * 2000)


def _synthetic(files=8, cores=2, rb=315, **kw):
    return PipelineSpec(schema=libsvm_schema(3), batch_size=512, files=tuple(f"f{i}" for i in range(files)),
                        cores=cores, records=400_000, total_bytes=400_000 * rb, **kw)


@pytest.mark.parametrize("kw,read,k,chunk", [
    ({}, "interleave", 2, 3072),                                   # 1 MiB chunks, as many files as cores
    ({"cores": 4}, "interleave", 4, 3072),
    ({"files": 1}, "sequential", 1, 3072),
    ({"cores": 1}, "sequential", 1, 3072),
    ({"shuffle_buffer": 100}, "sequential", 1, 0),                 # records one by one: no chunks
    ({"num_shards": 2}, "sequential", 1, 3072),
    ({"rb": 16384}, "parallel_reads", 4, 0),
    ({"rb": 16384, "files": 40, "cores": 16}, "parallel_reads", 16, 0),
])
def test_rule_table(kw, read, k, chunk):
    cfg, why = rule_config(_synthetic(**kw))
    assert (cfg.read, cfg.parallelism, cfg.chunk_records) == (read, k, chunk)
    assert cfg.parse_parallelism == AUTOTUNE and why


@pytest.mark.parametrize("rb,batch,want", [(315, 512, 3072), (315, 4096, 0), (2000, 64, 512), (100, 512, 10240)])
def test_chunk_for_is_a_multiple_of_the_batch(rb, batch, want):
    spec = _synthetic(rb=rb).with_(batch_size=batch)
    assert chunk_for(spec, 1 << 20) == want
    assert want % batch == 0


def test_explicit_options_apply_over_the_rule():
    plan = read_plan(_synthetic(buffer_size=1 << 20, parse_parallelism=1, num_parallel_reads=3))
    assert plan.source == "rule"
    assert (plan.config.parallelism, plan.config.buffer_size, plan.config.parse_parallelism) == (3, 1 << 20, 1)
    assert "as asked" in plan.why and "buffer_size=1048576" in plan.why
    asked = read_plan(_synthetic(read="sequential"))
    assert asked.source == "asked" and asked.config == ReadConfig("sequential")
    inter = read_plan(_synthetic(read="interleave", chunk_records=0))
    assert inter.config.chunk_records == 512       # per-file batches, rebatched: batches stay uniform


def test_a_matching_tuning_result_wins_over_the_rule(data):
    spec = _spec(data).with_(tune="stored")
    winner = ReadConfig("sequential", chunk_records=256, parse_parallelism=1)
    fp = tuple(sorted(data_fingerprint(spec).items()))
    tuned = spec.with_(tuning=TuneLookup(winner, "tuned on this machine", fp))
    plan = read_plan(tuned)
    assert plan.source == "tuned" and plan.config == winner and plan.why == "tuned on this machine"
    # explicit options still apply over it
    assert read_plan(tuned.with_(buffer_size=1 << 20)).config.buffer_size == 1 << 20
    # ... and it is not used where it was not measured: another batch size, shuffle, a fixed read
    for other in (tuned.with_(batch_size=32), tuned.with_(shuffle_buffer=10), tuned.with_(read="interleave")):
        assert read_plan(other).source != "tuned"
    assert "other data or options" in read_plan(tuned.with_(batch_size=32)).why
    assert labels_of(build_dataset(tuned)) == list(range(N))    # the sequential winner really is built


def test_data_fingerprint_changes_with_what_changes_the_winner(data):
    spec = _spec(data)
    fp = data_fingerprint(spec)
    assert fp == data_fingerprint(spec.with_(epochs=3, seed=5, prefetch=0))
    for other in (spec.with_(batch_size=32), spec.with_(files=spec.files[:2]), spec.with_(parse=False),
                  spec.with_(deterministic=False), spec.with_(num_shards=2), spec.with_(manifest_sha256="0" * 64)):
        assert data_fingerprint(other) != fp
    assert data_fingerprint(spec.with_(manifest_sha256=None)) is None


def test_tunable():
    assert tunable(_synthetic()) is None
    assert "shuffle" in tunable(_synthetic(shuffle_buffer=10))
    assert "asked" in tunable(_synthetic(read="sequential"))
    assert candidates(_synthetic(shuffle_buffer=10)) == []


@pytest.mark.parametrize("kw", [{}, {"cores": 4}, {"num_shards": 2}, {"parse": False}, {"rb": 16384}])
def test_candidates_start_with_the_rule_and_are_distinct(kw):
    rb = kw.pop("rb", 315)
    spec = _synthetic(rb=rb, **kw)
    cands = candidates(spec)
    assert cands[0] == rule_config(spec)[0]
    assert len(cands) == len(set(cands)) == len({c.label() for c in cands}) and 4 <= len(cands) <= 14
    if spec.num_shards > 1:
        assert {c.read for c in cands} == {"sequential"}
    else:
        assert "interleave" in {c.read for c in cands}
    if not spec.parse:
        assert {c.parse_parallelism for c in cands} == {AUTOTUNE}
    quick = candidates(spec, quick=True)
    assert quick[0] == cands[0] and set(quick) <= set(cands) and 2 <= len(quick) <= 4


def _check_uniform_exactly_once(batches, drop=False):
    flat = [x for b in batches for x in b]
    if drop:
        assert all(len(b) == B for b in batches) and len(batches) == N // B
        assert len(set(flat)) == len(flat) == (N // B) * B
    else:
        assert sorted(flat) == list(range(N))
        assert all(len(b) == B for b in batches[:-1]) and 0 < len(batches[-1]) <= B


@pytest.mark.parametrize("cores", [2, 4])
def test_every_candidate_yields_what_the_spec_promises(data, cores):
    spec = _spec(data, cores=cores)
    cands = candidates(spec)
    assert len({c.read for c in cands}) >= 3 and len({c.chunk_records for c in cands}) >= 3
    for c in cands:
        built = spec.with_(**c.options())
        batches = batches_of(build_dataset(built))
        _check_uniform_exactly_once(batches)
        assert batches_of(build_dataset(built)) == batches, c.label()          # the same order every time
        if c.read == "sequential":
            assert [x for b in batches for x in b] == list(range(N)), c.label()  # manifest order
        _check_uniform_exactly_once(batches_of(build_dataset(built.with_(drop_remainder=True))), drop=True)


def test_sharded_candidates_give_every_rank_the_same_records_in_the_same_order(data):
    ranks = 3
    specs = [_spec(data, num_shards=ranks, shard_index=i, equal_steps=False) for i in range(ranks)]
    cands = candidates(specs[0])
    assert {c.read for c in cands} == {"sequential"}
    want = [labels_of(build_dataset(s)) for s in specs]                    # the rule's graphs
    assert sorted(x for w in want for x in w) == list(range(N))
    for c in cands:
        for i, s in enumerate(specs):
            assert labels_of(build_dataset(s.with_(**c.options()))) == want[i], c.label()


def test_parse_off_candidates_yield_serialized_batches(data):
    spec = _spec(data, parse=False, prefetch=0)
    for c in candidates(spec):
        batches = list(build_dataset(spec.with_(**c.options())))
        assert sum(int(b.shape[0]) for b in batches) == N and all(b.dtype.name == "string" for b in batches)


def test_read_config_validation_and_json():
    c = ReadConfig("interleave", 2, 3072, 1, 1 << 20)
    assert ReadConfig.from_json(c.to_json()) == c
    assert c.label() == "interleave×2 chunk=3072 parse=1 buf=1.0 MiB"
    assert c.options() == {"read": "interleave", "num_parallel_reads": 2, "chunk_records": 3072,
                           "parse_parallelism": 1, "buffer_size": 1 << 20}
    for bad in ({"read": "fast"}, {"read": "sequential", "parallelism": 2}, {"read": "interleave", "chunk_records": -1},
                {"read": "interleave", "parse_parallelism": 0}, {"read": "interleave", "parallelism": 1.5}):
        with pytest.raises(ValueError):
            ReadConfig(**bad)
    with pytest.raises(ValueError, match="not a read config"):
        ReadConfig.from_json({"read": "sequential", "turbo": True})


def test_fixture_has_files_longer_than_chunks(data):
    """Guards the fixture the equivalence tests rely on: several files, and chunks that end inside them."""
    spec = _spec(data)
    assert len(spec.files) >= 4 and chunk_for(spec, 512 << 10) < N // len(spec.files)
    assert Counter(labels_of(build_dataset(spec))) == Counter(range(N))
