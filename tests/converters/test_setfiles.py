"""converters.shardset.setfiles: a set's files are its shards, the files its manifest keeps beside them
(``extra.files``) and, for a group, its parts' manifests — listed in that order, with ``index.json`` first."""
from __future__ import annotations

import pytest

from converters.libsvm.options import libsvm_schema
from converters.shardset.manifest import Manifest, ShardInfo
from converters.shardset.setfiles import SetFile, listed_names, set_files, side_dirs, side_files_of

SHA = "ab" * 32
VOCAB = [{"name": "vocab/C1.txt", "bytes": 7, "sha256": SHA}, {"name": "vocab/C2.txt", "bytes": 0, "sha256": SHA}]


def manifest(files=None) -> Manifest:
    shards = (ShardInfo("train-00000-of-00002.tfrecord", 2, 10, SHA), ShardInfo("train-00001-of-00002.tfrecord", 1,
                                                                               5, SHA))
    return Manifest(records=3, shards=shards, schema=libsvm_schema(3),
                    extra={} if files is None else {"files": files})


@pytest.mark.parametrize("files, side", [
    (None, []),
    ([], []),
    (VOCAB, [SetFile("vocab/C1.txt", 7, SHA, side=True), SetFile("vocab/C2.txt", 0, SHA, side=True)]),
])
def test_the_files_of_a_set_are_its_shards_then_its_side_files(files, side):
    m = manifest(files)
    shards = [SetFile(s.name, s.bytes, s.sha256) for s in m.shards]
    assert side_files_of(m) == side
    assert set_files(m) == shards + side
    assert listed_names(m) == ["index.json"] + [f.name for f in shards + side]


@pytest.mark.parametrize("names, dirs", [
    (["vocab/C1.txt", "vocab/C2.txt", "train-00000-of-00001.tfrecord"], ["vocab"]),
    (["label=0/index.json", "vocab/C1.txt", "label=0/x"], ["label=0", "vocab"]),
    ([], []),
])
def test_side_dirs_are_the_top_folders_in_listing_order(names, dirs):
    assert side_dirs(names) == dirs


@pytest.mark.parametrize("name, nbytes", [("", 1), ("vocab/C1.txt", -1)])
def test_a_set_file_needs_a_name_and_a_size(name, nbytes):
    with pytest.raises(ValueError, match=repr(name)):
        SetFile(name, nbytes, SHA)
