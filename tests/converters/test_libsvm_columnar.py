"""convert libsvm --layout columnar: the same rows as the Example layout, bit for bit (dtypes and shapes too), in
the narrowest stored types of the whole set, shards of whole blocks; verify checks every block's structure;
what columnar refuses, in one line."""
from __future__ import annotations

import hashlib
import json

import numpy as np
import pytest
from tfread import read_back

from converters.cli import main
from converters.libsvm.convert import convert_libsvm
from converters.libsvm.synthetic import criteo_lines
from converters.shardset.blocks import block_length, shard_row_ranges
from converters.shardset.manifest import MANIFEST_NAME
from converters.shardset.verify import verify
from converters.tfrecord.columnar import decode_block, encode_block
from converters.tfrecord.crc import frame_payloads
from converters.tfrecord.layout import RecordLayout
from converters.tfrecord.reader import read_records
from converters.util.errors import IntegrityError


def read_columnar(m) -> dict[str, np.ndarray]:
    """Every block of a columnar set, decoded (``decode_block``) and joined: one array per feature."""
    cols: dict[str, list] = {f.name: [] for f in m.schema.features}
    for path in m.shard_paths():
        for record in read_records(path):
            for k, v in decode_block(record, m.schema, m.layout).items():
                cols[k].append(v)
    return {k: np.concatenate(v) for k, v in cols.items()}


@pytest.fixture(scope="module")
def criteo(tmp_path_factory):
    d = tmp_path_factory.mktemp("columnar")
    (d / "a.libsvm").write_bytes(criteo_lines(1000, seed=1))
    (d / "b.libsvm").write_bytes(criteo_lines(7, seed=2))
    (d / "c.libsvm").write_bytes(criteo_lines(500, seed=3))
    example = convert_libsvm(str(d), d / "example", field_size=39, workers=1)
    return d, example, read_back(example)


@pytest.mark.parametrize("block_rows, shard_size", [
    (256, 1 << 30),      # one shard, the last block short
    (1, 20_000),         # a block per row
    (64, 60_000),        # several shards of whole blocks
    (300, 1_000),        # blocks larger than a shard: one block per shard
    (5000, 1 << 30),     # one block holds the whole set
])
def test_rows_equal_the_example_layout_bit_for_bit(criteo, tmp_path, block_rows, shard_size):
    d, example, rows = criteo
    m = convert_libsvm([str(d / n) for n in ("a.libsvm", "b.libsvm", "c.libsvm")], tmp_path / "col",
                       field_size=39, layout="columnar", block_rows=block_rows, shard_size=shard_size, workers=1)
    got = read_columnar(m)
    for f in m.schema.features:
        assert got[f.name].dtype == rows[f.name].dtype and got[f.name].shape == rows[f.name].shape, f.name
        assert got[f.name].tobytes() == rows[f.name].tobytes(), f.name
    assert m.records == example.records == 1507 and m.schema == example.schema
    assert m.layout == RecordLayout("columnar", block_rows, (("ids", "int32"), ("label", "uint8"),
                                                             ("values", "float32")))
    assert m.inputs == example.inputs and m.options["layout"] == "columnar" and m.options["block_rows"] == block_rows
    if block_rows >= 64:  # tiny blocks pay the record framing and column keys per block: no smaller
        assert m.total_bytes <= example.total_bytes
    # every shard holds whole blocks: full ones, but for the set's last block; within the byte limit unless alone
    sizes = [s.records for s in m.shards]
    assert all(n % block_rows == 0 for n in sizes[:-1]) and sum(sizes) == m.records
    full = block_length(block_rows, m.schema, m.layout)
    assert all(s.bytes <= shard_size or s.records <= block_rows for s in m.shards) and full > 0
    assert verify(str(tmp_path / "col")).records == m.records


def _lines(rows: list[tuple[str, list[str]]]) -> bytes:
    return b"".join(f"{label} {' '.join(f'{i}:{v}' for i, v in enumerate(vals, 1))}\n".encode()
                    for label, vals in rows)


