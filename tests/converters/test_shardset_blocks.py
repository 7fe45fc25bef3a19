"""converters.shardset.blocks: block lengths known from row counts alone, and the same framed blocks whatever
batches the rows arrive in."""
from __future__ import annotations

import numpy as np
import pytest

from converters.shardset.blocks import Blocks, block_length, block_lengths
from converters.text.options import text_schema
from converters.tfrecord.columnar import decode_block, encode_block
from converters.tfrecord.layout import RecordLayout


@pytest.mark.parametrize("rows, width, block_rows", [(1, 1, 1), (7, 16, 7), (300, 2049, 256), (5, 127, 64),
                                                     (20_000, 1, 20_000)])
def test_block_length_is_the_encoded_length(rows, width, block_rows):
    schema = text_schema(width - 1, "attention_mask")
    layout = RecordLayout("columnar", block_rows, (("input_ids", "uint16"), ("attention_mask", "uint8")))
    cols = {"input_ids": np.ones((rows, width), np.int64), "attention_mask": np.ones((rows, width), np.int64)}
    whole = [len(encode_block({k: v[a:a + block_rows] for k, v in cols.items()}, schema, layout)) + 16
             for a in range(0, rows, block_rows)]
    assert block_lengths(rows, schema, layout).tolist() == whole
    assert block_length(min(rows, block_rows), schema, layout) == whole[0]


@pytest.mark.parametrize("batches", [[23], [1] * 23, [5, 0, 9, 9], [10, 13]])
def test_same_blocks_whatever_the_batches(batches):
    schema = text_schema(2)
    layout = RecordLayout("columnar", 4, (("input_ids", "int16"),))
    ids = np.arange(23 * 3, dtype=np.int64).reshape(23, 3) - 30
    blocks, out, at = Blocks(schema, layout), [], 0
    for n in batches:
        out += list(blocks.add({"input_ids": ids[at:at + n]}))
        at += n
    out += list(blocks.finish())
    framed = np.concatenate([f for f, _, _ in out])
    assert [int(r) for _, _, rs in out for r in rs] == [4, 4, 4, 4, 4, 3]
    assert sum(int(l.sum()) for _, l, _ in out) == framed.size
    got = _records(framed.tobytes())
    assert len(got) == 6
    assert np.array_equal(np.concatenate([decode_block(r, schema, layout)["input_ids"] for r in got]), ids)


def _records(data: bytes) -> list[bytes]:
    out, pos = [], 0
    while pos < len(data):
        n = int.from_bytes(data[pos:pos + 8], "little")
        out.append(data[pos + 12:pos + 12 + n])
        pos += 12 + n + 4
    return out
