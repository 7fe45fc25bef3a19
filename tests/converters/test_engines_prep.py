"""Write-time preparation (``--shuffle``, ``--balance``, ``--split-by-label``) on the two-pass core, run
in-process: byte-identical shard sets (per-label parts and group manifest included) and equal manifests to the
local converter with the same options, over a table of inputs and options; the same refusals and errors; and the
planner's bucket cuts (pure)."""
from __future__ import annotations

import os

import numpy as np
import pytest
from engines_data import (
    assert_same_output,
    compressed_libsvm_files,
    libsvm_files,
    spoil,
    text_files,
)

from converters.engines.core import Cutter
from converters.engines.inprocess import run_job
from converters.libsvm.job import LibsvmJob
from converters.engines.prepplan import PartCuts
from converters.engines.scatter import ShuffledPiece
from converters.text.job import TextJob
from converters.libsvm.convert import run as libsvm_local
from converters.libsvm.options import LibsvmOptions
from converters.prep.balance import BalanceOptions
from converters.prep.options import PrepOptions
from converters.prep.shuffle import WriteShuffleOptions
from converters.shardset.options import ShardOutputOptions
from converters.text.convert import run as text_local
from converters.text.options import TextOptions
from converters.util.errors import InputError

MIB = 1 << 20


@pytest.fixture(scope="module")
def inputs(tmp_path_factory):
    d = tmp_path_factory.mktemp("prep-inputs")
    bad = libsvm_files(d / "bad", sizes=(5, 900, 2500), seed=3)
    spoil(bad[2], {3: b"abc 1:1", 400: b"", 1800: b"1 2:1 1:1", 2400: b"1 1:x"})
    zero = libsvm_files(d / "zero", sizes=(300, 200), seed=5)
    spoil(zero[1], {150: b"1 " + b" ".join(b"%d:1" % i for i in range(39))})  # index 0: zero-based
    return {"plain": libsvm_files(d / "plain"), "small": libsvm_files(d / "small", sizes=(5, 40, 60), seed=7),
            "bad": bad, "zero": zero,
            "compressed": compressed_libsvm_files(d / "comp"), "text": text_files(d / "text")}


def _prep(shuffle=None, balance=None, split=False, memory=MIB):
    return PrepOptions(WriteShuffleOptions(shuffle, memory=memory) if shuffle is not None else None,
                       BalanceOptions.parse(balance, 11) if balance else None, split)


def _opts(shard_size=40_000, compression=None, on_error="raise", **kw):
    return LibsvmOptions(39, output=ShardOutputOptions(shard_size=shard_size, compression=compression,
                                                       on_error=on_error), **kw)


LIBSVM_CASES = {
    "shuffle": ("plain", {}, _prep(shuffle=7), {"unit_size": 50_000}),
    "shuffle-memory-64MiB": ("plain", {"shard_size": 1 << 30}, _prep(shuffle=7, memory=64 * MIB), {}),
    "shuffle-records-over-shards": ("small", {"shard_size": 300}, _prep(shuffle=2), {"unit_size": 7_000}),
    "balance-equal": ("plain", {}, _prep(balance="equal"), {"unit_size": 50_000}),
    "balance-rates": ("plain", {"shard_size": 64 << 10}, _prep(balance="0=0.3,1=0.9"), {"unit_size": 64 << 10}),
    "split": ("plain", {"shard_size": 30_000}, _prep(split=True), {"unit_size": 50_000}),
    "balance-shuffle-split-gzip": ("plain", {"compression": "gzip"}, _prep(shuffle=3, balance="equal", split=True),
                                   {"unit_size": 70_000}),
    "bad-skipped-balance-shuffle": ("bad", {"on_error": "skip", "shard_size": 30_000},
                                    _prep(shuffle=5, balance="equal"), {"unit_size": 64 << 10}),
    "bad-skipped-split": ("bad", {"on_error": "skip", "shard_size": 30_000}, _prep(split=True),
                          {"unit_size": 64 << 10}),
    "compressed-balance-split": ("compressed", {"shard_size": 30_000}, _prep(balance="1=0.5", split=True),
                                 {"block_bytes": 20_000}),
    "compressed-shuffle": ("compressed", {"shard_size": 30_000}, _prep(shuffle=1), {"block_bytes": 20_000}),
    "zero-based-shuffle-split": ("zero", {"shard_size": 20_000}, _prep(shuffle=4, split=True), {"unit_size": 30_000}),
}


