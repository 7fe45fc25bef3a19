"""The ``--layout`` / ``--block-rows`` options every writer of a set shares (``convert libsvm``, ``convert text``,
``reshard``): which record layout to write (``example``, the default, or ``columnar`` blocks of rows, see
``converters.tfrecord.layout``) and how many rows a full columnar block holds.

``LayoutOptions`` checks a layout and builds its ``RecordLayout`` (``ShardOutputOptions`` validates its
``layout`` / ``block_rows`` through it); ``add_layout_arguments(parser)`` adds the two options to a command. The stored types are not an option: a writer picks them from the
value ranges of the whole set (``converters.tfrecord.columnar.stored_for``) and builds the ``RecordLayout``
with ``LayoutOptions.record_layout(stored)``."""
from __future__ import annotations

import argparse
from dataclasses import dataclass

from ..tfrecord.layout import (COLUMNAR, DEFAULT_BLOCK_ROWS, EXAMPLE, EXAMPLE_LAYOUT, LAYOUTS, MAX_BLOCK_ROWS,
                               RecordLayout)
from ..util.checks import set_int

__all__ = ["LayoutOptions", "EXAMPLE_OPTIONS", "add_layout_arguments", "block_rows_arg"]


@dataclass(frozen=True)
class LayoutOptions:
    """``kind``: ``"example"`` or ``"columnar"``; ``block_rows``: rows per full columnar block (kept, and
    checked, for the example layout too, where it is unused)."""

    kind: str = EXAMPLE
    block_rows: int = DEFAULT_BLOCK_ROWS

    def __post_init__(self):
        if self.kind not in LAYOUTS:
            raise ValueError(f"layout must be one of {LAYOUTS}, got {self.kind!r}")
        set_int(self, "block_rows", minimum=1, maximum=MAX_BLOCK_ROWS)

    @property
    def columnar(self) -> bool:
        return self.kind == COLUMNAR

    def record_layout(self, stored) -> RecordLayout:
        """The ``RecordLayout`` to write: ``EXAMPLE_LAYOUT``, or columnar blocks with ``stored`` (feature name ->
        stored type, a dict or (name, type) pairs)."""
        if not self.columnar:
            return EXAMPLE_LAYOUT
        return RecordLayout(COLUMNAR, self.block_rows, tuple(dict(stored).items()))

    def to_json(self) -> dict:
        return {"kind": self.kind, "block_rows": self.block_rows}


EXAMPLE_OPTIONS = LayoutOptions()


def block_rows_arg(s: str) -> int:
    try:
        v = int(s)
    except ValueError:
        v = 0
    if not 1 <= v <= MAX_BLOCK_ROWS:
        raise argparse.ArgumentTypeError(f"expected an integer in [1, {MAX_BLOCK_ROWS}], got {s!r}")
    return v


def add_layout_arguments(parser: argparse.ArgumentParser, *, same: bool = False) -> None:
    """``--layout {example,columnar}`` and ``--block-rows N`` (rows per columnar block). ``same``: for a command
    that rewrites a set (``reshard``), ``--layout`` also takes ``same`` (the default: the source's layout) and
    ``--block-rows`` defaults to the source's block size."""
    parser.add_argument("--layout", choices=(("same",) if same else ()) + LAYOUTS, default="same" if same else EXAMPLE,
                        help="record layout: one tf.train.Example per row (example" + (""
                             if same else ", the default") + ": readable by any TensorFlow code) or blocks of rows "
                             "stored as raw columns (columnar: the fastest input, read through tfpipe or "
                             "decode_raw)" + ("; default same: the source's" if same else ""))
    parser.add_argument("--block-rows", type=block_rows_arg, default=None, metavar="N",
                        help="rows per block with --layout columnar (default "
                             + ("the source's block size, else " if same else "") + f"{DEFAULT_BLOCK_ROWS})")
