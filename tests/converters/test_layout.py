"""tfrecord.layout: the record layout model (example / columnar), its stored types and its manifest entry."""
import pytest

from converters.shardset.manifest import Manifest
from converters.tfrecord.layout import EXAMPLE_LAYOUT, RecordLayout, narrowest_int
from converters.tfrecord.schema import FeatureSpec, Schema

SCHEMA = Schema((FeatureSpec("ids", "int64", (39,)), FeatureSpec("values", "float32", (39,)),
                 FeatureSpec("label", "float32", ())), "label")
COLUMNAR = RecordLayout("columnar", 256, (("values", "float32"), ("ids", "int32"), ("label", "uint8")))


@pytest.mark.parametrize("lo, hi, want", [
    (0, 0, "uint8"), (0, 255, "uint8"), (0, 256, "uint16"), (-1, 1, "int8"), (-129, 0, "int16"),
    (0, 65535, "uint16"), (0, 65536, "int32"), (-2**31, 2**31 - 1, "int32"), (0, 2**31, "int64"),
    (5, 4, "uint8"),
])
def test_narrowest_int(lo, hi, want):
    assert narrowest_int(lo, hi) == want


def test_narrowest_int_refuses_beyond_int64():
    with pytest.raises(ValueError, match="fit no stored"):
        narrowest_int(0, 2**63)


@pytest.mark.parametrize("args, match", [
    (("tiled",), "layout must be one of"),
    (("example", 256), "no block_rows"),
    (("columnar", 0, (("ids", "int32"),)), "block_rows must be"),
    (("columnar", True, (("ids", "int32"),)), "block_rows must be"),
    (("columnar", 256, ()), "stored type of every feature"),
    (("columnar", 256, (("ids", "int128"),)), "'ids': stored type"),
])
def test_bad_layouts_name_the_value(args, match):
    with pytest.raises(ValueError, match=match):
        RecordLayout(*args)


@pytest.mark.parametrize("stored, match", [
    ((("ids", "int32"), ("label", "uint8")), "schema has"),
    ((("ids", "float32"), ("values", "float32"), ("label", "uint8")), "int64 values cannot"),
])
def test_layout_must_fit_the_schema(stored, match):
    with pytest.raises(ValueError, match=match):
        Manifest(records=0, shards=(), schema=SCHEMA, layout=RecordLayout("columnar", 8, stored))


def test_varlen_features_have_no_columnar_form():
    schema = Schema((FeatureSpec("ids", "int64", None),))
    with pytest.raises(ValueError, match="variable length"):
        Manifest(records=0, shards=(), schema=schema, layout=RecordLayout("columnar", 8, (("ids", "int32"),)))


def test_manifest_round_trip_keeps_the_layout():
    data = Manifest(records=0, shards=(), schema=SCHEMA, layout=COLUMNAR).to_json()
    assert data["layout"] == {"kind": "columnar", "block_rows": 256,
                              "stored": {"ids": "int32", "label": "uint8", "values": "float32"}}
    assert Manifest.from_json(data).layout == COLUMNAR


def test_example_sets_keep_their_manifest_unchanged():
    data = Manifest(records=0, shards=(), schema=SCHEMA).to_json()
    assert "layout" not in data
    assert Manifest.from_json(data).layout == EXAMPLE_LAYOUT


# --- tfrecord.columnar: blocks on the wire ---------------------------------------------------------------

import numpy as np  # noqa: E402

from converters.tfrecord.columnar import BlockError, ValueRange, decode_block, encode_block, stored_for  # noqa: E402

SMALL = Schema((FeatureSpec("ids", "int64", (3,)), FeatureSpec("label", "float32", ())), "label")
SMALL_LAYOUT = RecordLayout("columnar", 4, (("ids", "int32"), ("label", "uint8")))
IDS = np.array([[1, 2, 3], [4, 5, -6]], np.int64)
LABELS = np.array([0.0, 1.0], np.float32)


def test_block_round_trip_gives_the_schema_dtypes():
    out = decode_block(encode_block({"ids": IDS, "label": LABELS}, SMALL, SMALL_LAYOUT), SMALL, SMALL_LAYOUT)
    assert out["ids"].dtype == np.int64 and out["label"].dtype == np.float32
    np.testing.assert_array_equal(out["ids"], IDS)
    np.testing.assert_array_equal(out["label"], LABELS)


def test_block_is_a_tf_example_that_decode_raw_reads():
    tf = pytest.importorskip("tensorflow")
    rec = encode_block({"ids": IDS, "label": LABELS}, SMALL, SMALL_LAYOUT)
    spec = {"ids": tf.io.FixedLenFeature([], tf.string), "label": tf.io.FixedLenFeature([], tf.string)}
    parsed = tf.io.parse_example([rec, rec], spec)
    ids = tf.reshape(tf.io.decode_raw(tf.strings.reduce_join(parsed["ids"]), tf.int32), [-1, 3])
    np.testing.assert_array_equal(ids.numpy(), np.concatenate([IDS, IDS]))


@pytest.mark.parametrize("columns, match", [
    ({"ids": IDS, "label": np.array([0.0, 300.0], np.float32)}, "'label': values do not fit"),
    ({"ids": IDS[:, :2], "label": LABELS}, r"'ids': expected shape \(n, 3\)"),
    ({"ids": IDS, "label": LABELS[:1]}, "same in every column"),
    ({"ids": IDS}, "needs the columns"),
])
def test_encode_refuses_what_does_not_fit(columns, match):
    with pytest.raises(ValueError, match=match):
        encode_block(columns, SMALL, SMALL_LAYOUT)


GOOD = encode_block({"ids": IDS, "label": LABELS}, SMALL, SMALL_LAYOUT)


@pytest.mark.parametrize("record, match", [
    (GOOD[:-1], "runs past the record's end"),
    (GOOD + b"\x00", "bytes after the Example"),
    (GOOD.replace(b"label", b"lbbel"), "'lbbel' where 'label'"),
    (encode_block({"ids": IDS, "label": LABELS}, SMALL, RecordLayout("columnar", 4, (("ids", "int8"),
                                                                                     ("label", "uint8")))),
     "'ids': 6 bytes are not whole rows of 12"),
    (b"", "expected field tag"),
], ids=["truncated", "trailing", "renamed", "narrower", "empty"])
def test_decode_says_what_is_wrong(record, match):
    with pytest.raises(BlockError, match=match):
        decode_block(record, SMALL, SMALL_LAYOUT)


@pytest.mark.parametrize("dtype, values, want", [
    ("int64", [0, 39, 1000], "uint16"),
    ("int64", [-5, 2**40], "int64"),
    ("float32", [0.0, 1.0], "uint8"),
    ("float32", [0.5, 1.0], "float32"),
    ("float32", [-0.0, 1.0], "float32"),
    ("float32", [0.0, 70000.0], "float32"),
    ("float32", [np.nan], "float32"),
])
def test_stored_for_picks_the_narrowest_exact_type(dtype, values, want):
    rng = ValueRange()
    for v in values:   # one value at a time: add() must merge
        rng.add(np.array([v], dtype=np.float32 if dtype == "float32" else np.int64))
    assert stored_for(dtype, rng) == want
    assert stored_for(dtype, ValueRange().merge(rng)) == want
