"""The one commit path (``converters.shardset.commit``): shards published, manifest last, a set committed there
before replaced only when the new manifest commits, everything put back on failure; and the overlap rule
(``converters.shardset.overlap``)."""
from __future__ import annotations

import hashlib
import os

import numpy as np
import pytest

from converters.libsvm.options import libsvm_schema
from converters.libsvm.synthetic import criteo_arrays
from converters.shardset import commit as commit_mod
from converters.shardset.commit import ASIDE_PREFIX, Move, commit_set, committed_names
from converters.shardset.options import ShardOutputOptions
from converters.shardset.output import check_run_id, prepare_output
from converters.shardset.overlap import check_disjoint, resolve, within
from converters.shardset.verify import verify
from converters.shardset.writer import ShardSetWriter
from converters.storage import TMP_PREFIX, open_storage
from converters.tfrecord.examples import serialize_batch
from converters.util.errors import OutputError, OverlapError

SCHEMA = libsvm_schema(39)


def write_set(out, n: int, seed: int, shard_size: int = 20_000, overwrite: bool = False, storage=None):
    framed, lengths = serialize_batch(SCHEMA, criteo_arrays(n, seed=seed))
    kw = {"storage": storage} if storage is not None else {"overwrite": overwrite}
    with ShardSetWriter(str(out), ShardOutputOptions(shard_size=shard_size), **kw) as w:
        w.write(framed, lengths)
        return w.finish(schema=SCHEMA)


def tree(root) -> dict[str, str]:
    out = {}
    for d, _, files in os.walk(root):
        for f in files:
            p = os.path.join(d, f)
            with open(p, "rb") as fh:
                out[os.path.relpath(p, root)] = hashlib.sha256(fh.read()).hexdigest()
    return out


class Failing:
    """Storage that raises ENOSPC on the ``n``-th call of ``method`` whose arguments mention ``match``."""

    def __init__(self, inner, method: str, n: int = 1, match: str = ""):
        self.inner, self.method, self.n, self.match = inner, method, n, match

    def __getattr__(self, name):
        fn = getattr(self.inner, name)
        if name != self.method:
            return fn

        def call(*args, **kw):
            if any(self.match in str(a) for a in args):
                self.n -= 1
                if self.n == 0:
                    raise OSError(28, "No space left on device", str(args[-1]))
            return fn(*args, **kw)
        return call


REAL_COMMIT = commit_mod._commit


def _fail_in_commit(monkeypatch, method: str, n: int = 1, match: str = ""):
    real = REAL_COMMIT

    def failing(storage, *a, **kw):
        return real(Failing(storage, method, n, match), *a, **kw)
    monkeypatch.setattr(commit_mod, "_commit", failing)


# -- replace on commit: the old set stays until the new manifest commits --------------------------------------

@pytest.mark.parametrize("n_new, shard_size", [(300, 20_000), (300, 10_000), (40, 1 << 30)],
                         ids=["same-names", "more-shards", "one-shard"])
def test_overwrite_replaces_on_commit(tmp_path, n_new, shard_size):
    out = tmp_path / "out"
    write_set(out, 300, seed=1)
    m = write_set(out, n_new, seed=2, shard_size=shard_size, overwrite=True)
    assert verify(str(out)).ok and m.records == n_new
    assert sorted(os.listdir(out)) == sorted(["index.json"] + [s.name for s in m.shards])  # old shards retired


@pytest.mark.parametrize("method, n, match", [
    ("write_bytes_atomic", 1, "index.json"),   # the manifest itself cannot be written
    ("publish", 2, ""),                         # a shard cannot be moved (after the old manifest went aside)
    ("publish", 5, ""),                         # later: some new shards are already in place
])
@pytest.mark.parametrize("shard_size", [20_000, 10_000], ids=["names-clash", "new-names"])
def test_failed_commit_leaves_the_old_set_exactly(tmp_path, monkeypatch, method, n, match, shard_size):
    out = tmp_path / "out"
    write_set(out, 300, seed=1)
    before = tree(out)
    _fail_in_commit(monkeypatch, method, n, match)
    with pytest.raises(OutputError, match="No space left"):
        write_set(out, 300, seed=2, shard_size=shard_size, overwrite=True)
    assert tree(out) == before and verify(str(out)).ok
    assert not [n for n in os.listdir(out) if n.startswith(TMP_PREFIX)]


def test_failure_before_commit_leaves_the_old_set(tmp_path):
    out = tmp_path / "out"
    write_set(out, 300, seed=1)
    before = tree(out)
    framed, lengths = serialize_batch(SCHEMA, criteo_arrays(100, seed=2))
    with pytest.raises(RuntimeError, match="bad input"):
        with ShardSetWriter(str(out), ShardOutputOptions(shard_size=5_000), overwrite=True) as w:
            w.write(framed, lengths)  # several temporary shards are written beside the old set
            assert verify(str(out)).ok
            raise RuntimeError("bad input line")
    assert tree(out) == before and verify(str(out)).ok


