"""converters.packing: lossless packing, window counts, batch-split invariance, padded modes."""
from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from converters.text.packing import Packer, PackSpec, insert_eod, pack_documents

EOD = 256

docs_st = st.lists(st.lists(st.integers(0, 255), min_size=0, max_size=40), min_size=0, max_size=25)


def _flat(docs):
    ids = np.array([t for d in docs for t in d], dtype=np.int64)
    return ids, np.array([len(d) for d in docs], dtype=np.int64)


def _run(docs, spec, splits):
    """Pack docs fed in batches cut at ``splits``; return (windows, masks, packer)."""
    p = Packer(spec)
    outs, masks = [], []
    bounds = [0] + sorted(set(s % (len(docs) + 1) for s in splits)) + [len(docs)]
    for a, b in zip(bounds, bounds[1:]):
        ids, lens = _flat(docs[a:b])
        r = p.add(ids, lens)
        outs.append(r.windows)
        masks.append(r.mask)
    r = p.finish()
    outs.append(r.windows)
    masks.append(r.mask)
    w = np.concatenate(outs) if outs else np.zeros((0, spec.window), np.int64)
    m = None if masks[0] is None else np.concatenate(masks)
    return w, m, p


@settings(max_examples=200, deadline=None)
@given(docs=docs_st, seq_len=st.integers(1, 17), splits=st.lists(st.integers(0, 30), max_size=4))
def test_packed_is_lossless_except_counted_tail(docs, seq_len, splits):
    spec = PackSpec(seq_len=seq_len, eod_id=EOD)
    w, m, p = _run(docs, spec, splits)
    assert m is None
    assert w.dtype == np.int64 and w.shape[1] == seq_len + 1
    stream = [t for d in docs for t in d + [EOD]]
    total = len(stream)
    assert w.shape[0] == total // (seq_len + 1) == p.windows
    assert p.tokens_dropped == total % (seq_len + 1)
    assert p.tokens + p.tokens_dropped == total
    assert p.documents == len(docs)
    # decoding windows in order, dropping EOD ids, gives the documents' concatenation minus the dropped tail
    decoded = [t for t in w.ravel().tolist() if t != EOD]
    kept = [t for t in stream[: total - p.tokens_dropped] if t != EOD]
    assert decoded == kept
    assert w.ravel().tolist() == stream[: w.size]


@settings(max_examples=150, deadline=None)
@given(docs=docs_st, seq_len=st.integers(1, 17), splits=st.lists(st.integers(0, 30), max_size=4))
def test_output_independent_of_batch_splits(docs, seq_len, splits):
    spec = PackSpec(seq_len=seq_len, eod_id=EOD)
    w1, _, _ = _run(docs, spec, [])
    w2, _, _ = _run(docs, spec, splits)
    np.testing.assert_array_equal(w1, w2)


