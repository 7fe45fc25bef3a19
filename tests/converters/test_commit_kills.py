"""Kill points of the one commit path (``converters.shardset.commit``): a child process replaces a set with
``--overwrite`` and is killed (``os._exit``) just before a mutating storage call of the commit: the first call
of each distinct step (``killpoints.by_step``, which says why that reaches every state a kill can leave) and the
last call, on a local disk and in S3 (moto). After each kill: a refused run (no
``--overwrite``), ``verify``, a failing ``--overwrite`` run (its input breaks before the commit), ``verify``
again — the set verifies and is, byte for byte, the old set or (only when its manifest was published) the new
one, nothing set aside is ever deleted before it was put back, and the refused run leaves none of the
temporary files of a killed run that wrote its journal."""
from __future__ import annotations

import functools
import hashlib
import shutil
from pathlib import Path

import numpy as np
import pytest
from hostile import snapshot
from killpoints import KILLED, by_step, commit_calls, commit_steps, run_cli_killed, run_killed

from converters.shardset.journal import ASIDE_PREFIX, JOURNAL_PREFIX
from converters.shardset.output import prepare_output
from converters.shardset.verify import verify
from converters.storage import TMP_PREFIX, open_storage
from converters.util.errors import OutputExistsError

N_RECORDS, SHARD_BYTES = 60, 6_000   # 4 shards of ~4.3 KiB records each: a commit of ~17 storage calls


@functools.lru_cache(maxsize=4)
def _storage(url: str):
    """One storage (and S3 client) per location for the tests' own looks at it."""
    return open_storage(url)


def files(url: str) -> dict[str, str]:
    """Every file at the location, recursively (temporary ones too): name -> sha256."""
    st = _storage(url)
    local = st.local_path("")
    if local is None:
        return {n: hashlib.sha256(st.read_bytes(n)).hexdigest() for n, _ in st.list_tree("")}
    return {n: v[1] for n, v in snapshot(Path(local)).items() if v[0] == "file"}


def the_set(url: str, every: dict[str, str] | None = None) -> dict[str, str]:
    """The files at the location that are not temporary (of ``every``: ``files(url)`` already taken)."""
    every = files(url) if every is None else every
    return {n: h for n, h in every.items() if not n.rsplit("/", 1)[-1].startswith(TMP_PREFIX)}


def writer(out: str, seed: int, *, group: bool = False, shard_bytes: int = SHARD_BYTES):
    """A function that writes a set (or a per-label group) of ``N_RECORDS`` records over ``out``."""
    from converters.libsvm.options import libsvm_schema
    from converters.libsvm.synthetic import criteo_arrays, write_criteo_shards
    from converters.prep.split import LabelSplitWriter
    from converters.shardset.options import ShardOutputOptions
    from converters.tfrecord.examples import serialize_batch

    def write_group():
        schema = libsvm_schema(39)
        framed, lengths = serialize_batch(schema, criteo_arrays(N_RECORDS, seed=seed))
        with LabelSplitWriter(out, ShardOutputOptions(shard_size=shard_bytes), overwrite=True) as w:
            w.write(framed, lengths, np.arange(N_RECORDS, dtype=np.float32) % 2)
            w.finish(schema=schema)

    def write_set():
        write_criteo_shards(out, N_RECORDS, seed=seed, shard_bytes=shard_bytes, overwrite=True)

    return write_group if group else write_set


def failing_overwrite(out: str) -> None:
    """An ``--overwrite`` run whose input breaks after it wrote temporary shards, before its commit."""
    from converters.libsvm.options import libsvm_schema
    from converters.libsvm.synthetic import criteo_arrays
    from converters.shardset.options import ShardOutputOptions
    from converters.shardset.writer import ShardSetWriter
    from converters.tfrecord.examples import serialize_batch

    framed, lengths = serialize_batch(libsvm_schema(39), criteo_arrays(30, seed=9))
    with pytest.raises(RuntimeError, match="bad input"):
        with ShardSetWriter(out, ShardOutputOptions(shard_size=SHARD_BYTES), overwrite=True) as w:
            w.write(framed, lengths)
            raise RuntimeError("bad input line")


