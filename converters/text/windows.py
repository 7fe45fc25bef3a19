"""Pure window arithmetic for a text job: which token positions form which window, and how many payload bytes
each window's ids take, computed piece by piece so that no task ever holds more than one chunk of tokens.

The packed stream is every document's ids followed by the end-of-document id, all documents of all inputs
concatenated; window ``k`` is positions ``[k * w, (k + 1) * w)`` (``w = seq_len + 1``), exactly as
``text.packing.Packer`` cuts it. A window's serialized length depends only on the varint sizes of its ids, so a
chunk at stream offset ``G`` can compute the partial payloads of the windows it overlaps, and the planner adds
the partials of windows that span chunks. In ``no_cross_doc`` mode each document fills whole windows of its
own (the last one padded), so a chunk's windows are complete by themselves.
"""
from __future__ import annotations

from typing import Iterable, Iterator

import numpy as np

from ..tfrecord.examples import varint_lengths
from .packing import PackSpec, pack_documents

__all__ = ["stream_payloads", "document_payloads", "document_windows", "packed_windows",
           "doc_windows", "window_count"]


def _vlen(v: int) -> int:
    return int(varint_lengths(np.int64(v)))


_SMALL_TABLE = varint_lengths(np.arange(1 << 16)).astype(np.uint8)  # varint bytes of every uint16 id


def _id_bytes(ids: np.ndarray) -> np.ndarray:
    """Varint bytes of each id (uint8): a table lookup for the uint8/uint16 ids of the temporary chunks."""
    ids = np.asarray(ids)
    if ids.dtype in (np.uint8, np.uint16):
        return _SMALL_TABLE[ids]
    return varint_lengths(ids).astype(np.uint8)


class _PayloadPrefix:
    """Payload bytes of the packed stream of some documents (ids, an EOD after each) up to any position,
    without building the stream: prefix sums over the ids plus the EODs before the position."""

    def __init__(self, ids: np.ndarray, lengths: np.ndarray, eod_id: int):
        lengths = np.asarray(lengths, dtype=np.int64)
        self.sums = np.zeros(int(lengths.sum()) + 1, dtype=np.int64)
        np.cumsum(_id_bytes(ids), out=self.sums[1:])
        self.eods = np.cumsum(lengths) + np.arange(lengths.size, dtype=np.int64)  # stream position of each EOD
        self.eod_bytes = _vlen(eod_id)
        self.size = int(self.sums.size - 1 + lengths.size)

    def upto(self, positions: np.ndarray) -> np.ndarray:
        """Payload bytes of stream positions ``[0, p)`` for each ``p``."""
        eods = np.searchsorted(self.eods, positions, side="left")
        return self.sums[positions - eods] + eods * self.eod_bytes


def doc_windows(lengths: np.ndarray, window: int) -> np.ndarray:
    """``no_cross_doc``: windows of each document (its ids + EOD, padded to whole windows)."""
    return -(-(np.asarray(lengths, dtype=np.int64) + 1) // window)


def window_count(stream: int, doc_window_total: int, spec: PackSpec) -> int:
    """Windows of a packed stream of ``stream`` positions (the final partial one only with ``pad_last``), or in
    ``no_cross_doc`` mode ``doc_window_total`` (the sum of ``doc_windows``)."""
    if spec.no_cross_doc:
        return int(doc_window_total)
    return stream // spec.window + int(spec.pad_last and stream % spec.window > 0)


def stream_payloads(ids: np.ndarray, lengths: np.ndarray, eod_id: int, offset: int, window: int) -> np.ndarray:
    """Packed mode: the payload bytes that the stream piece of these documents, starting at stream position
    ``offset``, contributes to each window it overlaps (windows ``offset // window`` onwards, in order)."""
    pre = _PayloadPrefix(ids, lengths, eod_id)
    if pre.size == 0:
        return np.zeros(0, np.int64)
    first, last = offset // window, (offset + pre.size - 1) // window
    inner = np.arange(first + 1, last + 1, dtype=np.int64) * window - offset
    return np.diff(pre.upto(np.concatenate([[0], inner, [pre.size]])))


def document_payloads(ids: np.ndarray, lengths: np.ndarray, spec: PackSpec) -> np.ndarray:
    """``no_cross_doc``: the payload bytes of every window of these documents (padding included)."""
    lengths = np.asarray(lengths, dtype=np.int64)
    if lengths.size == 0:
        return np.zeros(0, np.int64)
    w = spec.window
    pre = _PayloadPrefix(ids, lengths, spec.eod_id)
    rows = doc_windows(lengths, w)
    row_doc = np.repeat(np.arange(lengths.size), rows)
    j = np.arange(int(rows.sum()), dtype=np.int64) - np.repeat(np.cumsum(rows) - rows, rows)
    doc_end = pre.eods + 1
    starts = (doc_end - lengths - 1)[row_doc] + j * w
    ends = np.minimum(starts + w, doc_end[row_doc])
    return pre.upto(ends) - pre.upto(starts) + (w - (ends - starts)) * _vlen(spec.pad_id)


def document_windows(ids: np.ndarray, lengths: np.ndarray, spec: PackSpec, lo: int, hi: int,
                     max_rows: int = 4096) -> Iterator[tuple[np.ndarray, np.ndarray]]:
    """``no_cross_doc``: windows ``[lo, hi)`` of these documents (and their masks), as ``pack_documents``
    makes them, in batches of about ``max_rows`` windows (a batch never splits a document)."""
    lengths = np.asarray(lengths, dtype=np.int64)
    rows = doc_windows(lengths, spec.window)
    row_end = np.cumsum(rows)
    tok_end = np.cumsum(lengths)
    d = int(np.searchsorted(row_end, lo, side="right"))  # first document with a window >= lo
    while d < lengths.size and row_end[d] - rows[d] < hi:
        row0 = int(row_end[d] - rows[d])
        e = int(np.searchsorted(row_end, row0 + max_rows, side="right"))
        e = max(e, d + 1)
        t0 = int(tok_end[d - 1]) if d else 0
        p = pack_documents(ids[t0:int(tok_end[e - 1])], lengths[d:e], spec)
        a, b = max(lo - row0, 0), min(hi - row0, len(p))
        yield p.windows[a:b], p.mask[a:b]
        d = e


def packed_windows(segments: Iterable[np.ndarray], window: int, pad_id: int, max_rows: int = 4096
                   ) -> Iterator[tuple[np.ndarray, np.ndarray | None]]:
    """Packed mode: consecutive stream segments in, whole windows out (about ``max_rows`` at a time), as
    ``Packer`` cuts them; a final partial window is padded with ``pad_id`` and comes with its mask (1 for real
    ids, 0 for padding); full windows come with ``None``."""
    carry = np.zeros(0, np.int64)
    for seg in segments:
        data = np.concatenate([carry, seg]) if carry.size else np.asarray(seg, dtype=np.int64)
        n = data.size // window
        for a in range(0, n, max_rows):
            b = min(a + max_rows, n)
            yield data[a * window: b * window].reshape(b - a, window), None
        carry = data[n * window:]
    if carry.size:
        out = np.full((1, window), pad_id, dtype=np.int64)
        out[0, :carry.size] = carry
        mask = np.zeros((1, window), dtype=np.int64)
        mask[0, :carry.size] = 1
        yield out, mask
