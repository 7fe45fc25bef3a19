"""The Beam-FileSystems storage (for gs://, hdfs://, ... locations) against a real Beam file system: Beam's
local one (no cloud bucket is reachable here), through the Storage interface and a whole conversion."""
from __future__ import annotations

import os

import pytest
from engines_data import assert_same_output, libsvm_files

from converters.engines.inprocess import run_job
from converters.libsvm.job import LibsvmJob
from converters.libsvm.convert import run as libsvm_local
from converters.libsvm.options import LibsvmOptions
from converters.shardset.options import ShardOutputOptions
from converters.storage import LocalStorage, open_storage
from converters.storage.beamfs import BeamFSStorage, has_scheme

pytest.importorskip("apache_beam")


def test_storage_interface(tmp_path):
    s = BeamFSStorage(str(tmp_path / "out"))
    assert s.list() == [] and not s.exists("index.json")
    s.write_bytes_atomic("index.json", b"{}")
    assert s.list() == ["index.json"] and s.read_bytes("index.json") == b"{}"
    local = os.path.join(s.staging_dir(), "x")
    with open(local, "wb") as f:
        f.write(b"shard bytes")
    s.stage(local, ".tfpipe-tmp-x")
    assert not os.path.exists(local) and s.list() == [".tfpipe-tmp-x", "index.json"]
    s.publish(".tfpipe-tmp-x", "train-00000-of-00001.tfrecord")
    s.fetch("train-00000-of-00001.tfrecord", str(tmp_path / "back"))
    assert (tmp_path / "back").read_bytes() == b"shard bytes"
    assert s.read_range("train-00000-of-00001.tfrecord", 6, 11) == b"bytes"   # a ranged read (pass 2's buckets)
    s.delete("index.json")
    s.delete("never-there")
    assert s.list() == ["train-00000-of-00001.tfrecord"]
    with pytest.raises(FileNotFoundError):
        s.read_bytes("index.json")


@pytest.mark.parametrize("url, scheme", [("gs://b/p", True), ("hdfs://h/p", True), ("/tmp/x", False),
                                         ("rel/dir", False), ("C:/x", False), ("s3://b/p", True)])
def test_scheme_detection(url, scheme):
    assert has_scheme(url) == scheme


def test_open_storage_dispatch(tmp_path):
    assert isinstance(open_storage(str(tmp_path)), LocalStorage)
    assert isinstance(open_storage("gs://bucket/prefix"), BeamFSStorage)
    with pytest.raises(ValueError, match="apply to s3://"):
        open_storage("gs://bucket/prefix", endpoint_url="http://x")


def test_a_conversion_through_beam_file_systems(tmp_path, monkeypatch):
    """Every output operation of a two-pass run (temporary area, shards, manifest) through BeamFSStorage."""
    import converters.engines.area as area
    import converters.shardset.output as output

    monkeypatch.setattr(area, "open_storage", lambda url, **kw: BeamFSStorage(url))
    monkeypatch.setattr(output, "open_storage", lambda url, **kw: BeamFSStorage(url))
    files = libsvm_files(tmp_path / "in", sizes=(5, 300, 900))
    opts = LibsvmOptions(39, output=ShardOutputOptions(shard_size=50_000))
    m = run_job(LibsvmJob.create(files, tmp_path / "beamfs", opts, unit_size=40_000))
    monkeypatch.undo()
    assert m == libsvm_local(files, tmp_path / "local", opts, workers=1)
    assert_same_output(tmp_path / "local", tmp_path / "beamfs")