@pytest.mark.parametrize("case", list(LIBSVM_CASES))
def test_libsvm_same_bytes_as_local(inputs, tmp_path, case):
    key, output, prep, job = LIBSVM_CASES[case]
    opts = _opts(**output)
    local = libsvm_local(inputs[key], tmp_path / "local", opts, workers=1, prep=prep)
    two = run_job(LibsvmJob.create(inputs[key], tmp_path / "two", opts, prep=prep, **job))
    assert_same_output(tmp_path / "local", tmp_path / "two")
    assert two == local and (len(local.shards) > 1 or output.get("shard_size") == 1 << 30)
    if prep.shuffle is not None:
        sh = local.extra["shuffle"]
        assert sh["records"] == local.records and "buckets" not in sh and abs(sh["rank_correlation"]) < 0.1
        assert ("label_mix_max_deviation" in sh) == (not prep.split_by_label)
    assert [p.path for p in local.parts] == (["label=0", "label=1"] if prep.split_by_label else [])
    if prep.balance is not None:
        assert sum(i.skipped.get("sampled_out", 0) for i in local.inputs) > 0
    assert not [n for n in os.listdir(tmp_path / "two") if n.startswith(".tfpipe-tmp")]


def test_a_shuffled_plan_scatters_many_sources_into_many_buckets(inputs, tmp_path):
    """The steps themselves: every unit a scatter source, shards assembled from several buckets each."""
    prep = _prep(shuffle=7)
    job = LibsvmJob.create(inputs["plain"], tmp_path / "o", _opts(shard_size=1 << 20), prep=prep, unit_size=50_000)
    try:
        units = job.units()
        ctx = job.resolve([job.prepass(u) for u in units])
        plan = job.plan([job.pass1(u, ctx) for u in units], [], ctx)
        pieces = [s.pieces[0] for s in plan.shards]
        assert len(plan.scatter) == len(units)  # every unit (each has records) a source
        assert all(isinstance(p, ShuffledPiece) and p.sources == len(plan.scatter) for p in pieces)
        assert max(p.stop - p.first for p in pieces) >= 4  # 1 MiB budget: buckets of at most 256 KiB
        assert sum(t.records for t in plan.scatter) == plan.records == 7505
    finally:
        job.area.cleanup()
        job.area.release()


@pytest.mark.parametrize("sparse", [False, True])
def test_sparse_and_multilabel(tmp_path, sparse):
    from converters.libsvm.synthetic import write_sparse_libsvm

    paths = []
    for k, n in enumerate((5, 700, 1500)):
        p = tmp_path / f"s{k}.libsvm"
        write_sparse_libsvm(p, n, seed=k)
        if not sparse:
            p.write_bytes(p.read_bytes().replace(b"\n1 ", b"\n1,3 ").replace(b"\n0 ", b"\n "))
        paths.append(str(p))
    opts = LibsvmOptions(None, output=ShardOutputOptions(shard_size=9_000), sparse=True, multilabel=not sparse)
    prep = _prep(shuffle=6, split=sparse)
    local = libsvm_local(paths, tmp_path / "local", opts, workers=1, prep=prep)
    two = run_job(LibsvmJob.create(paths, tmp_path / "two", opts, prep=prep, unit_size=20_000))
    assert_same_output(tmp_path / "local", tmp_path / "two")
    assert two == local and len(local.shards) > 2
    if not sparse:  # multi-label lists: no single label to balance or split by, refused as locally
        with pytest.raises(ValueError, match="needs one label per record"):
            LibsvmJob.create(paths, tmp_path / "x", opts, prep=_prep(balance="equal"))
        assert not (tmp_path / "x").exists()


