"""The commit journal acts only on what it can prove it owns (``converters.shardset.journal``, ``ownership``,
``commit.recover``): a journal of another set copied into a healthy one, a journal naming a user's file or the
manifest, a huge, deeply nested or FIFO journal: each is refused in one line and every byte of the set and of
the user's files stays; a refused rerun after a killed ``--overwrite`` leaves none of the killed run's new
shards behind; the same run (a Processing rerun) keeps them to publish again."""
from __future__ import annotations

import hashlib
import json
import os
import shutil
from pathlib import Path

import pytest
from hostile import snapshot
from killpoints import KILLED, run_killed
from test_commit_kills import N_RECORDS, SHARD_BYTES, files, the_set, writer

from converters.shardset.journal import JOURNAL_PREFIX, MAX_JOURNAL_BYTES, Journal, is_journal
from converters.shardset.output import prepare_output
from converters.shardset.verify import verify
from converters.storage import CLAIM_NAME, TMP_PREFIX, open_storage
from converters.util.errors import IntegrityError, OutputExistsError, TfpipeError

S = 4  # shards of the old and the new set (the same names: every new shard takes an old one's name)


def snap(out: Path) -> dict:
    """Every file at ``out`` but the claim (a killed run's stale claim is taken over and released)."""
    return {k: v for k, v in snapshot(out).items() if k != CLAIM_NAME}


def _sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def killed_overwrite(root: Path, name: str, k: int) -> Path:
    """A set at ``root/name`` whose ``--overwrite`` was killed before commit call ``k`` (the journal is call 1,
    then index.json and the S shards set aside, then the S publishes, then the manifest)."""
    out = root / name
    writer(str(out), 1)()
    assert run_killed(k, writer(str(out), 2), root / f"{name}.calls") == KILLED
    return out


def journal_of(out: Path) -> Path:
    found = [p for p in out.iterdir() if is_journal(p.name)]
    assert len(found) == 1, sorted(p.name for p in out.iterdir())
    return found[0]


def refused_and_overwrite_runs(out: Path) -> list[str]:
    """A refused run and an ``--overwrite`` run into ``out``: the one-line errors they end with."""
    errors = []
    for overwrite in (False, True):
        with pytest.raises(TfpipeError) as e:
            prepare_output(str(out), overwrite=overwrite)
        assert "\n" not in str(e.value)
        errors.append(str(e.value))
    return errors


