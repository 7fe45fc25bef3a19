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