@settings(max_examples=150, deadline=None)
@given(docs=docs_st, seq_len=st.integers(1, 17), splits=st.lists(st.integers(0, 30), max_size=4))
def test_no_cross_doc_windows_hold_one_document(docs, seq_len, splits):
    spec = PackSpec(seq_len=seq_len, eod_id=EOD, pad_id=999, no_cross_doc=True)
    w, m, p = _run(docs, spec, splits)
    width = seq_len + 1
    assert m is not None and m.shape == w.shape
    assert w.shape[0] == sum(-(-(len(d) + 1) // width) for d in docs) == p.windows
    assert p.tokens_dropped == 0
    assert p.tokens == sum(len(d) + 1 for d in docs) == int(m.sum())
    assert p.padding == m.size - int(m.sum())
    assert np.all(w[m == 0] == 999)
    # real tokens, in order, are the EOD-terminated documents; each window ends a doc only at its last real id
    assert w[m == 1].tolist() == [t for d in docs for t in d + [EOD]]
    row = 0
    for d in docs:
        k = -(-(len(d) + 1) // width)
        got = w[row:row + k][m[row:row + k] == 1].tolist()
        assert got == d + [EOD]
        row += k


@pytest.mark.parametrize("n_tokens, seq_len, expect_windows, expect_pad", [
    (0, 4, 0, 0),        # nothing: no window
    (4, 4, 1, 0),        # 4 ids + EOD = 5 = exactly one window
    (5, 4, 2, 4),        # 6 ids -> one full window + 1 id padded with 4
    (1, 8, 1, 7),
])
def test_pad_last(n_tokens, seq_len, expect_windows, expect_pad):
    spec = PackSpec(seq_len=seq_len, eod_id=EOD, pad_last=True)
    p = Packer(spec)
    docs = [list(range(n_tokens))] if n_tokens else []
    ids, lens = _flat(docs)
    a = p.add(ids, lens)
    b = p.finish()
    w = np.concatenate([a.windows, b.windows])
    m = np.concatenate([a.mask, b.mask])
    assert w.shape[0] == expect_windows
    assert p.padding == expect_pad == m.size - int(m.sum())
    assert p.tokens_dropped == 0
    assert w[m == 1].tolist() == [t for d in docs for t in d + [EOD]]


def test_insert_eod_and_pack_documents_small():
    ids = np.array([1, 2, 3, 4, 5], np.int32)
    lens = np.array([2, 0, 3])
    assert insert_eod(ids, lens, 9).tolist() == [1, 2, 9, 9, 3, 4, 5, 9]
    p = pack_documents(ids, lens, PackSpec(seq_len=2, eod_id=9, pad_id=0, no_cross_doc=True))
    assert p.windows.tolist() == [[1, 2, 9], [9, 0, 0], [3, 4, 5], [9, 0, 0]]
    assert p.mask.tolist() == [[1, 1, 1], [1, 0, 0], [1, 1, 1], [1, 0, 0]]


def test_insert_eod_rejects_mismatched_lengths():
    with pytest.raises(ValueError, match="lengths sum to 3"):
        insert_eod(np.arange(4), np.array([3]), 9)


@pytest.mark.parametrize("kwargs, match", [
    ({"seq_len": 0, "eod_id": 1}, "seq_len must be a positive integer, got 0"),
    ({"seq_len": 2.5, "eod_id": 1}, "seq_len must be a positive integer, got 2.5"),
    ({"seq_len": 8, "eod_id": -1}, "eod_id must be >= 0, got -1"),
    ({"seq_len": 8, "eod_id": 1, "pad_id": -2}, "pad_id must be >= 0, got -2"),
    ({"seq_len": 8, "eod_id": 1, "mask_name": "mask"}, "mask_name must be"),
])
def test_packspec_validation(kwargs, match):
    with pytest.raises(ValueError, match=match):
        PackSpec(**kwargs)


def test_packspec_defaults():
    s = PackSpec(seq_len=8, eod_id=5)
    assert s.pad_id == 5 and s.window == 9 and not s.masked
    assert PackSpec(seq_len=8, eod_id=5, pad_last=True).masked
    assert PackSpec(seq_len=8, eod_id=5, no_cross_doc=True).masked


def test_add_after_finish_raises():
    p = Packer(PackSpec(seq_len=2, eod_id=9))
    p.finish()
    with pytest.raises(RuntimeError):
        p.add(np.zeros(0, np.int64), np.zeros(0, np.int64))


@pytest.mark.parametrize("max_windows", [1, 2, 3, 1000])
def test_add_chunks_bounds_windows_and_equals_add(max_windows):
    spec = PackSpec(seq_len=7, eod_id=EOD, no_cross_doc=True)
    docs = [list(range(n)) for n in (0, 3, 20, 1, 8, 30, 2)]
    ids, lens = _flat(docs)
    whole = Packer(spec).add(ids, lens)
    p = Packer(spec)
    parts = list(p.add_chunks(ids, lens, max_windows))
    for part in parts:  # at most max_windows, unless one document alone needs more
        assert len(part) <= max(max_windows, 5)
    assert np.array_equal(np.concatenate([q.windows for q in parts]), whole.windows)
    assert np.array_equal(np.concatenate([q.mask for q in parts]), whole.mask)
    assert p.documents == len(docs)


def test_window_footprint():
    from converters.text.packing import window_footprint

    record, working = window_footprint(PackSpec(seq_len=99, eod_id=256, no_cross_doc=True), 257)
    assert record == 100 * 2 + 100 + 64  # ids < 16384: 2-byte varints; mask 1 byte each
    assert working == 2 * 100 * 8 * 2 + record
