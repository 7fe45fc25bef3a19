"""Pure sparse LibSVM block parsing: whole lines in, CSR arrays plus line accounting out (no I/O).

The sparse counterpart of ``block.parse`` (which hands ``ParseOptions(sparse=True)`` here): every line keeps
all its ``index:value`` pairs, explicit zeros included, as scikit-learn's ``load_svmlight_file`` does —
``ids`` (zero-based) and ``values`` end to end with ``row_splits`` (row ``r`` is ``ids[row_splits[r]:
row_splits[r + 1]]``); the label a float32 per row, or with ``multilabel`` a sorted list per row
(``labels[label_splits[r]:label_splits[r + 1]]``); with ``keep_qid`` the int64 ``qid`` of every row. Lines
follow the same rules, bad-line reasons and exactness fallback as the fixed-width parser, plus
``bad_qid``/``missing_qid`` with ``keep_qid``.
"""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from ..shardset.manifest import MAX_EXAMPLES
from .emit_sparse import serialize_csr
from .kernel import POW10
from .options import ParseOptions
from .reasons import REASONS, BadLine
from .reference import hand_over, parse_sparse_line
from .sparse_kernel import (
    DONE,
    FALLBACK,
    LABELS_FULL,
    NNZ_FULL,
    ROWS_FULL,
    parse_sparse_kernel,
)

__all__ = ["concat_sparse", "SparseBlock", "parse_sparse", "serialize_sparse", "row_stats"]


@dataclass
class SparseBlock:
    """What ``parse_sparse`` returns. ``records_read == n + sum(skipped.values())``."""

    label: np.ndarray               # float32 [n], or with multilabel every row's labels end to end
    ids: np.ndarray                 # int64 [nnz], zero-based
    values: np.ndarray              # float32 [nnz]
    row_splits: np.ndarray          # int64 [n + 1]
    label_splits: np.ndarray | None  # int64 [n + 1] with multilabel, else None
    qid: np.ndarray | None          # int64 [n] with keep_qid, else None
    first_line: int
    lines: int                      # physical lines in the block
    blank: int                      # blank and comment-only lines (not records)
    skipped: dict[str, int] = field(default_factory=dict)
    bad: list[BadLine] = field(default_factory=list)  # the first MAX_EXAMPLES bad lines, in line order
    fallback_lines: int = 0         # lines parsed by the Python reference (exactness fallback)

    @property
    def n(self) -> int:
        return int(self.row_splits.shape[0]) - 1

    @property
    def records_read(self) -> int:
        return self.n + sum(self.skipped.values())


def row_stats(parsed: SparseBlock) -> dict[str, int]:
    """What the manifest accumulates over blocks: rows, total nonzeros, min/max nonzeros per row and the
    largest zero-based id (-1 when there is none)."""
    nnz = np.diff(parsed.row_splits)
    return {"rows": parsed.n, "nonzeros": int(nnz.sum()), "min_nonzeros": int(nnz.min()) if parsed.n else 0,
            "max_nonzeros": int(nnz.max()) if parsed.n else 0,
            "max_id": int(parsed.ids.max()) if parsed.ids.size else -1}


