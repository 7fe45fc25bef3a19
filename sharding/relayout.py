"""Re-lay a shard set's rows in another record layout (``converters.tfrecord.layout``), for ``tfpipe reshard
--layout``: example to columnar, columnar to example, or columnar with another block size.

A columnar record holds many rows, so records cannot be copied as they are: every row goes through the example
form on the way (a columnar source's blocks are decoded, ``decode_block``, and serialized as one
``tf.train.Example`` per row, the bytes tfpipe's converters write), optionally through the shuffle, and is
written either as it is (example) or parsed back into columns (``tfrecord.parse``, no TensorFlow) and encoded
in blocks (``ColumnarSink``). The
stored types of a columnar output come from a first pass over the source (each feature's ``ValueRange`` over
every row, ``stored_for``), or from a columnar source's own manifest (they hold every value of the set)."""
from __future__ import annotations

from typing import Iterable, Iterator

import numpy as np

from converters.shardset.blocks import Blocks
from converters.shardset.manifest import Manifest
from converters.tfrecord.columnar import BlockError, ValueRange, decode_block, stored_for
from converters.tfrecord.examples import serialize_batch
from converters.tfrecord.layout import COLUMNAR, RecordLayout
from converters.tfrecord.parse import parse_examples
from converters.tfrecord.schema import Schema
from converters.util.errors import IntegrityError

__all__ = ["payloads", "as_examples", "parse_rows", "stored_types", "columnar_layout", "ColumnarSink"]

_HEADER, _FOOTER = 12, 4  # TFRecord framing around each record's bytes


def payloads(framed: np.ndarray, lengths: np.ndarray) -> list[bytes]:
    """The record bytes of framed records (their concatenated framed bytes and framed lengths)."""
    data = memoryview(np.ascontiguousarray(framed)).cast("B")
    ends = np.cumsum(lengths)
    return [bytes(data[int(e - n) + _HEADER:int(e) - _FOOTER]) for e, n in zip(ends, lengths)]


def as_examples(framed: np.ndarray, lengths: np.ndarray, manifest: Manifest, where: str = "", first: int = 0
                ) -> tuple[np.ndarray, np.ndarray]:
    """The source's framed records as one framed ``tf.train.Example`` per row: as they are for an example set,
    each block decoded and its rows serialized for a columnar set. A malformed block is an IntegrityError naming
    the shard (``where``) and the block's index in it (``first``: the index of the first of these records)."""
    if not manifest.layout.columnar:
        return framed, lengths
    cols: list[dict[str, np.ndarray]] = []
    for k, record in enumerate(payloads(framed, lengths)):
        try:
            cols.append(decode_block(record, manifest.schema, manifest.layout))
        except BlockError as exc:
            raise IntegrityError(f"{where or manifest.location}: block {first + k}: a malformed columnar block: "
                                 f"{exc} (run `tfpipe verify`)") from None
    if not cols:
        return framed, lengths
    return serialize_batch(manifest.schema, {f.name: np.concatenate([c[f.name] for c in cols])
                                             for f in manifest.schema.features})


def parse_rows(records: list[bytes], schema: Schema, where: str) -> dict[str, np.ndarray]:
    """Rows of serialized ``tf.train.Example`` records as columns ((n,) or (n, width), the schema's dtype), as
    ``tf.io.parse_example`` gives them (``tfrecord.parse``, no TensorFlow); a record that lacks a feature or
    holds another width is an IntegrityError naming ``where``."""
    try:
        return parse_examples(records, schema)
    except ValueError as exc:
        raise IntegrityError(f"{where}: a record does not match the set's schema: {exc}") from None


def stored_types(batches: Iterable[tuple[np.ndarray, np.ndarray]], schema: Schema, where: str) -> dict[str, str]:
    """The first pass: the narrowest stored type of every feature over all the rows of ``batches`` (framed
    example records)."""
    ranges = {f.name: ValueRange() for f in schema.features}
    for framed, lengths in batches:
        if len(lengths):
            for name, values in parse_rows(payloads(framed, lengths), schema, where).items():
                ranges[name].add(values)
    return {f.name: stored_for(f.dtype, ranges[f.name]) for f in schema.features}


def columnar_layout(manifest: Manifest, block_rows: int, batches: Iterator | None) -> RecordLayout:
    """The columnar layout of the re-laid set: the source's stored types when it is columnar, else those of the
    first pass over ``batches``. A schema with no columnar form (a variable-length or string feature) is a
    ValueError naming the feature, before anything is written."""
    schema = manifest.schema
    problem = _no_columnar_form(schema)
    if problem:
        raise ValueError(f"{manifest.location}: cannot re-lay as columnar: {problem}; keep --layout example")
    stored = (dict(manifest.layout.stored) if manifest.layout.columnar
              else stored_types(batches or (), schema, manifest.location))
    layout = RecordLayout(COLUMNAR, block_rows, tuple(stored.items()))
    layout.check_schema(schema)
    return layout


def _no_columnar_form(schema: Schema) -> str | None:
    if schema.raw:
        return "its schema is raw (records not parsed as tf.train.Example)"
    for f in schema.features:
        if f.varlen:
            return f"feature {f.name!r} has variable length (the columnar layout holds fixed-width features only)"
        if f.dtype not in ("int64", "float32"):
            return f"feature {f.name!r} is {f.dtype} (the columnar layout holds int64 and float32 features)"
    return None


class ColumnarSink:
    """Example records in (``write(framed, lengths)``, in order), columnar blocks out to ``target`` (anything
    with ``write(framed, lengths, rows)``); ``finish`` writes the short last block. ``rows``: rows taken."""

    def __init__(self, target, schema: Schema, layout: RecordLayout, where: str):
        self.target, self.schema, self.where = target, schema, where
        self.blocks = Blocks(schema, layout)
        self.rows = 0

    def write(self, framed, lengths, labels=None) -> None:
        if len(lengths) == 0:
            return
        cols = parse_rows(payloads(framed, lengths), self.schema, self.where)
        self.rows += len(lengths)
        for f, n, r in self.blocks.add(cols):
            self.target.write(f, n, r)

    def finish(self) -> None:
        for f, n, r in self.blocks.finish():
            self.target.write(f, n, r)

    def shard_records(self) -> None:
        return None  # blocks are cut into shards downstream
