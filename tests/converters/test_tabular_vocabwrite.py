"""converters.tabular.vocabwrite: the vocabulary file and the sorted lookup table streamed from merged counts,
against a plain reading of the definition (ids 1..V by descending count, ties by descending bytes)."""
from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from converters.tabular.vocab import sort_key
from converters.tabular.vocabwrite import count_histogram, write_vocabulary


def merged_of(counts: dict[bytes, int], chunk: int, dtype: str = "S8"):
    """``merge_runs``'s shape: ascending values with their counts, ``chunk`` at a time."""
    values = sorted(counts)
    v = np.array(values, dtype=dtype) if values else np.zeros(0, dtype)
    c = np.array([counts[x] for x in values], np.int64)

    def merged():
        for a in range(0, v.size, chunk):
            yield v[a:a + chunk], c[a:a + chunk]
    return merged


def reference(counts: dict[bytes, int], min_count: int) -> list[bytes]:
    ranked = sorted(counts.items(), key=lambda kv: (kv[1], kv[0]), reverse=True)
    return [v for v, n in ranked if n >= min_count]


def write(tmp_path, counts, min_count, chunk, dtype="S8"):
    keys, ids = [], []
    path = str(tmp_path / "vocab.txt")
    vf = write_vocabulary(merged_of(counts, chunk, dtype), min_count, path,
                          lambda k, i: (keys.append(k), ids.append(i)))
    k = np.concatenate(keys) if keys else np.zeros(0, np.uint64)
    i = np.concatenate(ids) if ids else np.zeros(0, np.uint32)
    return vf, open(path, "rb").read(), k, i


def servable(longest: int):
    return st.binary(min_size=1, max_size=longest).filter(lambda b: b"\n" not in b and not b.endswith(b"\0")
                                                           and not b.endswith(b"\r"))


@pytest.mark.parametrize("longest", [8, 20])
@settings(max_examples=50, deadline=None)
@given(draw=st.data())
def test_file_and_table_are_the_definitions(tmp_path_factory, longest, draw):
    """The table's keys ascend: uint64 keys when every kept value has at most 8 bytes (rarer longer ones do not
    count), else the kept values at the longest kept one's width."""
    counts = draw.draw(st.dictionaries(servable(longest), st.integers(1, 6), max_size=300))
    min_count, chunk = draw.draw(st.integers(1, 3)), draw.draw(st.integers(1, 64))
    vf, data, keys, ids = write(tmp_path_factory.mktemp("v"), counts, min_count, chunk, f"S{longest}")
    want = reference(counts, min_count)
    assert data == (b"\n".join(want) + b"\n" if want else b"")
    assert (vf.size, vf.nbytes, vf.distinct) == (len(want), len(data), len(counts))
    assert vf.width == max(map(len, want), default=0)
    assert np.all(keys[1:] > keys[:-1])
    if vf.width <= 8:
        assert keys.dtype == np.uint64
        want_keys = [int(sort_key(np.array([v], "S8"))[0]) for v in want]
    else:
        assert keys.dtype == np.dtype(f"S{vf.width}")
        want_keys = want
    assert dict(zip(keys.tolist(), ids.tolist())) == {k: n + 1 for n, k in enumerate(want_keys)}


def test_zipf_counts_over_many_chunks(tmp_path):
    rng = np.random.default_rng(3)
    counts: dict[bytes, int] = {}
    for v in (rng.zipf(1.2, 50_000) % 20_000):
        counts[b"%07x" % v] = counts.get(b"%07x" % v, 0) + 1
    for min_count in (1, 2, 5):
        vf, data, _, _ = write(tmp_path, counts, min_count, 997)
        assert data.splitlines() == reference(counts, min_count) and vf.width == 7


def test_the_histogram_has_one_entry_per_count(tmp_path):
    counts = {b"a": 3, b"b": 1, b"c": 3, b"d": 2, b"e": 1}
    c, n, nbytes, distinct, width = count_histogram(merged_of(counts, 2), 2)
    assert c.tolist() == [3, 2] and n.tolist() == [2, 1] and nbytes.tolist() == [4, 2] and distinct == 5
    assert width == 1


@pytest.mark.parametrize("min_count", [1, 4])
def test_nothing_kept_writes_an_empty_file(tmp_path, min_count):
    vf, data, keys, _ = write(tmp_path, {b"x": 1, b"y": 2} if min_count > 1 else {}, min_count, 8)
    assert data == b"" and vf.size == 0 and keys.size == 0


# (values, their counts as a function of the value's index): a histogram by bincount and a radix sort by count
# (few, small counts), by a sort (counts far past the values' number: a Terabyte day's most frequent values),
# and more distinct counts than 16 bits hold
@pytest.mark.parametrize("n, count_of", [
    (5_000, lambda i: 1 + i % 7),
    (5_000, lambda i: 10 ** 12 + i % 5 if i % 3 else 1),
    (70_000, lambda i: i + 1),
])
def test_ids_whatever_the_counts(tmp_path, n, count_of):
    counts = {b"%06x" % (i * 7919 % (1 << 24)): count_of(i) for i in range(n)}
    vf, data, keys, ids = write(tmp_path, counts, 2, 4096)
    want = reference(counts, 2)
    assert data.splitlines() == want and vf.size == len(want)
    assert dict(zip(keys.tolist(), ids.tolist())) == {int(sort_key(np.array([v], "S8"))[0]): k + 1
                                                       for k, v in enumerate(want)}