def test_interrupted_commit_is_put_back_by_the_next_run(tmp_path, monkeypatch):
    """A kill between setting the old files aside and the new manifest: the next run puts the old set back
    before it looks at the location (then replaces it as asked)."""
    out = tmp_path / "out"
    write_set(out, 300, seed=1)
    before = tree(out)
    monkeypatch.setattr(commit_mod, "_roll_back", lambda *a, **k: None)  # as if killed: nothing taken back
    _fail_in_commit(monkeypatch, "publish", 3)
    with pytest.raises(OutputError):
        write_set(out, 300, seed=2, overwrite=True)
    assert "index.json" not in os.listdir(out) and any(n.startswith(ASIDE_PREFIX) for n in os.listdir(out))
    monkeypatch.undo()
    storage = prepare_output(str(out), overwrite=True)
    storage.claim.release()
    assert tree(out) == before and verify(str(out)).ok


def test_committed_names_of_a_group_and_of_nothing(tmp_path):
    from converters.prep.split import LabelSplitWriter

    assert committed_names(open_storage(str(tmp_path / "none"))) == []
    framed, lengths = serialize_batch(SCHEMA, criteo_arrays(60, seed=3))
    labels = np.arange(60, dtype=np.float32) % 2
    with LabelSplitWriter(str(tmp_path / "g"), ShardOutputOptions()) as w:
        w.write(framed, lengths, labels)
        w.finish(schema=SCHEMA)
    names = committed_names(open_storage(str(tmp_path / "g")))
    assert names[0] == "index.json" and "label=0/index.json" in names and "label=1/index.json" in names
    assert any(n.startswith("label=1/train-") for n in names)


@pytest.mark.parametrize("fail", [None, ("write_bytes_atomic", 1, "label=1/index.json"),
                                  ("write_bytes_atomic", 1, "index.json"), ("publish", 4, "")])
def test_group_replaced_on_commit(tmp_path, monkeypatch, fail):
    from converters.prep.split import LabelSplitWriter

    def group(seed, labels_mod):
        framed, lengths = serialize_batch(SCHEMA, criteo_arrays(90, seed=seed))
        labels = np.arange(90, dtype=np.float32) % labels_mod
        with LabelSplitWriter(str(tmp_path / "g"), ShardOutputOptions(shard_size=4_000), overwrite=True) as w:
            w.write(framed, lengths, labels)
            return w.finish(schema=SCHEMA)

    group(1, 3)
    before = tree(tmp_path / "g")
    if fail is None:
        group(2, 2)
        assert verify(str(tmp_path / "g")).ok and sorted(os.listdir(tmp_path / "g")) == [
            "index.json", "label=0", "label=1"]  # label=2 of the old group is gone
        return
    _fail_in_commit(monkeypatch, *fail)
    with pytest.raises(OutputError):
        group(2, 2)
    assert tree(tmp_path / "g") == before and verify(str(tmp_path / "g")).ok


def test_processing_style_commit_is_repeatable(tmp_path):
    """``resumable``: a move an interrupted attempt made is recognised by its size; the same commit again
    finishes the job."""
    st = open_storage(str(tmp_path / "out"))
    st.write_bytes_atomic(".tfpipe-tmp-r1-a", b"12345")
    st.write_bytes_atomic(".tfpipe-tmp-r1-b", b"678")
    moves = [Move(".tfpipe-tmp-r1-a", "train-00000-of-00002.tfrecord", 5),
             Move(".tfpipe-tmp-r1-b", "train-00001-of-00002.tfrecord", 3)]
    st.publish(moves[0].tmp, moves[0].final)  # the interrupted attempt got this far
    commit_set(st, moves, b"{}", run_id="r1", resumable=True)
    assert sorted(os.listdir(tmp_path / "out")) == ["index.json", "train-00000-of-00002.tfrecord",
                                                    "train-00001-of-00002.tfrecord"]


def test_commit_on_s3_replaces_on_commit(s3, monkeypatch):
    from moto_s3 import keys

    out = f"{s3.url}/set"
    write_set(out, 300, seed=1)
    before = {k: s3.client.get_object(Bucket=s3.bucket, Key=k)["Body"].read() for k in keys(s3)}
    _fail_in_commit(monkeypatch, "write_bytes_atomic", 1, "index.json")
    with pytest.raises(OutputError):
        write_set(out, 300, seed=2, overwrite=True)
    after = {k: s3.client.get_object(Bucket=s3.bucket, Key=k)["Body"].read() for k in keys(s3)}
    assert after == before and verify(out).ok
    monkeypatch.setattr(commit_mod, "_commit", REAL_COMMIT)
    m = write_set(out, 100, seed=2, shard_size=1 << 30, overwrite=True)
    assert verify(out).ok and keys(s3) == sorted(f"set/{n}" for n in ["index.json", m.shards[0].name])


