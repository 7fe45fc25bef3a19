"""Pure LibSVM block parsing: a block of input bytes in, numpy arrays plus line accounting out (no I/O).

``parse_block`` is the conversion core every engine shares (the local converter, a Beam DoFn, a SageMaker
Processing job): it takes whole lines (a block ending at a newline, as ``sources.iter_blocks``
yields) and returns ``label`` float32 [n], ``ids`` int64 [n, field_size] (shifted by the index base) and ``values``
float32 [n, field_size], with blank lines counted and every bad line counted by reason (the first few
kept with their line number).

Semantics follow scikit-learn's ``load_svmlight_file`` exactly (its values are what the tests compare to):

* a line is cut at its first ``#`` (comment); the rest is split on ASCII whitespace (space, tab, CR,
  VT, FF), so tabs, repeated spaces, CRLF and a missing final newline need no special case;
* a line with no token is blank: skipped and counted, not an error;
* the first token is the label (Python ``float`` syntax); a first feature token ``qid:...`` is ignored
  (as scikit-learn does with ``query_id=False``);
* each other token is ``index:value``; index a (non-negative) integer, strictly increasing along the line
  with ``strict_ids`` (fixed width) and always in sparse mode; without ``strict_ids`` fixed-width ids are
  positional fields, kept in line order with repeats (``ParsedBlock.unordered`` counts such rows); value a Python
  ``float``; numbers are read as float64 (correctly rounded, like ``strtod``) and then cast to float32.

One compiled pass (``kernel``) parses the regular lines; lines it cannot convert exactly go through the
Python reference (``reference.parse_line``), so results equal Python's ``float()``/``int()`` bit for bit.

With ``sparse=True`` (no ``field_size``) ``parse``/``parse_block`` return a ``sparse.SparseBlock`` (CSR
arrays: every pair of every line, optionally multi-label and ``qid``) and ``serialize_parsed`` writes it
with variable-length features; the signatures stay the same for both layouts.
"""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from ..shardset.manifest import MAX_EXAMPLES
from .emit import serialize_fixed
from .index_scan import has_zero_index_kernel, min_index_kernel
from .kernel import DONE, POW10, ROWS_FULL, parse_kernel
from .options import ParseOptions
from .reasons import REASONS, BadLine, pair_count_token
from .reference import hand_over, parse_line
from .sparse import SparseBlock, concat_sparse, parse_sparse, serialize_sparse

__all__ = ["ParsedBlock", "SparseBlock", "parse_block", "parse", "convert_block", "serialize_parsed",
           "concat_records", "min_index", "has_zero_index", "MAX_EXAMPLES"]


@dataclass
class ParsedBlock:
    """What ``parse_block`` returns. ``records_read == len(label) + sum(skipped.values())``."""

    label: np.ndarray
    ids: np.ndarray
    values: np.ndarray
    first_line: int
    lines: int                      # physical lines in the block
    blank: int                      # blank and comment-only lines (not records)
    skipped: dict[str, int] = field(default_factory=dict)
    bad: list[BadLine] = field(default_factory=list)  # the first MAX_EXAMPLES bad lines, in line order
    fallback_lines: int = 0         # lines parsed by the Python reference (exactness fallback)
    unordered: int = 0              # written rows whose positional ids repeat or do not increase

    @property
    def n(self) -> int:
        return int(self.label.shape[0])

    @property
    def records_read(self) -> int:
        return self.n + sum(self.skipped.values())


def has_zero_index(block: bytes) -> bool:
    """Whether ``block`` holds an index 0 — the ``--index-base auto`` test, at memory-scan speed."""
    return bool(len(block)) and bool(has_zero_index_kernel(np.frombuffer(block, dtype=np.uint8)))


def min_index(block: bytes) -> int | None:
    """The smallest index written in ``block`` (None if it has no feature token). For ``--index-base
    auto``: scan every input; any index 0 anywhere means zero-based, otherwise one-based."""
    if not block:
        return None
    v = int(min_index_kernel(np.frombuffer(block, dtype=np.uint8)))
    return None if v < 0 else v


# --------------------------------------------------------------------------------------------------------


def parse_block(block: bytes, *, field_size: int | None = None, index_base: int = 1, pad: bool = False,
                truncate: bool = False, allow_nonfinite: bool = False, max_index: int | None = None,
                first_line: int = 1, path: str = "<input>", max_examples: int = MAX_EXAMPLES, sparse: bool = False,
                multilabel: bool = False, keep_qid: bool = False, strict_ids: bool = False
                ) -> ParsedBlock | SparseBlock:
    """Parse whole LibSVM lines (``block`` ends at a newline, or is the end of the input). Pure: bytes in,
    arrays and accounting out. ``path`` is only used for messages. ``field_size`` for fixed-width rows
    (a ``ParsedBlock``; positional ids unless ``strict_ids``), or ``sparse=True`` (a ``SparseBlock``)."""
    opts = ParseOptions(field_size, index_base, pad, truncate, allow_nonfinite, max_index, sparse, multilabel,
                        keep_qid, strict_ids)
    return parse(block, opts, first_line, max_examples)