@pytest.mark.parametrize("options, chunk", [
    ({}, 700),
    ({"no_cross_doc": True}, 900),
    ({"pad_last": True, "compression": "gzip"}, 500),
])
def test_text_shuffle_same_bytes_as_local(inputs, tmp_path, options, chunk):
    compression = options.pop("compression", None)
    opts = TextOptions(seq_len=31, output=ShardOutputOptions(shard_size=5000, compression=compression), **options)
    prep = _prep(shuffle=5)
    local = text_local(inputs["text"], str(tmp_path / "local"), opts, workers=1, prep=prep)
    two = run_job(TextJob.create(inputs["text"], tmp_path / "two", opts, chunk_tokens=chunk, prep=prep))
    assert_same_output(tmp_path / "local", tmp_path / "two")
    assert two == local and len(local.shards) > 10 and abs(local.extra["shuffle"]["rank_correlation"]) < 0.1
    with pytest.raises(ValueError, match="text windows have none"):
        TextJob.create(inputs["text"], tmp_path / "x", opts, prep=_prep(split=True))


def test_balance_naming_a_missing_label_fails_as_locally(inputs, tmp_path):
    prep = _prep(balance="7=0.5")
    with pytest.raises(InputError) as local:
        libsvm_local(inputs["plain"], tmp_path / "local", _opts(), workers=1, prep=prep)
    with pytest.raises(InputError) as two:
        run_job(LibsvmJob.create(inputs["plain"], tmp_path / "two", _opts(), prep=prep))
    assert str(two.value) == str(local.value) and two.value.reason == "balance_label"
    assert not (tmp_path / "two").exists()


def test_bad_line_stops_a_prepared_run_as_locally(inputs, tmp_path):
    prep = _prep(shuffle=1, balance="equal", split=True)
    with pytest.raises(InputError) as local:
        libsvm_local(inputs["bad"], tmp_path / "local", _opts(), workers=1, prep=prep)
    with pytest.raises(InputError) as two:
        run_job(LibsvmJob.create(inputs["bad"], tmp_path / "two", _opts(), prep=prep, unit_size=4096))
    assert str(two.value) == str(local.value) and two.value.line == 3
    assert not (tmp_path / "two").exists()


# -- the planner's cuts (pure) -----------------------------------------------------------------------------

def test_part_cuts_buckets_start_at_every_shard_and_stay_under_their_limit():
    rng = np.random.default_rng(0)
    lengths = rng.integers(10, 400, size=5000)
    labels = rng.integers(0, 3, size=5000).astype(np.float32)
    keys = np.arange(5000, dtype=np.uint64) * 7
    cuts = PartCuts(20_000, True, bucket=3_000)
    for a in range(0, 5000, 333):                                   # in batches, as the plan's sort hands them
        cuts.add(lengths[a:a + 333], labels[a:a + 333], keys[a:a + 333])
    assert cuts.names() == ["0", "1", "2"] and cuts.records == 5000
    for b in cuts.order():
        part = cuts.parts[b]
        sel = (labels + np.float32(0)).view(np.uint32) == b
        own, own_keys = lengths[sel], keys[sel]
        alone = Cutter(20_000)
        alone.add(own)
        assert part.cutter.ranges() == alone.ranges()               # each part cut as the split writer cuts it
        starts = part.bucket_starts + [len(own)]
        assert {a for a, _ in part.cutter.ranges()} <= set(part.bucket_starts)
        assert all(own[a:e].sum() <= 3_000 or e - a == 1 for a, e in zip(starts[:-1], starts[1:]))
        assert part.bucket_keys == [int(own_keys[a]) for a in part.bucket_starts]
        assert sum(n for _, n, _, _ in part.shards()) == len(own)
