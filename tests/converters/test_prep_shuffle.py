"""converters.prep.keys / records / shuffle: the keyed permutation, record gathering, and the external bucket
shuffle (same order whatever the memory budget, batching or bucket count; nothing lost; temp files removed)."""
from __future__ import annotations

import os

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from converters.prep.keys import mix64, record_keys
from converters.prep.records import take_records
from converters.prep.shuffle import WriteShuffleOptions, ShuffleSink


class ListWriter:
    """Collects what the sink writes (a stand-in for ShardSetWriter: shards of at most ``per_shard``)."""

    def __init__(self, per_shard: int = 1 << 62):
        self.data, self.lengths, self.per_shard, self.total = [], [], per_shard, 0

    def write(self, framed, lengths, labels=None):
        self.data.append(bytes(np.asarray(framed, np.uint8)))
        self.lengths.append(np.asarray(lengths))
        self.total += len(lengths)

    def shard_records(self):
        full, rest = divmod(self.total, self.per_shard)
        return [self.per_shard] * full + ([rest] if rest else [])

    def records(self):
        data = np.frombuffer(b"".join(self.data), np.uint8)
        lengths = np.concatenate(self.lengths) if self.lengths else np.zeros(0, np.int64)
        offs = np.concatenate([[0], np.cumsum(lengths)])
        return [bytes(data[offs[i]:offs[i + 1]]) for i in range(len(lengths))]


def records(n, seed=0):
    rng = np.random.default_rng(seed)
    return [rng.integers(0, 256, rng.integers(1, 40), dtype=np.uint8).tobytes() + i.to_bytes(4, "little")
            for i in range(n)]


def shuffled(recs, seed, memory=1 << 30, batches=1, expected=None, labels=None, per_shard=1 << 62, tmp=None):
    w = ListWriter(per_shard)
    opts = WriteShuffleOptions(seed=seed, memory=memory)
    with ShuffleSink(w, opts, tmp_root=str(tmp), expected_bytes=expected) as sink:
        for part in np.array_split(np.arange(len(recs)), batches):
            if len(part):
                chunk = [recs[i] for i in part]
                sink.write(np.frombuffer(b"".join(chunk), np.uint8), [len(r) for r in chunk],
                           None if labels is None else labels[part])
        report = sink.finish()
        tmp_dir = sink.dir
    assert not os.path.exists(tmp_dir)
    return w.records(), report


def test_keys_are_a_bijection_and_depend_on_seed_and_purpose():
    idx = np.arange(200_000)
    k = record_keys(7, idx)
    assert len(np.unique(k)) == len(idx)
    assert not np.array_equal(k, record_keys(8, idx))
    assert not np.array_equal(k, record_keys(7, idx, "balance"))
    assert np.array_equal(k[1000:2000], record_keys(7, idx[1000:2000]))   # a record's key is its own
    with pytest.raises(ValueError, match="seed"):
        record_keys(-1, idx)


@settings(max_examples=50, deadline=None)
@given(st.lists(st.integers(0, 2**64 - 1), min_size=1, max_size=50, unique=True))
def test_mix64_is_injective(xs):
    assert len(set(mix64(np.array(xs, np.uint64)).tolist())) == len(xs)


def test_take_records_reorders_and_subsets():
    recs = [b"a", b"bcd", b"", b"efgh"]
    data = np.frombuffer(b"".join(recs), np.uint8)
    out, lens = take_records(data, [1, 3, 0, 4], [3, 0, 3])
    assert bytes(out) == b"efgh" + b"a" + b"efgh" and lens.tolist() == [4, 1, 4]


@pytest.mark.parametrize("lengths", [[1, 3, 0, 5], [1, -1, 2]])
def test_take_records_refuses_lengths_past_the_data(lengths):
    """The compiled copy does not check bounds: lengths that do not fit the data are refused before it."""
    with pytest.raises(ValueError, match="add up to at most the data's 8 bytes"):
        take_records(np.zeros(8, np.uint8), lengths, [0])


@pytest.mark.parametrize("memory, batches, expected", [
    (1 << 30, 1, None),          # one bucket level, everything in memory
    (1 << 20, 13, 1 << 22),      # many buckets from an estimate
    (1 << 20, 5, None),          # no estimate: oversized buckets are split again while gathering
    (1 << 20, 40, 10),           # a far too small estimate: one bucket, split again
])
def test_same_permutation_whatever_the_memory_and_batching(tmp_path, memory, batches, expected):
    recs = records(30_000)
    ref, _ = shuffled(recs, 5, tmp=tmp_path / "a")
    got, report = shuffled(recs, 5, memory=memory, batches=batches, expected=expected, tmp=tmp_path / "b")
    assert got == ref
    assert sorted(got) == sorted(recs) and got != recs
    assert report["records"] == len(recs) and report["seed"] == 5


def test_another_seed_another_order_and_rank_correlation_near_zero(tmp_path):
    recs = records(40_000)
    a, ra = shuffled(recs, 1, tmp=tmp_path)
    b, _ = shuffled(recs, 2, tmp=tmp_path)
    assert a != b and sorted(a) == sorted(b)
    assert abs(ra["rank_correlation"]) < 0.02
    _, unshuffled = shuffled(recs[:1], 1, tmp=tmp_path)
    assert unshuffled["rank_correlation"] == 0.0


def test_label_mix_of_a_label_sorted_input(tmp_path):
    recs = records(20_000)
    labels = (np.arange(20_000) >= 15_000).astype(np.float32)     # 75 % zeros, then 25 % ones
    _, report = shuffled(recs, 3, labels=labels, per_shard=2_000, tmp=tmp_path)
    assert report["label_mix_shards"] == 10
    assert report["label_mix_max_deviation"] < 0.05                # unshuffled, shards would be 0 % or 100 %


def test_temporary_files_are_removed_on_error(tmp_path):
    class Broken(ListWriter):
        def write(self, framed, lengths, labels=None):
            raise OSError(28, "No space left on device")

    sink = ShuffleSink(Broken(), WriteShuffleOptions(seed=1, memory=1 << 20), tmp_root=str(tmp_path))
    with pytest.raises(OSError):
        with sink:
            sink.write(np.zeros(10, np.uint8), [5, 5])
            sink.finish()
    assert os.listdir(tmp_path) == []


@pytest.mark.parametrize("kw, match", [({"seed": -1}, "seed"), ({"seed": 1, "memory": 1000}, "memory")])
def test_options_are_validated(kw, match):
    with pytest.raises(ValueError, match=match):
        WriteShuffleOptions(**kw)