@pytest.mark.parametrize("rows, stored", [
    ([("0", ["1", "2"]), ("1", ["0", "255"])], {"ids": "uint8", "label": "uint8", "values": "uint8"}),
    ([("-1", ["-3", "2"]), ("1", ["100", "7"])], {"ids": "uint8", "label": "int8", "values": "int8"}),
    ([("0.5", ["1.5", "2"]), ("1", ["0", "70000"])], {"ids": "uint8", "label": "float32", "values": "float32"}),
    ([("3", ["-0.0", "1"]), ("300", ["2", "1"])], {"ids": "uint8", "label": "uint16", "values": "float32"}),
    ([("1", ["1e9", "1"]), ("0", ["40000", "-40000"])], {"ids": "uint8", "label": "uint8", "values": "float32"}),
    ([("0", ["65535", "-32768"])], {"ids": "uint8", "label": "uint8", "values": "float32"}),  # int32: no gain
])
def test_stored_types_are_the_narrowest_exact_ones(tmp_path, rows, stored):
    """Values: integral floats in an integer type narrower than 4 bytes, else float32 (-0.0 stays float)."""
    (tmp_path / "in.libsvm").write_bytes(_lines(rows))
    m = convert_libsvm(str(tmp_path / "in.libsvm"), tmp_path / "col", field_size=2, layout="columnar", workers=1)
    e = convert_libsvm(str(tmp_path / "in.libsvm"), tmp_path / "ex", field_size=2, workers=1)
    assert dict(m.layout.stored) == stored
    got, want = read_columnar(m), read_back(e)
    for k in want:
        assert got[k].tobytes() == want[k].tobytes() and got[k].dtype == want[k].dtype, k


def test_nonfinite_values_are_kept_as_float32(tmp_path):
    (tmp_path / "in.libsvm").write_bytes(b"1 1:nan 2:1\n0 1:inf 2:-inf\nnan 1:2 2:3\n")
    kw = dict(field_size=2, allow_nonfinite=True, workers=1)
    m = convert_libsvm(str(tmp_path / "in.libsvm"), tmp_path / "col", layout="columnar", **kw)
    e = convert_libsvm(str(tmp_path / "in.libsvm"), tmp_path / "ex", **kw)
    assert dict(m.layout.stored) == {"ids": "uint8", "label": "float32", "values": "float32"}
    got, want = read_columnar(m), read_back(e)
    for k in want:
        assert got[k].tobytes() == want[k].tobytes(), k
    assert verify(str(tmp_path / "col")).blocks == 1


@pytest.mark.parametrize("ids, stored", [(255, "uint8"), (256, "uint16"), (65536, "int32"), (2**31, "int64")])
def test_ids_in_the_narrowest_integer_type(tmp_path, ids, stored):
    (tmp_path / "in.libsvm").write_bytes(f"1 1:1 {ids}:2\n0 3:1 4:1\n".encode())
    m = convert_libsvm(str(tmp_path / "in.libsvm"), tmp_path / "col", field_size=2, layout="columnar", workers=1)
    assert m.layout.stored_type("ids") == stored
    assert read_columnar(m)["ids"].tolist() == [[1, ids], [3, 4]]


@pytest.mark.parametrize("rows, block_rows, limit, want", [
    (0, 4, 10_000, []),
    (10, 4, 10_000, [(0, 10)]),
    (10, 4, 1, [(0, 4), (4, 8), (8, 10)]),          # a block larger than the limit: alone in its shard
    (9, 3, "two", [(0, 6), (6, 9)]),                 # two full blocks fit a shard
    (7, 3, "two", [(0, 6), (6, 7)]),
])
def test_shard_cuts_are_whole_blocks(rows, block_rows, limit, want):
    from converters.libsvm.options import libsvm_schema

    schema = libsvm_schema(2)
    layout = RecordLayout("columnar", block_rows, (("ids", "uint8"), ("label", "uint8"), ("values", "uint8")))
    if limit == "two":
        limit = 2 * block_length(block_rows, schema, layout)
    assert shard_row_ranges(rows, schema, layout, limit) == want


# -- verify -------------------------------------------------------------------------------------------------


@pytest.fixture()
def columnar_set(tmp_path):
    (tmp_path / "in.libsvm").write_bytes(criteo_lines(300, seed=4))
    m = convert_libsvm(str(tmp_path / "in.libsvm"), tmp_path / "col", field_size=39, layout="columnar",
                       block_rows=32, shard_size=50_000, workers=1)
    assert len(m.shards) > 1
    return tmp_path / "col", m


def test_a_flipped_byte_inside_a_column_is_caught(columnar_set):
    out, m = columnar_set
    shard = out / m.shards[0].name
    data = bytearray(shard.read_bytes())
    length = int.from_bytes(data[:8], "little")
    data[12 + length - 10] ^= 0x01  # inside block 0's values column (the last feature in name order)
    shard.write_bytes(bytes(data))
    with pytest.raises(IntegrityError, match=rf"{m.shards[0].name}: corrupt record data.* at byte 0\b"):
        verify(str(out))


