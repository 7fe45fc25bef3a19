"""converters.tfrecord.parse: Example records into columns without TensorFlow, bit for bit what
``tf.io.parse_example`` gives (packed and unpacked lists, extra features skipped), and one ValueError naming the
record and the feature for what does not fit."""
from __future__ import annotations

import struct

import numpy as np
import pytest

tf = pytest.importorskip("tensorflow")

from converters.libsvm.synthetic import write_criteo_shards  # noqa: E402
from converters.shardset.reader import read_manifest  # noqa: E402
from converters.tfrecord.parse import parse_examples  # noqa: E402
from converters.tfrecord.reader import read_records  # noqa: E402
from converters.tfrecord.schema import FeatureSpec, Schema  # noqa: E402


def tf_parse(records, schema):
    spec = {f.name: tf.io.FixedLenFeature(list(f.shape), getattr(tf, f.dtype)) for f in schema.features}
    return {k: v.numpy() for k, v in tf.io.parse_example(tf.constant(records, tf.string), spec).items()}


def assert_bits(got, want):
    assert sorted(got) == sorted(want)
    for k in want:
        assert got[k].dtype == want[k].dtype and got[k].shape == want[k].shape, k
        assert got[k].tobytes() == want[k].tobytes(), k


def test_a_converted_set_parses_as_tensorflow_parses_it(tmp_path):
    m = write_criteo_shards(str(tmp_path / "s"), 3000, seed=4)
    records = [r for p in m.shard_paths() for r in read_records(p)]
    assert_bits(parse_examples(records, m.schema), tf_parse(records, m.schema))


def test_the_deepfm_sample_written_by_tensorflow(tmp_path):
    from deepfm_sample import FEATURES, sample_arrays, write_sample

    write_sample(tmp_path / "val.tfrecords", sample_arrays())
    records = list(read_records(str(tmp_path / "val.tfrecords")))
    schema = Schema((FeatureSpec("ids", "int64", (39,)), FeatureSpec("label", "float32", ()),
                     FeatureSpec("values", "float32", (39,))))
    assert_bits(parse_examples(records, schema), tf_parse(records, schema))
    assert set(FEATURES) == {f.name for f in schema.features}


def _len(payload: bytes) -> bytes:
    out, n = b"", len(payload)
    while True:
        b, n = n & 0x7F, n >> 7
        out += bytes([b | (0x80 if n else 0)])
        if not n:
            return out + payload


def _varint(v: int) -> bytes:
    v &= (1 << 64) - 1
    out = b""
    while True:
        b, v = v & 0x7F, v >> 7
        out += bytes([b | (0x80 if v else 0)])
        if not v:
            return out


def example(features: dict[str, bytes], trailing: bytes = b"") -> bytes:
    """An Example by hand: ``features[name]`` is the Feature message's bytes."""
    entries = b"".join(b"\x0a" + _len(b"\x0a" + _len(k.encode()) + b"\x12" + _len(v)) for k, v in features.items())
    return b"\x0a" + _len(entries) + trailing


def ints(values, packed=True) -> bytes:
    body = b"\x0a" + _len(b"".join(_varint(v) for v in values)) if packed else b"".join(
        b"\x08" + _varint(v) for v in values)
    return b"\x1a" + _len(body)


def floats(values, packed=True) -> bytes:
    raw = [struct.pack("<f", v) for v in values]
    body = b"\x0a" + _len(b"".join(raw)) if packed else b"".join(b"\x0d" + r for r in raw)
    return b"\x12" + _len(body)


SCHEMA = Schema((FeatureSpec("a", "int64", (2,)), FeatureSpec("b", "float32", ())))


@pytest.mark.parametrize("record", [
    example({"a": ints([1, -5]), "b": floats([0.25])}),
    example({"b": floats([0.25], packed=False), "a": ints([1, -5], packed=False)}),           # unpacked, any order
    example({"a": ints([1, -5]), "zz": floats([1.0, 2.0, 3.0]), "b": floats([0.25])}),        # extra feature
    example({"a": ints([1, -5]), "b": floats([0.25])}, trailing=b"\x10\x07"),                 # an unknown field
])
def test_hand_written_records(record):
    want = tf_parse([record], SCHEMA)
    assert_bits(parse_examples([record], SCHEMA), want)
    assert want["a"].tolist() == [[1, -5]] and want["b"].tolist() == [0.25]


@pytest.mark.parametrize("record, message", [
    (example({"a": ints([1, 2])}), "record 1 has no feature 'b'"),
    (example({"a": ints([1, 2, 3]), "b": floats([1.0])}), "record 1 holds another number of values than the 2 of "
                                                          "feature 'a'"),
    (example({"a": floats([1.0, 2.0]), "b": floats([1.0])}), "record 1 holds feature 'a' as another kind of list"),
    (example({"a": ints([1, 2]), "b": floats([1.0])})[:-3], "record 1 is not a well-formed tf.train.Example"),
    (b"\xff\xff", "record 1 is not a well-formed tf.train.Example"),
])
def test_records_that_do_not_fit_name_the_record_and_the_feature(record, message):
    good = example({"a": ints([1, 2]), "b": floats([1.0])})
    with pytest.raises(ValueError) as e:
        parse_examples([good, record], SCHEMA)
    assert message in str(e.value)


def test_no_records_and_refused_schemas():
    got = parse_examples([], SCHEMA)
    assert got["a"].shape == (0, 2) and got["b"].shape == (0,) and got["b"].dtype == np.float32
    with pytest.raises(ValueError, match="only fixed-width int64 and float32"):
        parse_examples([], Schema((FeatureSpec("v", "int64", None),)))
