"""The protobuf-free tf.train.Example decoder and the schema tally behind ``tfpipe index``: tables against
TensorFlow's own serialization, hand-built wire encodings (unpacked lists), and records that are not Examples."""
from __future__ import annotations

import numpy as np
import pytest

from converters.shardset.infer import SchemaTally, decode_example
from converters.tfrecord.schema import FeatureSpec, Schema

tf = pytest.importorskip("tensorflow")


def example(**feats) -> bytes:
    def one(v):
        if isinstance(v, list) and v and isinstance(v[0], bytes):
            return tf.train.Feature(bytes_list=tf.train.BytesList(value=v))
        if isinstance(v, np.ndarray) and v.dtype == np.float32:
            return tf.train.Feature(float_list=tf.train.FloatList(value=v))
        return tf.train.Feature(int64_list=tf.train.Int64List(value=v))
    return tf.train.Example(features=tf.train.Features(feature={k: one(v) for k, v in feats.items()})
                            ).SerializeToString()


@pytest.mark.parametrize("record, want", [
    (example(label=np.float32([1]), ids=[1, 2, 3]), {"label": ("float32", 1), "ids": ("int64", 3)}),
    (example(ids=[-1, 2**62, 0, 127, 128]), {"ids": ("int64", 5)}),          # 10-byte and 1-byte varints
    (example(ids=[]), {"ids": ("int64", 0)}),
    (example(s=[b"a", b"", b"\xff" * 300]), {"s": ("string", 3)}),
    (example(v=np.zeros(39, np.float32)), {"v": ("float32", 39)}),
    (b"", {}),                                                                # an empty Example
    # hand-built: Int64List unpacked (field 1, wire type 0) and FloatList unpacked (wire type 5)
    (b"\x0a\x0f\x0a\x0d\x0a\x01x\x12\x08\x1a\x06\x08\x05\x08\x06\x08\x07", {"x": ("int64", 3)}),
    (b"\x0a\x0e\x0a\x0c\x0a\x01y\x12\x07\x12\x05\x0d\x00\x00\x80\x3f", {"y": ("float32", 1)}),
], ids=["label-and-ids", "varints", "empty-list", "bytes", "floats", "empty-example", "int64-unpacked",
        "float-unpacked"])  # named: a serialized Example's map order differs between processes (xdist collects twice)
def test_decode_example_counts_every_feature(record, want):
    assert decode_example(record) == want


@pytest.mark.parametrize("record", [
    b"hello world", b"\x00\x01", b"\x0a\x05\x0a\x03", b"\x12\x00",            # text, field 0, short, field 2
    b"\x0a\x04\x0a\x02\x12\x00",                                              # a feature without a name
    b"\x0a\x07\x0a\x05\x0a\x01x\x12\x00",                                     # a Feature with no list
    b"\x0a\x09\x0a\x07\x0a\x01x\x12\x02\x22\x00",                            # an unknown list kind (4)
    b"\x0a\x0a\x0a\x08\x0a\x01x\x12\x03\x12\x01\x00",                        # packed floats of 1 byte
    b"\x0a\x0a\x0a\x08\x0a\x02\xff\xfe\x12\x02\x1a\x00",                     # a name that is not UTF-8
])
def test_records_that_are_not_examples(record):
    assert decode_example(record) is None


def test_tally_shapes_shares_and_merge():
    a, b = SchemaTally(), SchemaTally()
    for i in range(6):
        (a if i < 3 else b).add(example(label=np.float32([i]), ids=list(range(4)), tok=list(range(i)),
                                        **({"w": np.float32([1, 2])} if i % 2 else {})))
    a.merge(b)
    r = a.result()
    assert r.raw_reason is None and a.records == 6
    assert r.schema == Schema((FeatureSpec("label", "float32", ()), FeatureSpec("ids", "int64", (4,)),
                               FeatureSpec("tok", "int64", None), FeatureSpec("w", "float32", None)), label="label")
    assert r.features["w"] == {"dtype": "float32", "present": 0.5, "min_values": 2, "max_values": 2}
    c = SchemaTally()
    c.add(example(x=[1]))
    c.add(example(x=np.float32([1])))
    assert c.result().schema.raw and "holds float32/int64" in c.result().raw_reason
    d = SchemaTally()
    d.add(example(x=[1]))
    d.add(b"not an example")
    assert d.result().schema.raw and d.first_bad == 1 and d.result().raw_reason.startswith("1 of 2 records")
    assert Schema.from_json(d.result().schema.to_json()) == Schema.raw_records()
