"""Window arithmetic of the text job against ``text.packing`` itself: payloads computed chunk by chunk add
up to the serialized sizes of ``Packer``'s windows, and pass 2's window makers cut the same windows."""
from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from converters.text.packing import Packer, PackSpec, insert_eod, pack_documents
from converters.text.windows import (
    document_payloads,
    document_windows,
    packed_windows,
    stream_payloads,
)
from converters.tfrecord.examples import varint_lengths

docs = st.lists(st.lists(st.sampled_from([0, 1, 127, 128, 300, 16383, 16384, 70000]), max_size=30), max_size=25)


def _packer_windows(lengths, ids, spec):
    p = Packer(spec)
    out = [p.add(ids, lengths), p.finish()]
    w = np.concatenate([o.windows for o in out])
    m = None if not spec.masked else np.concatenate([o.mask for o in out])
    return w, m


def _split(n, cuts):
    cuts = sorted({c for c in cuts if 0 < c < n})
    return list(zip([0] + cuts, cuts + [n]))


@settings(max_examples=150, deadline=None)
@given(docs, st.integers(1, 12), st.lists(st.integers(0, 25), max_size=4), st.booleans())
def test_partial_payloads_add_up_to_packer_windows(doc_ids, seq_len, cuts, pad_last):
    lengths = np.array([len(d) for d in doc_ids], np.int64)
    ids = np.array([t for d in doc_ids for t in d], np.int64)
    spec = PackSpec(seq_len=seq_len, eod_id=50000, pad_last=pad_last)
    w = spec.window
    windows, _ = _packer_windows(lengths, ids, spec)
    # payloads chunk by chunk (chunks = runs of documents), partial windows merged as the planner does
    total = np.zeros(int((lengths.sum() + lengths.size) // w) + 1, np.int64)
    offset = 0
    for a, b in _split(lengths.size, cuts):
        t0, t1 = int(lengths[:a].sum()), int(lengths[:b].sum())
        p = stream_payloads(ids[t0:t1], lengths[a:b], spec.eod_id, offset, w)
        first = offset // w
        total[first:first + p.size] += p
        offset += (t1 - t0) + (b - a)
    expect = varint_lengths(windows).sum(axis=1)
    n_full = offset // w
    assert total[:n_full].tolist() == expect[:n_full].tolist()
    if pad_last and offset % w:
        assert total[n_full] + (w - offset % w) * int(varint_lengths(spec.pad_id)) == expect[n_full]


@settings(max_examples=150, deadline=None)
@given(docs, st.integers(1, 12), st.integers(1, 6))
def test_document_payloads_and_windows_match_pack_documents(doc_ids, seq_len, max_rows):
    lengths = np.array([len(d) for d in doc_ids], np.int64)
    ids = np.array([t for d in doc_ids for t in d], np.int64)
    spec = PackSpec(seq_len=seq_len, eod_id=3, no_cross_doc=True, pad_id=200)
    ref = pack_documents(ids, lengths, spec)
    assert document_payloads(ids, lengths, spec).tolist() == varint_lengths(ref.windows).sum(axis=1).tolist()
    n = len(ref)
    for lo, hi in [(0, n), (n // 3, n - n // 4), (n - 1, n)]:
        lo = max(lo, 0)
        got = list(document_windows(ids, lengths, spec, lo, hi, max_rows=max_rows))
        w = np.concatenate([g[0] for g in got]) if got else np.zeros((0, spec.window), np.int64)
        m = np.concatenate([g[1] for g in got]) if got else np.zeros((0, spec.window), np.int64)
        assert w.tolist() == ref.windows[lo:hi].tolist() and m.tolist() == ref.mask[lo:hi].tolist()


@settings(max_examples=100, deadline=None)
@given(docs, st.integers(1, 9), st.lists(st.integers(0, 200), max_size=5), st.integers(1, 4))
def test_packed_windows_cut_like_the_packer(doc_ids, seq_len, cuts, max_rows):
    lengths = np.array([len(d) for d in doc_ids], np.int64)
    ids = np.array([t for d in doc_ids for t in d], np.int64)
    spec = PackSpec(seq_len=seq_len, eod_id=9, pad_last=True)
    windows, mask = _packer_windows(lengths, ids, spec)
    p = Packer(spec)
    stream = np.concatenate([p.add(ids, lengths).windows.ravel(), p._carry])  # the whole stream
    segments = [stream[a:b] for a, b in _split(stream.size, cuts)]
    got = list(packed_windows(segments, spec.window, spec.pad_id, max_rows=max_rows))
    w = np.concatenate([g[0] for g in got]) if got else np.zeros((0, spec.window), np.int64)
    assert w.tolist() == windows.tolist()
    masks = [g[1] if g[1] is not None else np.ones(g[0].shape, np.int64) for g in got]
    assert (np.concatenate(masks) if masks else np.zeros((0, spec.window))).tolist() == mask.tolist()


@settings(max_examples=100, deadline=None)
@given(docs)
def test_insert_eod_is_every_document_then_its_eod(doc_ids):
    """The one EOD insertion (the local packer's and the two-pass job's), also on the jobs' uint16/uint32 ids."""
    lengths = np.array([len(d) for d in doc_ids], np.int64)
    ids = np.array([t for d in doc_ids for t in d], np.int64)
    expected = [t for d in doc_ids for t in [*d, 7]]
    assert insert_eod(ids, lengths, 7).tolist() == expected
    assert insert_eod(ids.astype(np.uint32), lengths, 7).tolist() == expected
    assert insert_eod(ids.astype(np.uint32), lengths, 7).dtype == np.int64