def check_after_kill(out: str, old: dict, new: dict, k: int) -> None:
    """A refused run, verify, a failing --overwrite run, verify: one complete set, the old or the new one."""
    with pytest.raises(OutputExistsError, match="not empty"):
        prepare_output(out, overwrite=False)
    report = verify(out)
    assert report.ok, f"kill point {k}: {report.problems}"
    every = files(out)  # one look at the location after each run: every check below reads it
    now = the_set(out, every)
    assert now in (old, new), f"kill point {k}: neither the old nor the new set: {sorted(now)}"
    assert not [n for n in every if ASIDE_PREFIX in n or JOURNAL_PREFIX in n], f"kill point {k}"
    if k > 1:  # (killed before call 1, the journal's write, its staged shards are not the journal's to prove)
        assert not [n for n in every if TMP_PREFIX in n], f"kill point {k}: the killed run's shards stay"
    failing_overwrite(out)
    report, every = verify(out), files(out)
    assert report.ok and the_set(out, every) == now, f"kill point {k}: {report.problems}"
    assert not [n for n in every if TMP_PREFIX in n], f"kill point {k}: {sorted(every)}"


def sweep(tmp_path, copy_old, out: str, write_new) -> list[str]:
    """Kill the replacing run before the first call of each step of its commit and before the last call;
    returns which set each kill point left (old/new)."""
    old = the_set(out)
    count = tmp_path / "calls"
    assert run_killed(0, write_new, count) == 0
    new, n, steps = the_set(out), commit_calls(count), commit_steps(count)
    assert new != old and n >= 5 and len(steps) == n
    points = by_step(steps)
    assert {"publish tmp>shard", "write_bytes_atomic manifest"} <= {steps[k - 1] for k in points}, steps
    seen = []
    for k in points:
        copy_old()
        assert run_killed(k, write_new, count) == KILLED, k
        check_after_kill(out, old, new, k)
        seen.append("new" if the_set(out) == new else "old")
    return seen


@pytest.mark.parametrize("new_shard_bytes, group", [(SHARD_BYTES, False), (3 * SHARD_BYTES, False),
                                                    (SHARD_BYTES, True)],
                         ids=["same-names", "new-names", "group"])
def test_each_commit_step_killed_in_a_local_overwrite(tmp_path, new_shard_bytes, group):
    pristine, out = tmp_path / "pristine", tmp_path / "out"
    writer(str(pristine), 1, group=group)()

    def copy_old():
        shutil.rmtree(out, ignore_errors=True)
        shutil.copytree(pristine, out)

    copy_old()
    seen = sweep(tmp_path, copy_old, str(out), writer(str(out), 2, group=group, shard_bytes=new_shard_bytes))
    assert seen[0] == "old" and seen[-1] == "new" and seen == sorted(seen, key=["old", "new"].index), seen


def test_kill_points_of_an_s3_overwrite(s3, tmp_path):
    """On S3 a publish is a copy then a delete: a kill between them (a step of its own) is inside the publish."""
    out = f"{s3.url}/set"
    pristine = tmp_path / "pristine"
    from converters.libsvm.synthetic import write_criteo_shards

    write_criteo_shards(str(pristine), N_RECORDS, seed=1, shard_bytes=2 * SHARD_BYTES)

    def copy_old():
        for page in s3.client.get_paginator("list_objects_v2").paginate(Bucket=s3.bucket, Prefix="set/"):
            for o in page.get("Contents", []):
                s3.client.delete_object(Bucket=s3.bucket, Key=o["Key"])
        for p in pristine.iterdir():
            s3.client.put_object(Bucket=s3.bucket, Key=f"set/{p.name}", Body=p.read_bytes())

    copy_old()
    seen = sweep(tmp_path, copy_old, out, writer(out, 2, shard_bytes=2 * SHARD_BYTES))
    assert seen[0] == "old" and seen[-1] == "new", seen


