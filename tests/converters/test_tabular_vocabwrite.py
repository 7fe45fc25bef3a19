"""converters.tabular.vocabwrite: the vocabulary file and the sorted lookup table streamed from merged counts,
against a plain reading of the definition (ids 1..V by descending count, ties by ascending bytes)."""
from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from converters.tabular.vocab import select, sort_key, vocab_bytes
from converters.tabular.vocabwrite import count_histogram, write_vocabulary


def merged_of(counts: dict[bytes, int], chunk: int):
    """``merge_runs``'s shape: ascending values with their counts, ``chunk`` at a time."""
    values = sorted(counts)
    v = np.array(values, dtype="S8") if values else np.zeros(0, "S8")
    c = np.array([counts[x] for x in values], np.int64)

    def merged():
        for a in range(0, v.size, chunk):
            yield v[a:a + chunk], c[a:a + chunk]
    return merged


def reference(counts: dict[bytes, int], min_count: int) -> list[bytes]:
    return [v for v, n in sorted(counts.items(), key=lambda kv: (-kv[1], kv[0])) if n >= min_count]


def write(tmp_path, counts, min_count, chunk):
    keys, ids = [], []
    path = str(tmp_path / "vocab.txt")
    vf = write_vocabulary(merged_of(counts, chunk), min_count, path, lambda k, i: (keys.append(k), ids.append(i)))
    k = np.concatenate(keys) if keys else np.zeros(0, np.uint64)
    i = np.concatenate(ids) if ids else np.zeros(0, np.uint32)
    return vf, open(path, "rb").read(), k, i


values = st.binary(min_size=1, max_size=8).filter(lambda b: b"\n" not in b and not b.endswith(b"\0")
                                                     and not b.endswith(b"\r"))


@settings(max_examples=60, deadline=None)
@given(counts=st.dictionaries(values, st.integers(1, 6), max_size=300), min_count=st.integers(1, 3),
       chunk=st.integers(1, 64))
def test_file_and_table_are_the_definitions(tmp_path_factory, counts, min_count, chunk):
    tmp = tmp_path_factory.mktemp("v")
    vf, data, keys, ids = write(tmp, counts, min_count, chunk)
    want = reference(counts, min_count)
    assert data == (b"\n".join(want) + b"\n" if want else b"")
    assert (vf.size, vf.nbytes, vf.distinct) == (len(want), len(data), len(counts))
    assert np.all(keys[1:] > keys[:-1])                    # the table: keys ascending
    by_key = dict(zip(keys.tolist(), ids.tolist()))
    assert by_key == {int(sort_key(np.array([v], "S8"))[0]): n + 1 for n, v in enumerate(want)}


def test_it_agrees_with_the_in_memory_selection(tmp_path):
    rng = np.random.default_rng(3)
    counts = {b"%x" % v: 0 for v in range(1)}
    counts.clear()
    for v in (rng.zipf(1.2, 50_000) % 20_000):
        counts[b"%07x" % v] = counts.get(b"%07x" % v, 0) + 1
    for min_count in (1, 2, 5):
        _, data, _, _ = write(tmp_path, counts, min_count, 997)
        chosen, _ = select(merged_of(counts, 997)(), min_count)
        assert data == vocab_bytes(chosen)


def test_the_histogram_has_one_entry_per_count(tmp_path):
    counts = {b"a": 3, b"b": 1, b"c": 3, b"d": 2, b"e": 1}
    c, n, nbytes, distinct = count_histogram(merged_of(counts, 2), 2)
    assert c.tolist() == [3, 2] and n.tolist() == [2, 1] and nbytes.tolist() == [4, 2] and distinct == 5


@pytest.mark.parametrize("min_count", [1, 4])
def test_nothing_kept_writes_an_empty_file(tmp_path, min_count):
    vf, data, keys, _ = write(tmp_path, {b"x": 1, b"y": 2} if min_count > 1 else {}, min_count, 8)
    assert data == b"" and vf.size == 0 and keys.size == 0
