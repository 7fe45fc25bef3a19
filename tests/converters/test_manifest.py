import json

import pytest

from converters.libsvm.options import libsvm_schema
from converters.libsvm.synthetic import write_criteo_shards
from converters.shardset.manifest import InputStats, Manifest, ShardInfo, manifest_bytes
from converters.shardset.reader import read_manifest
from converters.util.errors import IntegrityError, TfpipeError


def test_required_keys(tmp_path):
    write_criteo_shards(str(tmp_path / "o"), 100, shard_bytes=10_000)
    data = json.loads((tmp_path / "o" / "index.json").read_text())
    for key in ("format_version", "records", "shards", "schema", "inputs", "options", "tfpipe_version"):
        assert key in data
    assert set(data["shards"][0]) == {"name", "records", "bytes", "sha256"}
    assert data["schema"]["features"]["ids"] == {"dtype": "int64", "shape": [39]}
    assert data["inputs"][0]["records_read"] == 100


def test_round_trip(tmp_path):
    m = write_criteo_shards(str(tmp_path / "o"), 100, shard_bytes=10_000)
    assert read_manifest(tmp_path / "o") == m
    assert read_manifest(tmp_path / "o" / "index.json") == m
    assert Manifest.from_json(json.loads(manifest_bytes(m))) == m


def test_records_must_add_up():
    with pytest.raises(ValueError, match="records 5"):
        Manifest(records=5, shards=(ShardInfo("a", 3, 10, "x"),), schema=libsvm_schema(3))


@pytest.mark.parametrize("content,match", [
    ("{not json", "not valid JSON"),
    ('{"format_version": 99}', "format_version 99"),
    ('{"format_version": 1}', "invalid manifest"),
])
def test_bad_manifest(tmp_path, content, match):
    (tmp_path / "index.json").write_text(content)
    with pytest.raises(TfpipeError, match=match):
        read_manifest(tmp_path)


def _edited(tmp_path, fn):
    write_criteo_shards(str(tmp_path / "o"), 100, shard_bytes=10_000)
    data = json.loads((tmp_path / "o" / "index.json").read_text())
    fn(data)
    (tmp_path / "o" / "index.json").write_text(json.dumps(data))
    return tmp_path / "o"


def _shard0(**kw):
    return lambda m: m["shards"][0].update(kw)


_SIDE = {"name": "vocab/C1.txt", "bytes": 3, "sha256": "0" * 64}


def _side(**kw):
    return lambda m: m["extra"].update(files=[dict(_SIDE, **kw)])


@pytest.mark.parametrize("edit,match", [
    (_shard0(name="../x/train-00000-of-00004.tfrecord"), r"shards\[0\] name '\.\./x/.*separator"),
    (_shard0(name="/abs/train-00000-of-00004.tfrecord"), r"shards\[0\] name '/abs/"),
    (_shard0(name="notes.txt"), r"not a tfpipe shard name"),
    (_shard0(name="train-00000-of-00004.tfrecord\r"), r"U\+000D"),
    (_shard0(sha256="x" * 64), r"sha256 must be 64 hex digits"),
    (_shard0(records=-1), r"records must be an integer >= 0"),
    (_shard0(bytes=True), r"bytes must be an integer >= 0"),
    (lambda m: m["shards"].append(dict(m["shards"][0])), r"listed twice"),
    (lambda m: m.update(shards={"a": 1}), r"'shards' must be a list"),
    (lambda m: m["shards"].__setitem__(0, "train-00000-of-00004.tfrecord"), r"shards\[0\] is a str"),
    (lambda m: m["options"].update(tokenizer="/home/u/tok.json"), r"options\.tokenizer '/home/u/tok\.json'"),
    (lambda m: m["extra"].update(tokenizer={"name": "hf:../t.json"}), r"extra\.tokenizer\.name"),
    (_side(name="../x.txt"), r"extra\.files\[0\] name '\.\./x\.txt'.*'\.\.' is not a file name"),
    (_side(name="/etc/passwd"), r"extra\.files\[0\] name '/etc/passwd'"),
    (_side(name="notes.txt"), r"extra\.files\[0\] name 'notes\.txt'.*FOLDER/FILE"),
    (_side(name="vocab/.tfpipe-tmp-x"), r"'\.tfpipe-tmp-x' is a temporary name"),
    (_side(name="train-00000-of-00004.tfrecord"), r"FOLDER/FILE"),
    (_side(sha256="x"), r"extra\.files\[0\] \(vocab/C1\.txt\) sha256 must be 64 hex digits"),
    (_side(bytes=-1), r"bytes must be an integer >= 0"),
    (lambda m: m["extra"].update(files=[_SIDE, _SIDE]), r"extra\.files\[1\] name 'vocab/C1\.txt' is listed twice"),
    (lambda m: m["extra"].update(files={"a": 1}), r"'extra\.files' must be a list"),
])
def test_entries_that_leave_the_set_are_integrity_errors(tmp_path, edit, match):
    d = _edited(tmp_path, edit)
    with pytest.raises(IntegrityError, match=match):
        read_manifest(d)


@pytest.mark.parametrize("content,match", [
    ("[" * 100_000 + "]" * 100_000, "nested too deeply"),
    ("[]", "a JSON object expected"),
    ('"text"', "a JSON object expected"),
    (b"\xff\xfe", "not valid JSON"),
])
def test_hostile_manifest_bytes_are_one_clear_error(tmp_path, content, match):
    p = tmp_path / "index.json"
    p.write_bytes(content if isinstance(content, bytes) else content.encode())
    with pytest.raises(TfpipeError, match=match):
        read_manifest(tmp_path)


def test_missing_manifest(tmp_path):
    with pytest.raises(TfpipeError, match="no manifest"):
        read_manifest(tmp_path)


def test_input_stats_accounting():
    s = InputStats("f")
    s.records_read = 5
    s.records_written = 3
    s.skip("bad_label", example="f:2: bad_label")
    s.skip("nan", 1)
    other = InputStats("f", records_read=2, records_written=2)
    s.merge(other)
    assert s.records_read == s.records_written + s.records_skipped == 7
    assert s.to_json()["skipped"] == {"bad_label": 1, "nan": 1}


def test_manifests_written_before_variable_length_features_still_read(tmp_path):
    """A fixed-width manifest keeps its bytes (shape lists, no sparse options), and reads back unchanged."""
    m = write_criteo_shards(str(tmp_path / "o"), 50, shard_bytes=10_000)
    raw = (tmp_path / "o" / "index.json").read_bytes()
    data = json.loads(raw)
    assert all(f["shape"] is not None for f in data["schema"]["features"].values())
    again = Manifest.from_json(data)
    assert again == m and manifest_bytes(again) == raw and not again.schema.varlen


def test_variable_length_schema_round_trip():
    schema = libsvm_schema(None, qid="qid")
    m = Manifest(records=0, shards=(), schema=schema, extra={"num_features": 7})
    data = json.loads(manifest_bytes(m))
    assert data["schema"]["features"]["ids"] == {"dtype": "int64", "shape": None}
    assert Manifest.from_json(data).schema == schema
    data["schema"]["features"]["ids"]["shape"] = "x"
    with pytest.raises(TfpipeError, match="invalid manifest"):
        Manifest.from_json(data)