@pytest.fixture(scope="module")
def killed(tmp_path_factory) -> Path:
    """Set A, its ``--overwrite`` killed half-way through the publishes (old set aside, new shards in part)."""
    return killed_overwrite(tmp_path_factory.mktemp("killed"), "A", 1 + (1 + S) + S // 2 + 1)


@pytest.mark.parametrize("same_bytes", [False, True], ids=["another-set", "a-byte-copy-of-A"])
def test_a_journal_of_another_set_touches_nothing(killed, tmp_path, same_bytes):
    """A's journal copied into a healthy set B (another set, or one with A's very manifest): both runs are
    refused naming the journal, and every byte of B stays (the journal too: the user decides)."""
    b = tmp_path / "B"
    writer(str(b), 1 if same_bytes else 3)()
    shutil.copy(journal_of(killed), b)
    before = snapshot(b)
    for err in refused_and_overwrite_runs(b):
        assert "does not belong to the set here" in err and JOURNAL_PREFIX in err and "another location" in err
    assert snapshot(b) == before
    assert verify(str(b)).ok


def test_a_journal_moved_with_its_directory_still_recovers(tmp_path):
    """The directory renamed (same device and inode): the journal is still its own."""
    out = killed_overwrite(tmp_path, "A", 1 + (1 + S) + 2)
    moved = tmp_path / "moved"
    os.rename(out, moved)
    with pytest.raises(OutputExistsError, match="not empty"):
        prepare_output(str(moved), overwrite=False)
    assert verify(str(moved)).ok and not [n for n in files(str(moved)) if TMP_PREFIX in n]


def _tampered(out: Path, edit) -> Path:
    path = journal_of(out)
    doc = json.loads(path.read_bytes())
    edit(doc)
    path.write_bytes(json.dumps(doc).encode())
    return path


@pytest.mark.parametrize("edit, match", [
    (lambda d: d["retire"].append(["index.json", 10, "0" * 64]), "cannot be retired"),
    (lambda d: d["moves"].append([d["moves"][0][0], "index.json", 10, "0" * 64]), "cannot be a shard"),
    (lambda d: d["moves"].append(["notes.txt", "train-9.tfrecord", 10, "0" * 64]), "is not one of run"),
    (lambda d: d["moves"].append([".tfpipe-tmp-other-x", "notes.txt", 10, "0" * 64]), "is not one of run"),
    (lambda d: d["aside"].append("index.json"), "cannot be set aside"),
    (lambda d: d["retire"].append(["notes.txt", 4]), "must be"),
    (lambda d: d.update(format_version=1), "format_version 1"),
    (lambda d: d["moves"].append(["../x", "y", 1, "0" * 64]), "not a name inside"),
], ids=["retire-index", "move-onto-index", "tmp-is-a-user-file", "tmp-of-another-run", "aside-index-twice",
        "retire-without-digest", "format-1", "dotdot"])
def test_a_journal_that_names_what_it_cannot_own_is_refused(tmp_path, edit, match):
    out = killed_overwrite(tmp_path, "A", 1 + (1 + S) + 2)
    (out / "notes.txt").write_bytes(b"mine")
    _tampered(out, edit)
    before = snap(out)
    for err in refused_and_overwrite_runs(out):
        assert "not a tfpipe commit journal" in err and match in err, err
    assert snap(out) == before


def test_a_move_onto_a_user_file_touches_nothing(tmp_path):
    """A journal of this set that says its new shard is ``notes.txt``: the file does not hold that shard's
    bytes, so the roll-back touches nothing at all and says which file."""
    out = killed_overwrite(tmp_path, "A", 1 + (1 + S) + 2)
    (out / "notes.txt").write_bytes(b"mine")
    run = journal_of(out).name[len(JOURNAL_PREFIX):-len(".json")]
    _tampered(out, lambda d: d["moves"].append([f"{TMP_PREFIX}{run}-x", "notes.txt", 4, _sha(b"ours")]))
    before = snap(out)
    for err in refused_and_overwrite_runs(out):
        assert "cannot be rolled back: notes.txt" in err and "touched nothing" in err, err
    assert snap(out) == before


def test_a_retired_user_file_that_does_not_match_stays(tmp_path):
    """The new manifest was published (the kill came during the clean-up): finishing it deletes only the old
    files that hold what the journal recorded; ``notes.txt`` named there with other bytes stays."""
    out = tmp_path / "A"
    writer(str(out), 1, shard_bytes=SHARD_BYTES)()
    count = tmp_path / "calls"
    assert run_killed(0, writer(str(out), 2, shard_bytes=3 * SHARD_BYTES), count) == 0
    new = the_set(str(out))
    shutil.rmtree(out)
    writer(str(out), 1, shard_bytes=SHARD_BYTES)()
    n = int(count.read_text())
    assert run_killed(n, writer(str(out), 2, shard_bytes=3 * SHARD_BYTES), count) == KILLED  # before the journal's delete
    (out / "notes.txt").write_bytes(b"mine")
    _tampered(out, lambda d: d["retire"].append(["notes.txt", 4, _sha(b"else")]))
    with pytest.raises(OutputExistsError, match="not empty"):
        prepare_output(str(out), overwrite=False)
    assert (out / "notes.txt").read_bytes() == b"mine"
    assert {k: v for k, v in the_set(str(out)).items() if k != "notes.txt"} == new and verify(str(out)).ok


@pytest.mark.parametrize("kind", ["huge", "nested", "fifo"])
def test_a_journal_that_cannot_be_read_safely_is_one_line(tmp_path, kind):
    out = tmp_path / "A"
    writer(str(out), 1)()
    path = out / f"{JOURNAL_PREFIX}r1.json"
    if kind == "huge":
        with open(path, "wb") as f:
            f.truncate(MAX_JOURNAL_BYTES * 10)  # sparse: refused by its size, never read
    elif kind == "nested":
        path.write_bytes(b"[" * 200_000 + b"]" * 200_000)
    else:
        os.mkfifo(path)
    before = snap(out)
    errors = refused_and_overwrite_runs(out)
    match = {"huge": "bytes, more than", "nested": "nests deeper", "fifo": "not a regular file"}[kind]
    assert all(match in e for e in errors), errors
    assert snap(out) == before


def test_a_refused_rerun_leaves_no_temporary_of_the_killed_run(tmp_path):
    """Killed half-way through its publishes: the refused rerun brings the old set back and deletes the
    killed run's new shards (under their final and their temporary names)."""
    out = tmp_path / "A"
    writer(str(out), 1)()
    old = the_set(str(out))
    assert run_killed(1 + (1 + S) + 2, writer(str(out), 2), tmp_path / "calls") == KILLED
    assert [n for n in files(str(out)) if n.startswith(TMP_PREFIX) and not n.startswith(JOURNAL_PREFIX)]
    with pytest.raises(OutputExistsError, match="not empty"):
        prepare_output(str(out), overwrite=False)
    assert the_set(str(out)) == old and verify(str(out)).ok
    assert not [n for n in files(str(out)) if TMP_PREFIX in n], sorted(files(str(out)))


def test_the_same_run_keeps_its_new_shards_to_publish_again(tmp_path):
    """``recover(run_id=<the journal's run>)`` (a Processing rerun's commit) rolls back to the old set and keeps
    the new shards under their temporary names."""
    from converters.shardset.commit import recover

    out = tmp_path / "A"
    writer(str(out), 1)()
    old = the_set(str(out))
    assert run_killed(1 + (1 + S) + 2, writer(str(out), 2), tmp_path / "calls") == KILLED
    run = journal_of(out).name[len(JOURNAL_PREFIX):-len(".json")]
    assert recover(open_storage(str(out)), str(out), run_id=run) == [run]
    assert the_set(str(out)) == old
    kept = [n for n in files(str(out)) if n.startswith(f"{TMP_PREFIX}{run}-")]
    assert len(kept) == S, sorted(files(str(out)))


def test_a_journal_of_another_s3_prefix_touches_nothing(s3, tmp_path):
    """On S3 the location is the URL: A's journal copied under B's prefix is refused, every object stays."""
    from moto_s3 import keys

    a = tmp_path / "A"
    killed = killed_overwrite(tmp_path, "A", 1 + (1 + S) + 2)
    assert killed == a
    b = f"{s3.url}/B"
    writer(b, 3)()
    j = journal_of(a)
    s3.client.put_object(Bucket=s3.bucket, Key=f"B/{j.name}", Body=j.read_bytes())
    before = {k: s3.client.get_object(Bucket=s3.bucket, Key=k)["Body"].read() for k in keys(s3)}
    for overwrite in (False, True):
        with pytest.raises(IntegrityError, match="does not belong to the set here"):
            prepare_output(b, overwrite=overwrite)
    assert {k: s3.client.get_object(Bucket=s3.bucket, Key=k)["Body"].read() for k in keys(s3)} == before


# -- the model: what a journal may name ---------------------------------------------------------------------

SHA = "a" * 64


@pytest.mark.parametrize("kw, match", [
    ({"moves": (("x", "train-0", 1, SHA),)}, "is not one of run"),
    ({"moves": ((".tfpipe-tmp-r1-x", ".tfpipe-tmp-y", 1, SHA),)}, "cannot be a shard"),
    ({"moves": ((".tfpipe-tmp-r1-x", "train-0", -1, SHA),)}, "not a byte count"),
    ({"moves": ((".tfpipe-tmp-r1-x", "train-0", 1, "x"),)}, "not a sha256"),
    ({"parts": (("index.json", 1, SHA),)}, "is not <part>/index.json"),
    ({"parts": (("label=0/notes.txt", 1, SHA),)}, "is not <part>/index.json"),
    ({"aside": ("train-0", "index.json")}, "cannot be set aside"),
    ({"retire": (("index.json", 1, SHA),)}, "cannot be retired"),
    ({"retire": ((".tfpipe-tmp-claim", 1, SHA),)}, "cannot be retired"),
    ({"old_manifest_sha256": "nope"}, "not a sha256"),
    ({"location": ""}, "not a location"),
    ({"dirs": ("mine",)}, "holds none of the commit's new files"),
])
def test_journal_model_refuses(kw, match):
    with pytest.raises(ValueError, match=match):
        Journal(**{"run": "r1", "manifest_sha256": SHA, "location": "local:1:2", **kw})


@pytest.mark.parametrize("tmp", [".tfpipe-tmp-r1-a", "label=0/.tfpipe-tmp-r1-a", ".tfpipe-tmp-r1/part-algo-1/a"])
def test_a_temporary_name_of_its_run_or_in_its_work_area(tmp):
    Journal(run="r1", manifest_sha256=SHA, location="local:1:2", moves=((tmp, "train-0", 1, SHA),))


@pytest.mark.parametrize("tmp", [".tfpipe-tmp-r12-a", ".tfpipe-tmp-r1x/a", "part/.tfpipe-tmp-r2-a", "notes.txt"])
def test_a_temporary_name_of_another_run_is_refused(tmp):
    with pytest.raises(ValueError, match="is not one of run r1's"):
        Journal(run="r1", manifest_sha256=SHA, location="local:1:2", moves=((tmp, "train-0", 1, SHA),))


def test_journal_round_trip():
    j = Journal(run="r1", manifest_sha256=SHA, location="local:1:2", old_manifest_sha256=None, where="/x",
                moves=((".tfpipe-tmp-r1-a", "train-0", 3, SHA),), parts=(("label=0/index.json", 2, SHA),),
                aside=("index.json", "train-0"), retire=(("train-9", 5, SHA),), dirs=("label=0",))
    assert Journal.from_bytes(j.to_bytes(), "j") == j
