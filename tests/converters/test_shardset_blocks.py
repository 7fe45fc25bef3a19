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


WIDE = 2048    # text windows of 2,049 uint16 ids and a uint8 mask: 6,147 bytes a row


def _wide(block_rows: int):
    schema = text_schema(WIDE, "attention_mask")
    return schema, RecordLayout("columnar", block_rows, (("input_ids", "uint16"), ("attention_mask", "uint8")))


def test_a_block_over_the_record_cap_is_refused_before_any_block():
    from converters.shardset.blocks import check_block_bytes, max_block_rows
    from converters.tfrecord.reader import FRAME_OVERHEAD, MAX_RECORD_BYTES

    schema, layout = _wide(1 << 20)
    fit = max_block_rows(schema, layout)
    assert block_length(fit, schema, layout) - FRAME_OVERHEAD <= MAX_RECORD_BYTES
    assert block_length(fit + 1, schema, layout) - FRAME_OVERHEAD > MAX_RECORD_BYTES
    with pytest.raises(ValueError, match=rf"^--block-rows 1048576: a block of 1,048,576 rows of this set is "
                                         rf"[\d,]+ bytes, more than the 256 MiB a record may hold; use "
                                         rf"--block-rows {fit} or fewer$"):
        Blocks(schema, layout)
    check_block_bytes(*_wide(fit))          # the most that fit: taken
    Blocks(*_wide(fit))


@pytest.mark.parametrize("command", ["convert", "reshard"])
def test_the_cli_refuses_a_block_rows_that_cannot_fit_in_one_line(tmp_path, capsys, command):
    from converters.cli import main
    from converters.libsvm.synthetic import criteo_lines

    (tmp_path / "in.libsvm").write_bytes(criteo_lines(20, seed=1))
    base = ["convert", "libsvm", str(tmp_path / "in.libsvm"), "--field-size", "39", "--no-progress"]
    wide = ["--layout", "columnar", "--block-rows", "1048576"]
    if command == "convert":
        argv = [*base, "--out", str(tmp_path / "o"), *wide]
    else:
        assert main([*base, "--out", str(tmp_path / "e")]) == 0
        argv = ["reshard", str(tmp_path / "e"), "--out", str(tmp_path / "o"), "--num-shards", "1", "--no-progress",
                *wide]
    capsys.readouterr()
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert "--block-rows 1048576: a block of 1,048,576 rows of this set is" in err and "Traceback" not in err
    assert "256 MiB a record may hold; use --block-rows" in err
    assert not (tmp_path / "o").exists()