def _rewrite(out, m, index: int, payloads: list[bytes]) -> None:
    """Shard ``index`` rewritten from ``payloads`` (framed), its size and sha256 put into the manifest, so that
    only the block structure check can tell."""
    offsets = np.concatenate([[0], np.cumsum([len(p) for p in payloads])])
    framed, _ = frame_payloads(np.frombuffer(b"".join(payloads), np.uint8), offsets)
    path = out / m.shards[index].name
    path.write_bytes(framed.tobytes())
    raw = json.loads((out / MANIFEST_NAME).read_text())
    raw["shards"][index]["bytes"] = len(framed)
    raw["shards"][index]["sha256"] = hashlib.sha256(framed.tobytes()).hexdigest()
    (out / MANIFEST_NAME).write_text(json.dumps(raw))


def test_a_short_block_inside_a_shard_is_caught_though_the_checksum_matches(columnar_set):
    out, m = columnar_set
    blocks = [decode_block(r, m.schema, m.layout) for r in read_records(out / m.shards[0].name)]
    cols = {k: np.concatenate([b[k] for b in blocks]) for k in blocks[0]}
    n = len(cols["label"])
    sizes = [32, 31, 1] + [32] * ((n - 64) // 32) + ([(n - 64) % 32] if (n - 64) % 32 else [])  # same rows
    starts = np.cumsum([0] + sizes)
    payloads = [encode_block({k: c[a:b] for k, c in cols.items()}, m.schema, m.layout)
                for a, b in zip(starts[:-1], starts[1:])]
    _rewrite(out, m, 0, payloads)
    with pytest.raises(IntegrityError, match=rf"{m.shards[0].name}: block 1 holds 31 rows, only a shard's last"):
        verify(str(out))


def test_a_column_of_partial_rows_is_caught_with_its_block_and_offset(columnar_set):
    from converters.tfrecord.schema import FeatureSpec, Schema

    out, m = columnar_set
    records = list(read_records(out / m.shards[0].name))
    cols = decode_block(records[1], m.schema, m.layout)
    narrow = Schema(tuple(FeatureSpec(f.name, f.dtype, (38,) if f.name == "values" else f.shape)
                          for f in m.schema.features), m.schema.label)
    cols["values"] = cols["values"][:, :38]  # 32 rows of 38 values: not whole rows of 39
    _rewrite(out, m, 0, [records[0], encode_block(cols, narrow, m.layout), *records[2:]])
    with pytest.raises(IntegrityError, match=rf"{m.shards[0].name}: block 1 at byte {len(records[0]) + 16}: "
                                             r"column 'values': 4864 bytes are not whole rows of 156 bytes"):
        verify(str(out))
    report = verify(str(out), raise_on_error=False)
    assert len(report.problems) == 1 and "block 1" in report.problems[0]


def test_a_flipped_column_byte_under_a_fresh_crc_is_caught_by_the_sha256(columnar_set):
    out, m = columnar_set
    records = list(read_records(out / m.shards[1].name))
    bad = bytearray(records[0])
    bad[-10] ^= 0x01  # a value of the last column: still a well-formed block
    offsets = np.cumsum([0] + [len(r) for r in (bytes(bad), *records[1:])])
    framed, _ = frame_payloads(np.frombuffer(b"".join([bytes(bad), *records[1:]]), np.uint8), offsets)
    (out / m.shards[1].name).write_bytes(framed.tobytes())
    with pytest.raises(IntegrityError, match=rf"{m.shards[1].name}: sha256 .* differs from the manifest's"):
        verify(str(out))


def _exit_code(argv: list[str]) -> int:
    """``tfpipe ARGV``'s exit code (usage errors from argparse exit, the others return)."""
    try:
        return main(argv)
    except SystemExit as exc:
        return exc.code


@pytest.mark.parametrize("argv, message", [
    (["--sparse", "--layout", "columnar"], "--layout columnar holds fixed-width rows only: --sparse rows have "
                                           "variable length"),
    (["--field-size", "39", "--block-rows", "64"], "--block-rows applies to --layout columnar"),
    (["--field-size", "39", "--layout", "columnar", "--shuffle", "--seed", "1"],
     "--shuffle with --layout columnar is not supported: convert with --layout example"),
    (["--field-size", "39", "--layout", "columnar", "--split-by-label"],
     "--split-by-label with --layout columnar is not supported"),
    (["--field-size", "39", "--layout", "columnar", "--block-rows", "0"], "--block-rows: expected an integer in [1, 1048576]"),
    (["--field-size", "39", "--layout", "columnar", "--block-rows", "2000000"], "--block-rows: expected an integer in [1, 1048576], got '2000000'"),
])
def test_what_columnar_refuses_in_one_line(tmp_path, capsys, argv, message):
    (tmp_path / "in.libsvm").write_bytes(criteo_lines(20, seed=1))
    assert _exit_code(["convert", "libsvm", str(tmp_path / "in.libsvm"), "--out", str(tmp_path / "o"),
                       "--no-progress", *argv]) in (2, 64)  # a usage error of the parser: 64
    err = capsys.readouterr().err
    assert message in err and "Traceback" not in err
    assert not (tmp_path / "o" / MANIFEST_NAME).exists()


def test_a_format_refuses_a_layout_it_does_not_declare():
    from types import SimpleNamespace

    from converters import registry
    from converters.shardset.options import ShardOutputOptions

    class RowsOnly(registry.Format):
        name = "rows-only"
        layouts = ("example",)

    opts = SimpleNamespace(output=ShardOutputOptions(layout="columnar"))
    with pytest.raises(ValueError, match="convert rows-only: --layout columnar is not available for this format"):
        RowsOnly().check_layout(opts)
    for name in ("libsvm", "text"):   # both built-in formats write both layouts
        registry.get(name).check_layout(opts)


def test_cli_prints_and_inspect_shows_the_layout(tmp_path, capsys):
    (tmp_path / "in.libsvm").write_bytes(criteo_lines(100, seed=1))
    assert main(["convert", "libsvm", str(tmp_path / "in.libsvm"), "--out", str(tmp_path / "o"), "--field-size",
                 "39", "--layout", "columnar", "--block-rows", "16", "--no-progress"]) == 0
    want = "columnar, blocks of 16 rows, stored ids int32, label uint8, values float32"
    assert f"layout: {want}" in capsys.readouterr().out
    assert main(["inspect", str(tmp_path / "o")]) == 0
    assert f"layout      {want}\n" in capsys.readouterr().out
    assert main(["verify", str(tmp_path / "o"), "--no-progress"]) == 0
    assert "100 records, CRCs, counts, sizes and sha256 match the manifest, 7 columnar blocks well-formed" in (
        capsys.readouterr().out)
    raw = json.loads((tmp_path / "o" / MANIFEST_NAME).read_text())
    assert raw["layout"] == {"kind": "columnar", "block_rows": 16,
                             "stored": {"ids": "int32", "label": "uint8", "values": "float32"}}


def test_sharded_by_s3_key_refuses_columnar_before_any_work(tmp_path):
    from converters.cli.convert_argv import parse_convert
    from converters.engines.processing.sharded import run_sharded
    from converters.util.errors import TfpipeError

    (tmp_path / "in.libsvm").write_bytes(criteo_lines(20, seed=1))
    job = parse_convert(["convert", "libsvm", str(tmp_path / "in.libsvm"), "--out", str(tmp_path / "o"),
                         "--field-size", "39", "--layout", "columnar"])
    assert job.options.output.columnar and job.options.output.block_rows == 1024  # the default
    with pytest.raises(TfpipeError, match="use FullyReplicated inputs"):
        run_sharded(job, None, None, [], timeout=1, poll=0.1)


def test_local_workers_write_the_same_bytes(tmp_path):
    from engines_data import assert_same_output

    from converters.libsvm.convert import run
    from converters.libsvm.options import LibsvmOptions
    from converters.shardset.options import ShardOutputOptions

    (tmp_path / "a.libsvm").write_bytes(criteo_lines(3000, seed=5))
    (tmp_path / "b.libsvm").write_bytes(criteo_lines(20, seed=6))
    opts = LibsvmOptions(39, output=ShardOutputOptions(shard_size=200_000, layout="columnar", block_rows=100))
    ins = [str(tmp_path / "a.libsvm"), str(tmp_path / "b.libsvm")]
    one = run(ins, tmp_path / "one", opts, workers=1)
    two = run(ins, tmp_path / "two", opts, workers=2, block_bytes=64 << 10)
    assert_same_output(tmp_path / "one", tmp_path / "two")
    assert one == two and len(one.shards) > 2