# -- the real CLI: convert, reshard, upload s3:// ------------------------------------------------------------

S = 4  # shards in the old and the new set: the same names, so every new shard takes an old one's name


@pytest.mark.parametrize("command, before_manifest", [("convert", True), ("reshard", False), ("upload", False)])
def test_a_kill_in_a_cli_overwrite_then_a_refused_and_a_failing_run(tmp_path, request, command, before_manifest):
    """With the real CLI: ``--overwrite`` killed (a ``python -c`` process) with every new
    shard under an old name just before ``index.json`` (convert), or inside the publish of the last shard
    (reshard; upload to S3: after its copy, before its delete); then the same command without ``--overwrite``
    (refused), ``verify``, a failing ``--overwrite`` (a bad input line), ``verify``: the old set, byte for byte.
    The refused and the failing run are CLI processes forked from this one (``forked_cli``): their exit code
    and stderr are a process's, and nothing of theirs may outlive them."""
    from forked_cli import ForkedMain
    from hostile import check_one_line_error, finish

    from converters.libsvm.synthetic import write_criteo_libsvm, write_criteo_shards

    def run_cli(argv):  # the environment of this process: moto's endpoint for an upload
        return finish(ForkedMain(argv, new_session=True), f"tfpipe {' '.join(argv)}", 180)

    out = f"{request.getfixturevalue('s3').url}/set" if command == "upload" else str(tmp_path / "out")
    old_manifest = write_criteo_shards(out, N_RECORDS, seed=1, shard_bytes=SHARD_BYTES)
    assert len(old_manifest.shards) == S
    old = the_set(out)
    bad = tmp_path / "bad.libsvm"
    write_criteo_libsvm(bad, 20, field_size=39)
    with open(bad, "a") as f:
        f.write("not a libsvm line\n")
    if command == "convert":
        src = tmp_path / "new.libsvm"
        write_criteo_libsvm(src, N_RECORDS, field_size=39, seed=7)
        argv = ["convert", "libsvm", str(src), "--out", out, "--field-size", "39", "--shard-size",
                str(SHARD_BYTES), "--no-progress"]
    else:
        src = tmp_path / "src"
        write_criteo_shards(str(src), N_RECORDS, seed=2, shard_bytes=SHARD_BYTES)
        argv = ([command, str(src), out, "--no-progress"] if command == "upload"
                else [command, str(src), "--out", out, "--num-shards", str(S), "--no-progress"])
    # counted calls: the journal, the old index.json and S shards set aside, S publishes, then index.json;
    # on S3 each publish (set aside or new) is two (the copy's call, then the delete of its source)
    per = 2 if command == "upload" else 1
    k = 1 + per * (1 + S) + per * S + (1 if before_manifest else 0)
    r = run_cli_killed(k, argv + ["--overwrite"], tmp_path / "calls")
    assert r.returncode == KILLED, r.stderr[-3000:]
    killed = the_set(out)  # the old set aside, new bytes under all (or all but the last) of its names
    assert "index.json" not in killed and len(killed) == (S - 1 if command == "reshard" else S), sorted(killed)
    r = run_cli(argv)
    check_one_line_error(r, "not empty")
    assert verify(out).ok and the_set(out) == old
    assert not [n for n in files(out) if TMP_PREFIX in n], sorted(files(out))  # nothing of the killed run
    r = run_cli(["convert", "libsvm", str(bad), "--out", out, "--field-size", "39", "--overwrite", "--no-progress"])
    check_one_line_error(r, r"bad\.libsvm:21")
    assert verify(out).ok and the_set(out) == old
    assert not [n for n in files(out) if TMP_PREFIX in n]
