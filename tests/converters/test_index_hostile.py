"""``tfpipe index`` (``converters.shardset.index``) against hostile use: indexing a part
of a per-label group alone is refused with one line naming the group (the group stays consistent), and an
``s3://`` prefix of many small objects is read through one S3 client (one connection pool), not one each."""
from __future__ import annotations

import logging

import numpy as np
import pytest
from hostile import snapshot
from notices import without_compile_notices

from converters.libsvm.options import libsvm_schema
from converters.libsvm.synthetic import criteo_arrays
from converters.shardset.index import index_set
from converters.shardset.options import ShardOutputOptions
from converters.shardset.verify import verify
from converters.tfrecord.examples import serialize_batch


@pytest.fixture
def group(tmp_path):
    from converters.prep.split import LabelSplitWriter

    schema = libsvm_schema(39)
    framed, lengths = serialize_batch(schema, criteo_arrays(40, seed=3))
    with LabelSplitWriter(str(tmp_path / "G"), ShardOutputOptions()) as w:
        w.write(framed, lengths, np.arange(40, dtype=np.float32) % 2)
        w.finish(schema=schema)
    return tmp_path / "G"


@pytest.mark.parametrize("overwrite", [[], ["--overwrite"]])
def test_indexing_a_part_of_a_group_is_refused_naming_the_group(group, capsys, overwrite):
    from converters.cli.main import main

    before = snapshot(group)
    code = main(["index", str(group / "label=0"), "--no-progress", *overwrite])
    err = capsys.readouterr().err
    lines = without_compile_notices(err)
    assert code != 0 and lines.count("\n") == 1 and lines.startswith("tfpipe: error: "), err
    assert "is a part of the group" in err and str(group) in err and "reshard" in err, err
    assert snapshot(group) == before and verify(str(group)).ok


def test_a_folder_named_like_a_part_but_not_listed_is_indexed(group):
    import shutil

    shutil.copytree(group / "label=1", group / "label=7")  # not in G's index.json: a set of its own
    (group / "label=7" / "index.json").unlink()
    assert index_set(str(group / "label=7")).records > 0 and verify(str(group)).ok


def test_an_s3_prefix_of_many_objects_is_indexed_through_one_client(s3, caplog):
    """200 small objects: one S3 client for the whole run (the storage layer logs each client it creates)."""
    schema = libsvm_schema(39)
    framed, lengths = serialize_batch(schema, criteo_arrays(2, seed=1))
    body = framed.tobytes()
    n = 200
    for i in range(n):
        s3.client.put_object(Bucket=s3.bucket, Key=f"many/part-{i:04d}.tfrecord", Body=body)
    caplog.set_level(logging.DEBUG, logger="converters.storage.s3")
    m = index_set(f"{s3.url}/many")
    assert m.records == 2 * n and len(m.shards) == n
    created = [r.getMessage() for r in caplog.records
               if r.name == "converters.storage.s3" and r.getMessage().startswith("new S3 ")]
    # one client for requests and one for object reads (the downloader's retries), whatever the object count
    assert sorted(m.split()[2] for m in created) == ["read", "request"], created
    assert verify(f"{s3.url}/many").ok
