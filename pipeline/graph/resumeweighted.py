"""A balanced group (``label_weights``) with ``resumable=True``: the endless sampled stream as a pure function of
(seed, position), so an input state of a few integers continues it exactly. The plan is here (pure);
``pipeline.graph.resumable.sampled_batches`` builds it.

The stream is cut into **blocks** of ``L`` positions (:func:`block_positions`: 4,096, or up to 16,384 when a
weight is small). Every block holds exactly ``c_k`` records of part ``k`` (:func:`part_counts`: ``L ·
weight_k`` rounded by largest remainders, at least 1), arranged by a random permutation of the block that is a
pure function of (seed, block number) (``index_shuffle``, Philox). So the sampling is stratified: the
proportions are the weights (to ``1/L``) in every block, and which part a position draws from is random
within its block. Part ``k``'s records come from its own resumable order (``pipeline.graph.resumable``: its files
permuted per part-epoch, shuffled by the random delay of ``shuffle_buffer``, seeded by (seed, k)), repeated
endlessly; before block ``b`` it has given exactly ``b · c_k`` records, so its part-epoch and position there
are two divisions — no count over the past.

An epoch is ``steps`` global batches of the stream (the group's records per rank, in full batches, as without
``resumable``; ``pipeline.resume.state.epoch_records``), so global position ``t = epoch · E + position``. A resume
starts each part at block ``t // L`` (each part's order entered as a resume enters it) and drops the ``t mod
L`` positions before ``t``. Then batches of ``batch_size``, rank ``i`` taking batches ``i, i + n, ...`` (every
rank reads the whole stream). Nothing in Python per record: one ``map`` per block gathers its records.
"""
from __future__ import annotations

import hashlib

from ..resume.state import epoch_records, order_epoch_steps, steps_for
from ..spec.stage import Stage

__all__ = ["BLOCK_KEY", "block_positions", "part_counts", "part_spec", "sampled_steps", "sampled_stages"]

BLOCK_KEY = (1 << 32) - 3     # folded into (seed, block) for the seed of a block's arrangement
MIN_BLOCK, MAX_BLOCK = 4096, 16384
MIN_PER_BLOCK = 50            # records of the rarest part per block, where MAX_BLOCK allows (±1 % of its weight)


def block_positions(weights) -> int:
    """``L``: a power of two from 4,096 up to 16,384, the smallest giving every part ``MIN_PER_BLOCK`` records."""
    size = MIN_BLOCK
    while size < MAX_BLOCK and size * min(weights) < MIN_PER_BLOCK:
        size *= 2
    return size


def part_counts(weights, size: int) -> list[int]:
    """Records of each part per block: ``size · weight`` rounded by largest remainders (summing to ``size``),
    at least 1 for every part (taken from the largest)."""
    total = float(sum(weights))
    quotas = [size * w / total for w in weights]
    counts = [int(q) for q in quotas]
    for k in sorted(range(len(weights)), key=lambda k: (counts[k] - quotas[k], k))[:size - sum(counts)]:
        counts[k] += 1
    for k, c in enumerate(counts):
        if c == 0:
            counts[k] = 1
            counts[counts.index(max(counts))] -= 1
    return counts


def _part_seed(seed: int | None, k: int) -> int:
    """Part ``k``'s seed: a 63-bit integer from (seed, k)."""
    digest = hashlib.sha256(f"tfpipe-part:{seed or 0}:{k}".encode()).digest()
    return int.from_bytes(digest[:8], "little") >> 1


def part_spec(spec, k: int):
    """The one-rank resumable spec of part ``k``'s files (its own seed)."""
    at = sum(n for n, _ in spec.part_weights[:k])
    n = spec.part_weights[k][0]
    return spec.with_(files=spec.files[at:at + n], file_records=spec.file_records[at:at + n], part_weights=(),
                      seed=_part_seed(spec.seed, k), num_shards=1, shard_index=0, steps=None)


def sampled_steps(spec, e0: int, pos: int) -> int:
    """Batches this rank runs from (``e0``, ``pos``) to the last epoch (-1: forever)."""
    if spec.epochs is None:
        return -1
    if e0 >= spec.epochs:
        return 0
    return steps_for(spec, epoch_records(spec) - pos) + (spec.epochs - e0 - 1) * order_epoch_steps(spec)


def sampled_stages(spec) -> list[Stage]:
    """What ``describe`` shows for a balanced group with ``resumable=True``."""
    weights = [w for _, w in spec.part_weights]
    size = block_positions(weights)
    n, shuffle = spec.num_shards, spec.shuffle_buffer > 0
    return [
        Stage("source", True, {"mode": "file", "parts": len(weights), "files": [c for c, _ in spec.part_weights],
                               "read": "sequential per part", "resumable": True},
              "each part in its own resumable order (files permuted per part-epoch, seeded by (seed, part)), "
              "repeated endlessly; a resume enters each part where the position puts it"),
        Stage("shuffle", shuffle, {"buffer": spec.shuffle_buffer, "seed": spec.seed, "order": "random-delay per part"},
              "each part's records leave after a random delay (mean shuffle_buffer)" if shuffle
              else "off (shuffle_buffer=0; the blocks' arrangement still mixes the parts)"),
        Stage("sample", True, {"weights": [round(w, 6) for w in weights], "block": size,
                               "per_block": part_counts(weights, size), "seed": spec.seed},
              "stratified: every block of positions holds each part's share, in a random arrangement that is a "
              "pure function of (seed, block)"),
        Stage("batch", True, {"batch_size": spec.batch_size, "drop_remainder": True},
              "full batches of the endless stream"),
        Stage("shard", n > 1, {"num_shards": n, "index": spec.shard_index},
              "rank i takes batches i, i+n, ... of the stream" if n > 1 else "single rank"),
        Stage("take", True, {"steps_per_epoch": order_epoch_steps(spec), "epochs": spec.epochs or "forever"},
              "an epoch holds as many records as the group (per rank), in full batches"),
        Stage("parse", spec.parse, {"fn": "tf.io.parse_example"}, "vectorized parse from the manifest's schema"),
        Stage("prefetch", spec.prefetch != 0, {"buffer": "AUTOTUNE" if spec.prefetch is None else spec.prefetch},
              "last: overlaps input with the training step"),
    ]