def convert_block(block: bytes, *, field_size: int | None = None,
                  keys: tuple[str, ...] = ("label", "ids", "values"), **parse_options
                  ) -> tuple[np.ndarray, np.ndarray, ParsedBlock | SparseBlock]:
    """The whole pure conversion step: whole lines in, ``(framed, lengths, parsed)`` out — TFRecord-framed
    ``tf.train.Example`` bytes of the good lines (see ``examples.serialize_batch``) plus the accounting.
    ``parse_options`` are those of ``parse_block``; ``keys`` may name a fourth feature, the ``qid``."""
    parsed = parse_block(block, field_size=field_size, **parse_options)
    framed, lengths = serialize_parsed(parsed, keys)
    return framed, lengths, parsed


def concat_records(blocks: list) -> ParsedBlock | SparseBlock:
    """The records of several parsed blocks (one layout) as one block, to serialize them in one call;
    its accounting fields are zero (each block keeps its own)."""
    if len(blocks) == 1:
        return blocks[0]
    if isinstance(blocks[0], SparseBlock):
        return concat_sparse(blocks)
    return ParsedBlock(np.concatenate([b.label for b in blocks]), np.concatenate([b.ids for b in blocks]),
                       np.concatenate([b.values for b in blocks]), 1, 0, 0)


def serialize_parsed(parsed: ParsedBlock | SparseBlock, keys: tuple[str, ...] = ("label", "ids", "values"),
                     space: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray]:
    """TFRecord-framed Examples of a parsed block (either layout) with feature names ``keys``; the records are
    built at the start of ``space`` (a worker's ring slot: ``util.shmring.slot_space``) if they fit there."""
    if isinstance(parsed, SparseBlock):
        return serialize_sparse(parsed, keys, space)
    if parsed.n == 0:
        return np.zeros(0, np.uint8), np.zeros(0, np.int64)
    return serialize_fixed(parsed.label, parsed.ids, parsed.values, tuple(keys[:3]), space)


def parse(block: bytes, opts: ParseOptions, first_line: int = 1, max_examples: int = MAX_EXAMPLES
          ) -> ParsedBlock | SparseBlock:
    """``parse_block`` with a ``ParseOptions``."""
    if opts.sparse:
        return parse_sparse(block, opts, first_line, max_examples)
    buf = np.frombuffer(block, dtype=np.uint8)  # read-only view: one kernel signature for every caller
    f = opts.field_size
    # a valid record needs >= 1 + 4*f bytes ("L i:v ..."), except label-only lines with --pad; the
    # arrays grow if this guess is short
    cap = max(1, len(block) // 2 + 1 if opts.pad else len(block) // (1 + 4 * f) + 1)
    cap = min(cap, 1 << 16) if opts.pad else cap
    labels = np.empty(cap, np.float32)
    ids = np.empty((cap, f), np.int64)
    values = np.empty((cap, f), np.float32)
    counts = np.zeros(len(REASONS), np.int64)
    ex = np.zeros((max(max_examples, 1), 4), np.int64)
    state = np.array([0, first_line, 0, 0, 0, 0], np.int64)
    py_bad: list[BadLine] = []
    fallback = 0
    while True:
        status = parse_kernel(buf, state, f, opts.index_base, opts.pad, opts.truncate, opts.allow_nonfinite,
                              opts.kernel_max_index, opts.strict_ids, labels, ids, values, counts, ex, POW10)
        if status == DONE:
            break
        if status == ROWS_FULL:
            labels, ids, values = _grow(labels, ids, values)
            continue
        # FALLBACK: the line at state[0] goes through the Python reference
        fallback += 1
        parsed = hand_over(block, state, parse_line, opts, counts, py_bad, max_examples)
        if parsed is not None:
            r = int(state[2])
            if r >= labels.shape[0]:
                labels, ids, values = _grow(labels, ids, values)
            labels[r] = parsed[0]
            ids[r] = parsed[1]
            values[r] = parsed[2]
            state[2] = r + 1
            state[5] += parsed[3]
    n = int(state[2])
    bad = [BadLine(int(ex[i, 0]), REASONS[int(ex[i, 1])], _example_token(block, ex[i], f))
           for i in range(int(state[4]))]
    if py_bad:
        bad = sorted(bad + py_bad, key=lambda b: b.line)
    skipped = {REASONS[i]: int(c) for i, c in enumerate(counts) if c}
    return ParsedBlock(labels[:n], ids[:n], values[:n], first_line=first_line, lines=int(state[1]) - first_line,
                       blank=int(state[3]),
                       skipped=skipped, bad=bad[:max_examples], fallback_lines=fallback, unordered=int(state[5]))


def _example_token(block: bytes, row: np.ndarray, field_size: int) -> bytes:
    if row[2] < 0:
        return pair_count_token(int(row[3]), field_size)
    return bytes(block[int(row[2]): int(row[3])])


def _grow(labels, ids, values):
    m = labels.shape[0] * 2
    nl = np.empty(m, labels.dtype)
    ni = np.empty((m, ids.shape[1]), ids.dtype)
    nv = np.empty((m, values.shape[1]), values.dtype)
    k = labels.shape[0]
    nl[:k], ni[:k], nv[:k] = labels, ids, values
    return nl, ni, nv