# -- run ids ----------------------------------------------------------------------------------------------

@pytest.mark.parametrize("bad", [".", "..", "", " ", "a b", "a\nb", "a/b", "x" * 65, "é"])
def test_bad_run_ids_are_refused(bad):
    with pytest.raises(ValueError, match="run id"):
        check_run_id(bad)


@pytest.mark.parametrize("good", ["proc-0123abcdef", "r1", "A_b-9"])
def test_good_run_ids(good):
    assert check_run_id(good) == good


# -- overlaps ---------------------------------------------------------------------------------------------

@pytest.mark.parametrize("inner, outer, inside", [
    ("/a/b", "/a/b", True), ("/a/b/c", "/a/b", True), ("/a/bc", "/a/b", False), ("/a", "/a/b", False),
    ("s3://b/data/x", "s3://b/data", True), ("s3://b/data2", "s3://b/data", False),
    ("s3://b/data/", "s3://b/data", True), ("s3://b//data", "s3://b/data", True),
    ("s3://b2/data", "s3://b/data", False), ("s3://b/data", "/b/data", False),
    ("s3://b/G/label=0", "s3://b/G", True), ("s3://b/G", "s3://b/G/label=0", False),
])
def test_within(inner, outer, inside):
    assert within(resolve(inner), resolve(outer)) is inside


def test_resolve_follows_symlinks(tmp_path):
    (tmp_path / "real").mkdir()
    os.symlink(tmp_path / "real", tmp_path / "link")
    assert within(resolve(tmp_path / "link" / "out"), resolve(tmp_path / "real"))


@pytest.mark.parametrize("out, sources, match", [
    ("G/label=0", ["G"], "inside the input G"),
    ("G", ["G/label=0"], "is inside the output"),
    ("G", ["G"], "is the input"),
    ("G/../G", ["G/."], "is the input"),
    ("other", ["G"], None),
    ("G2", ["G"], None),
    ("link/label=0", ["G"], "inside the input G"),
])
def test_check_disjoint_local(tmp_path, monkeypatch, out, sources, match):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "G").mkdir()
    os.symlink(tmp_path / "G", tmp_path / "link")
    if match is None:
        check_disjoint(out, sources)
        return
    with pytest.raises(OverlapError, match=match):
        check_disjoint(out, sources)


def test_check_disjoint_refuses_a_part_of_a_group(tmp_path):
    from converters.prep.split import LabelSplitWriter

    framed, lengths = serialize_batch(SCHEMA, criteo_arrays(20, seed=3))
    with LabelSplitWriter(str(tmp_path / "g"), ShardOutputOptions()) as w:
        w.write(framed, lengths, np.arange(20, dtype=np.float32) % 2)
        w.finish(schema=SCHEMA)
    with pytest.raises(OverlapError, match="is a part of the group"):
        check_disjoint(str(tmp_path / "g" / "label=1"), [str(tmp_path / "in.libsvm")])
    check_disjoint(str(tmp_path / "g" / "label=7"), [str(tmp_path / "in.libsvm")])  # not a part: fine


def test_shards_are_published_from_one_module():
    """``Storage.publish`` (a shard to its final name) is called by the commit path alone; the
    gzip shard stream is opened in one module."""
    import pathlib
    import re

    root = pathlib.Path(__file__).resolve().parents[2]
    publish, gzip_writers = [], []
    for pkg in ("converters", "sharding", "pipeline", "bench"):
        for path in (root / pkg).rglob("*.py"):
            rel = path.relative_to(root).as_posix()
            text = path.read_text()
            if re.search(r"\.publish\(", text) and not rel.startswith("converters/storage/"):
                publish.append(rel)
            if re.search(r"GzipFile\([^)]*\"wb\"|GzipFile\([^)]*mode=\"wb\"", text):
                gzip_writers.append(rel)
    assert publish == ["converters/shardset/commit.py"]
    assert gzip_writers == ["converters/shardset/shardfile.py"]


def test_a_commit_of_an_earlier_version_without_a_journal_is_put_back(tmp_path):
    """Old manifest and a shard set aside by a tfpipe without commit journals, a new shard under the old
    name: the next run (refused) moves both back over whatever holds their names."""
    from converters.util.errors import OutputExistsError

    out = tmp_path / "out"
    m = write_set(out, 300, seed=1)
    before = tree(out)
    shard = m.shards[0].name
    os.replace(out / "index.json", out / f"{ASIDE_PREFIX}r1-index.json")
    os.replace(out / shard, out / f"{ASIDE_PREFIX}r1-{shard}")
    (out / shard).write_bytes(b"new bytes of an uncommitted set")
    with pytest.raises(OutputExistsError, match="not empty"):
        prepare_output(str(out), overwrite=False)
    assert tree(out) == before and verify(str(out)).ok