class _Arrays:
    """The kernel's output arrays, grown (doubled) when the kernel reports one full."""

    def __init__(self, nbytes: int, opts: ParseOptions):
        rows = min(nbytes // 2 + 1, nbytes // 64 + 64)  # grows for short lines
        self.labels = np.empty(rows * (2 if opts.multilabel else 1), np.float32)
        self.labels64 = np.empty(self.labels.shape[0], np.float64)
        self.label_splits = np.zeros(rows + 1, np.int64)
        self.row_splits = np.zeros(rows + 1, np.int64)
        self.qids = np.empty(rows if opts.keep_qid else 0, np.int64)
        pairs = nbytes // 4 + 1  # a pair takes >= 4 bytes ('1:1 '): rarely grown
        self.ids = np.empty(pairs, np.int64)
        self.values = np.empty(pairs, np.float32)

    def grow(self, status: int) -> None:
        if status == ROWS_FULL:
            self.row_splits = _grown(self.row_splits)
            self.label_splits = _grown(self.label_splits)
            if self.qids.size:
                self.qids = _grown(self.qids)
        elif status == NNZ_FULL:
            self.ids, self.values = _grown(self.ids), _grown(self.values)
        else:
            self.labels, self.labels64 = _grown(self.labels), _grown(self.labels64)

    def need(self, rows: int, nnz: int, nlab: int) -> None:
        """Room for ``rows`` rows, ``nnz`` pairs and ``nlab`` labels (a line from the Python reference)."""
        while self.row_splits.shape[0] <= rows:
            self.grow(ROWS_FULL)
        while self.ids.shape[0] < nnz:
            self.grow(NNZ_FULL)
        while self.labels.shape[0] < nlab:
            self.grow(LABELS_FULL)


def _grown(a: np.ndarray) -> np.ndarray:
    out = np.zeros(max(2 * a.shape[0], 16), a.dtype)
    out[:a.shape[0]] = a
    return out


def parse_sparse(block: bytes, opts: ParseOptions, first_line: int = 1, max_examples: int = MAX_EXAMPLES
                 ) -> SparseBlock:
    """Parse whole LibSVM lines (``block`` ends at a newline, or is the end of the input) into CSR arrays.
    Pure: bytes in, arrays and accounting out. ``opts.sparse`` must be set."""
    if not opts.sparse:
        raise ValueError("parse_sparse needs ParseOptions(sparse=True)")
    buf = np.frombuffer(block, dtype=np.uint8)
    a = _Arrays(len(block), opts)
    counts = np.zeros(len(REASONS), np.int64)
    ex = np.zeros((max(max_examples, 1), 4), np.int64)
    state = np.array([0, first_line, 0, 0, 0, 0, 0], np.int64)
    py_bad: list[BadLine] = []
    fallback = 0
    while True:
        status = parse_sparse_kernel(buf, state, opts.index_base, opts.allow_nonfinite, opts.kernel_max_index,
                                     opts.multilabel, opts.keep_qid, a.labels, a.labels64, a.label_splits, a.qids,
                                     a.ids, a.values, a.row_splits, counts, ex, POW10)
        if status == DONE:
            break
        if status != FALLBACK:  # an array is full
            a.grow(status)
            continue
        fallback += 1  # FALLBACK: the line at state[0] goes through the Python reference
        parsed = hand_over(block, state, parse_sparse_line, opts, counts, py_bad, max_examples)
        if parsed is not None:
            _append(a, state, opts, *parsed)
    n, nnz, nlab = int(state[2]), int(state[5]), int(state[6])
    bad = [BadLine(int(ex[i, 0]), REASONS[int(ex[i, 1])], bytes(block[int(ex[i, 2]): int(ex[i, 3])]))
           for i in range(int(state[4]))]
    if py_bad:
        bad = sorted(bad + py_bad, key=lambda b: b.line)
    return SparseBlock(
        label=a.labels[:nlab], ids=a.ids[:nnz], values=a.values[:nnz], row_splits=a.row_splits[:n + 1],
        label_splits=a.label_splits[:n + 1] if opts.multilabel else None,
        qid=a.qids[:n] if opts.keep_qid else None, first_line=first_line, lines=int(state[1]) - first_line,
        blank=int(state[3]), skipped={REASONS[i]: int(c) for i, c in enumerate(counts) if c},
        bad=bad[:max_examples], fallback_lines=fallback)


def _append(a: _Arrays, state: np.ndarray, opts: ParseOptions, labels, qid, ids, vals) -> None:
    """Add one row parsed by the Python reference after the kernel's rows."""
    r, k, m = int(state[2]), int(state[5]), int(state[6])
    a.need(r + 1, k + len(ids), m + len(labels))
    a.labels[m: m + len(labels)] = labels
    a.ids[k: k + len(ids)] = ids
    a.values[k: k + len(vals)] = vals
    if opts.keep_qid:
        a.qids[r] = qid
    a.row_splits[r + 1] = k + len(ids)
    a.label_splits[r + 1] = m + len(labels)
    state[2], state[5], state[6] = r + 1, k + len(ids), m + len(labels)


def concat_sparse(blocks: list[SparseBlock]) -> SparseBlock:
    """The records of several blocks as one (to serialize them in one call); accounting fields are zero."""
    def splits(name):
        parts, at = [np.zeros(1, np.int64)], 0
        for b in blocks:
            sp = getattr(b, name)
            parts.append(sp[1:] + at)
            at += int(sp[-1])
        return np.concatenate(parts)

    first = blocks[0]
    return SparseBlock(np.concatenate([b.label for b in blocks]), np.concatenate([b.ids for b in blocks]),
                       np.concatenate([b.values for b in blocks]), splits("row_splits"),
                       splits("label_splits") if first.label_splits is not None else None,
                       np.concatenate([b.qid for b in blocks]) if first.qid is not None else None, 1, 0, 0)


def serialize_sparse(parsed: SparseBlock, keys: tuple[str, ...] = ("label", "ids", "values"),
                     space: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray]:
    """TFRecord-framed Examples of a ``SparseBlock``: variable-length ``ids``/``values``, the label (a list
    with multilabel) and ``qid`` (named ``keys[3]``, default ``"qid"``) when the block has one; built in
    ``space`` if it has room (``serialize_csr``)."""
    if parsed.n == 0:
        return np.zeros(0, np.uint8), np.zeros(0, np.int64)
    qk = (keys[3] if len(keys) > 3 else "qid") if parsed.qid is not None else ""
    return serialize_csr(parsed.label, parsed.label_splits, parsed.ids, parsed.values, parsed.row_splits,
                         parsed.qid, (*keys[:3], qk), space)
