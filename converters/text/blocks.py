"""Text windows in the columnar layout (``tfrecord.layout``): the stored types a tokenizer implies and the shard
cuts of a stream of windows in blocks.

Every window has the same width, so a block's length depends only on its row count: a planner cuts shards over
block lengths (``shardset.blocks.block_lengths``) exactly where the local writer cuts them, and pass 2 encodes
the blocks of a shard that starts on a block boundary (``shardset.blocks.Blocks``) to the same bytes the local
converter writes. The token ids are stored in the narrowest unsigned type that holds the vocabulary (``uint16``
up to 65,536 ids), the mask (padded modes) as ``uint8``; both decode to the ``int64`` the example layout
gives."""
from __future__ import annotations

from ..shardset.blocks import block_lengths
from ..shardset.layoutopts import LayoutOptions
from ..tfrecord.layout import RecordLayout, narrowest_int
from ..tfrecord.schema import Schema
from .options import FEATURE

__all__ = ["COLUMNAR_SHUFFLE", "text_layout", "block_shards"]

COLUMNAR_SHUFFLE = ("--shuffle does not apply to --layout columnar text windows (the shuffle moves records, not "
                    "rows): convert with --shuffle, then `tfpipe reshard SET --out NEW --layout columnar`")


def text_layout(layout: LayoutOptions, schema: Schema, max_id: int) -> RecordLayout:
    """The record layout of a text set whose ids are at most ``max_id``: the example layout, or columnar with
    the ids in ``narrowest_int(0, max_id)`` and a mask in ``uint8``."""
    stored = {f.name: narrowest_int(0, max_id) if f.name == FEATURE else "uint8" for f in schema.features}
    out = layout.record_layout(stored)
    out.check_schema(schema)
    return out


def block_shards(rows: int, schema: Schema, layout: RecordLayout, shard_size: int) -> list[tuple[int, int]]:
    """``[first, stop)`` rows of every shard of a stream of ``rows`` rows cut into blocks: a shard closed before
    a block would cross ``shard_size`` bytes (the local writer's rule, ``engines.core.Cutter``), so every shard
    starts on a block boundary."""
    from ..engines.core import Cutter

    cutter = Cutter(shard_size)
    cutter.add(block_lengths(rows, schema, layout))
    br = layout.block_rows
    return [(a * br, min(b * br, rows)) for a, b in cutter.ranges()]
