"""Pure packing of token streams into fixed windows of ``seq_len + 1`` ids (no I/O, numpy-vectorized).

Every document's ids get the end-of-document (EOD) id appended. Two modes:

* **packed** (default): documents are concatenated and cut into consecutive, non-overlapping windows of
  ``seq_len + 1`` ids; the remainder carries over into the next batch, across documents and files. At the
  end the partial window is dropped (``tokens_dropped``) or, with ``pad_last``, padded.
* **no_cross_doc**: a window never holds ids of two documents. Each document (with its EOD) fills
  ``ceil((len + 1) / (seq_len + 1))`` windows of its own, the last one padded. Nothing is dropped.

Whenever padding can occur (``no_cross_doc`` or ``pad_last``) a mask feature (``loss_mask`` by default,
int64[seq_len + 1]) is emitted with 1 for real ids (EOD included) and 0 for padding; padding uses
``pad_id`` (default: the EOD id). The trainer takes ``inputs = w[:-1]``, ``targets = w[1:]`` and weights
the loss by ``mask[1:]`` (use it as attention mask too if it wants padding unattended).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Iterator

import numpy as np

__all__ = ["PackSpec", "Packed", "Packer", "insert_eod", "pack_documents", "window_footprint",
           "MAX_RECORD_BYTES"]

MAX_RECORD_BYTES = (2 << 30) - 1  # a tf.train.Example (a protobuf message) must stay under 2 GiB


@dataclass(frozen=True)
class PackSpec:
    seq_len: int
    eod_id: int
    pad_id: int | None = None
    no_cross_doc: bool = False
    pad_last: bool = False
    mask_name: str = "loss_mask"

    def __post_init__(self):
        if not isinstance(self.seq_len, (int, np.integer)) or self.seq_len < 1:
            raise ValueError(f"seq_len must be a positive integer, got {self.seq_len!r}")
        if self.eod_id < 0:
            raise ValueError(f"eod_id must be >= 0, got {self.eod_id}")
        if self.pad_id is None:
            object.__setattr__(self, "pad_id", self.eod_id)
        elif self.pad_id < 0:
            raise ValueError(f"pad_id must be >= 0, got {self.pad_id}")
        if self.mask_name not in ("loss_mask", "attention_mask"):
            raise ValueError(f"mask_name must be 'loss_mask' or 'attention_mask', got {self.mask_name!r}")

    @property
    def window(self) -> int:
        return self.seq_len + 1

    @property
    def masked(self) -> bool:
        """Whether windows may hold padding, so a mask feature is written."""
        return self.no_cross_doc or self.pad_last


def window_footprint(spec: PackSpec, vocab_size: int) -> tuple[int, int]:
    """``(record_bytes, working_bytes)`` of one window, at most: its serialized Example (ids as varints of the
    largest id, mask ids of one byte) and the memory one window takes on its way to disk (the int64 window
    and mask, their stacked copy for serialization, and the serialized bytes)."""
    w = spec.window
    largest = max(vocab_size - 1, spec.pad_id or 0, 1)
    varint = (largest.bit_length() + 6) // 7
    record = w * varint + (w if spec.masked else 0) + 64  # + keys, lengths, framing
    arrays = w * 8 * (2 if spec.masked else 1)
    return record, 2 * arrays + record


@dataclass(frozen=True)
class Packed:
    """Windows ``int64[n, seq_len + 1]`` and, in masked modes, their mask (same shape), else None."""

    windows: np.ndarray
    mask: np.ndarray | None

    def __len__(self) -> int:
        return self.windows.shape[0]


def insert_eod(ids: np.ndarray, lengths: np.ndarray, eod_id: int) -> np.ndarray:
    """Concatenated documents ``ids`` (split by ``lengths``) -> int64 stream with EOD after each document."""
    lengths = np.asarray(lengths, dtype=np.int64)
    ids = np.asarray(ids)
    if int(lengths.sum()) != ids.size:
        raise ValueError(f"lengths sum to {int(lengths.sum())} but there are {ids.size} ids")
    stream = np.empty(ids.size + lengths.size, dtype=np.int64)
    is_eod = np.zeros(stream.size, dtype=bool)
    is_eod[np.cumsum(lengths) + np.arange(lengths.size, dtype=np.int64)] = True  # document d's EOD: d ids later
    stream[is_eod] = eod_id
    stream[~is_eod] = ids
    return stream


def pack_documents(ids: np.ndarray, lengths: np.ndarray, spec: PackSpec) -> Packed:
    """no_cross_doc packing of whole documents: each document's ids + EOD in windows of its own, padded."""
    lengths = np.asarray(lengths, dtype=np.int64)
    w = spec.window
    stream = insert_eod(ids, lengths, spec.eod_id)
    per_doc = lengths + 1
    rows = -(-per_doc // w)  # ceil
    first_row = np.cumsum(rows) - rows
    starts = np.cumsum(per_doc) - per_doc
    nrows = int(rows.sum())
    dest = np.arange(stream.size, dtype=np.int64) + np.repeat(first_row * w - starts, per_doc)
    out = np.full(nrows * w, spec.pad_id, dtype=np.int64)
    out[dest] = stream
    mask = np.zeros(nrows * w, dtype=np.int64)
    mask[dest] = 1
    return Packed(out.reshape(nrows, w), mask.reshape(nrows, w))


class Packer:
    """Stateful packer: ``add`` batches of documents in order, then ``finish`` once.

    Counters: ``documents``, ``tokens`` (ids placed in windows, EOD included, padding excluded),
    ``tokens_dropped`` (the final partial window in packed mode without ``pad_last``), ``padding``,
    ``windows``. Invariant: sum of (len + 1) over documents == tokens + tokens_dropped.
    """

    def __init__(self, spec: PackSpec):
        self.spec = spec
        self._carry = np.zeros(0, dtype=np.int64)
        self.documents = 0
        self.tokens = 0
        self.tokens_dropped = 0
        self.padding = 0
        self.windows = 0
        self._finished = False

    def _emit(self, windows: np.ndarray, mask: np.ndarray | None) -> Packed:
        self.windows += windows.shape[0]
        if mask is not None:
            real = int(mask.sum())
            self.tokens += real
            self.padding += mask.size - real
        else:
            self.tokens += windows.size
        if self.spec.masked and mask is None:
            mask = np.ones(windows.shape, dtype=np.int64)
        return Packed(windows, mask)

    def add(self, ids: np.ndarray, lengths: np.ndarray) -> Packed:
        if self._finished:
            raise RuntimeError("Packer.add after finish")
        lengths = np.asarray(lengths, dtype=np.int64)
        self.documents += int(lengths.size)
        if self.spec.no_cross_doc:
            p = pack_documents(ids, lengths, self.spec)
            return self._emit(p.windows, p.mask)
        w = self.spec.window
        stream = insert_eod(ids, lengths, self.spec.eod_id)
        if self._carry.size:
            stream = np.concatenate([self._carry, stream])
        n = stream.size // w
        self._carry = stream[n * w:].copy()
        return self._emit(stream[: n * w].reshape(n, w), None)

    def add_chunks(self, ids: np.ndarray, lengths: np.ndarray, max_windows: int) -> Iterator[Packed]:
        """``add`` in pieces of whole documents making at most about ``max_windows`` windows each (at least one
        document per piece), so that padding in ``no_cross_doc`` mode cannot multiply memory: a batch of
        many short documents and a long window would otherwise be padded all at once."""
        lengths = np.asarray(lengths, dtype=np.int64)
        if not self.spec.no_cross_doc or lengths.size == 0:
            yield self.add(ids, lengths)
            return
        rows = np.cumsum(-(-(lengths + 1) // self.spec.window))
        id_off = np.zeros(lengths.size + 1, dtype=np.int64)
        np.cumsum(lengths, out=id_off[1:])
        start = 0
        while start < lengths.size:
            base = int(rows[start - 1]) if start else 0
            end = max(start + 1, int(np.searchsorted(rows, base + max(1, max_windows), side="right")))
            yield self.add(ids[id_off[start]:id_off[end]], lengths[start:end])
            start = end

    def finish(self) -> Packed:
        """The last window: padded (``pad_last``) or dropped (counted in ``tokens_dropped``)."""
        self._finished = True
        w = self.spec.window
        carry, self._carry = self._carry, np.zeros(0, dtype=np.int64)
        if carry.size == 0 or not self.spec.pad_last:
            self.tokens_dropped += int(carry.size)
            return Packed(np.zeros((0, w), np.int64), np.zeros((0, w), np.int64) if self.spec.masked else None)
        out = np.full((1, w), self.spec.pad_id, dtype=np.int64)
        out[0, : carry.size] = carry
        mask = np.zeros((1, w), dtype=np.int64)
        mask[0, : carry.size] = 1
        return self._emit(out, mask)
