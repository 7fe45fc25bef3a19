"""Replace on commit and refused overlaps, through the real CLI: a failed
``--overwrite`` (bad input line, corrupt source, S3 target) leaves the old set exactly as it was (it still
verifies) and nothing of the failed run; an output overlapping what is read — a group and its own parts in
either direction, the source itself, S3 prefixes of ``processing launch`` — is refused before anything is
touched; a bad ``--run-id`` creates nothing; ``--tmp-dir`` inside ``--out`` leaves nothing behind."""
from __future__ import annotations

import re
import shutil
from pathlib import Path

import pytest
from hostile import check_one_line_error, run_cli, snapshot
from notices import without_compile_notices

from converters.libsvm.synthetic import write_criteo_libsvm, write_criteo_shards
from converters.shardset.reader import read_manifest
from converters.shardset.verify import verify

FS = ["--field-size", "39", "--no-progress"]


@pytest.fixture(scope="module")
def group(tmp_path_factory) -> Path:
    """A per-label group ``G`` (``G/label=0``, ``G/label=1``) made by the CLI."""
    root = tmp_path_factory.mktemp("group")
    src = root / "a.libsvm"
    write_criteo_libsvm(src, 400, field_size=39)
    r = run_cli(["convert", "libsvm", str(src), "--out", str(root / "G"), "--split-by-label", *FS])
    assert r.rc == 0, r.err
    return root / "G"


@pytest.fixture
def g(group, tmp_path) -> Path:
    shutil.copytree(group, tmp_path / "G")
    return tmp_path / "G"


def _old_set(path: Path, n: int = 300) -> dict:
    write_criteo_shards(str(path), n, shard_bytes=20_000)
    return snapshot(path)


def _bad_libsvm(path: Path) -> Path:
    write_criteo_libsvm(path, 300, field_size=39)
    with open(path, "a") as f:
        f.write("this is not a libsvm line\n")
    return path


# -- 23.1 replace on commit ----------------------------------------------------------------------------------

@pytest.mark.parametrize("engine", [[], ["--engine", "beam"]], ids=["local", "beam"])
def test_convert_overwrite_with_a_bad_line_keeps_the_old_set(tmp_path, engine):
    out = tmp_path / "out"
    before = _old_set(out)
    r = run_cli(["convert", "libsvm", str(_bad_libsvm(tmp_path / "bad.libsvm")), "--out", str(out), *FS,
                 "--overwrite", *engine], timeout=180)
    check_one_line_error(r, r"bad\.libsvm:301")
    assert snapshot(out) == before and verify(str(out)).ok


def test_convert_overwrite_split_by_label_with_a_bad_line_keeps_the_old_group(g, tmp_path):
    before = snapshot(g)
    r = run_cli(["convert", "libsvm", str(_bad_libsvm(tmp_path / "bad.libsvm")), "--out", str(g), *FS,
                 "--split-by-label", "--overwrite"])
    check_one_line_error(r, r"bad\.libsvm:301")
    assert snapshot(g) == before and verify(str(g)).ok


def test_reshard_overwrite_from_a_corrupt_source_keeps_the_old_set(tmp_path):
    src = tmp_path / "src"
    write_criteo_shards(str(src), 400, shard_bytes=20_000)
    last = sorted(src.glob("train-*"))[-1]
    data = bytearray(last.read_bytes())
    data[len(data) // 2] ^= 0xFF  # same size, different bytes
    last.write_bytes(bytes(data))
    out = tmp_path / "out"
    before = _old_set(out)
    r = run_cli(["reshard", str(src), "--out", str(out), "--num-shards", "3", "--overwrite", "--no-progress"])
    check_one_line_error(r, r"sha256|checksum|does not match|damaged|corrupt")
    assert snapshot(out) == before and verify(str(out)).ok


def test_overwrite_succeeds_and_replaces(tmp_path):
    out = tmp_path / "out"
    _old_set(out, 300)
    src = tmp_path / "a.libsvm"
    write_criteo_libsvm(src, 50, field_size=39)
    r = run_cli(["convert", "libsvm", str(src), "--out", str(out), *FS, "--overwrite"])
    assert r.rc == 0, r.err
    rep = verify(str(out))
    assert rep.ok and sorted(p.name for p in out.iterdir()) == ["index.json", "train-00000-of-00001.tfrecord"]


def _s3_env(s3) -> dict:
    import os

    return {k: os.environ[k] for k in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN",
                                       "AWS_DEFAULT_REGION", "AWS_ENDPOINT_URL", "AWS_CONFIG_FILE",
                                       "AWS_SHARED_CREDENTIALS_FILE")}


def _objects(s3) -> dict:
    from moto_s3 import keys

    return {k: s3.client.get_object(Bucket=s3.bucket, Key=k)["Body"].read() for k in keys(s3)}


def test_upload_overwrite_from_a_corrupt_source_keeps_the_old_s3_set(s3, tmp_path):
    old = tmp_path / "old"
    write_criteo_shards(str(old), 300, shard_bytes=20_000)
    env = _s3_env(s3)
    assert run_cli(["upload", str(old), f"{s3.url}/set", "--no-progress"], env=env).rc == 0
    before = _objects(s3)
    src = tmp_path / "src"
    write_criteo_shards(str(src), 500, shard_bytes=20_000)
    last = sorted(src.glob("train-*"))[-1]
    data = bytearray(last.read_bytes())
    data[len(data) // 2] ^= 0xFF
    last.write_bytes(bytes(data))
    r = run_cli(["upload", str(src), f"{s3.url}/set", "--overwrite", "--no-progress"], env=env)
    check_one_line_error(r, r"sha256|checksum|does not match|damaged|corrupt")
    assert _objects(s3) == before and verify(f"{s3.url}/set").ok


def test_upload_overwrite_over_a_group_with_a_user_file_in_a_part_is_refused(s3, g, tmp_path):
    env = _s3_env(s3)
    assert run_cli(["upload", str(g), f"{s3.url}/G", "--no-progress"], env=env).rc == 0
    s3.client.put_object(Bucket=s3.bucket, Key="G/label=0/notes.txt", Body=b"mine")
    before = _objects(s3)
    r = run_cli(["upload", str(g), f"{s3.url}/G", "--overwrite", "--no-progress"], env=env)
    check_one_line_error(r, r"label=0/notes\.txt")
    assert _objects(s3) == before


# -- 23.2 overlaps -------------------------------------------------------------------------------------------

@pytest.mark.parametrize("argv, match", [
    (lambda g, t: ["reshard", str(g), "--out", str(g / "label=0"), "--num-shards", "2"], "inside the source set"),
    (lambda g, t: ["reshard", str(g / "label=0"), "--out", str(g), "--num-shards", "2"], "inside the output"),
    (lambda g, t: ["reshard", str(g), "--out", str(g), "--num-shards", "2"], "is the input"),
    (lambda g, t: ["convert", "libsvm", str(t / "a.libsvm"), "--out", str(g / "label=1"), *FS],
     "is a part of the group"),
    (lambda g, t: ["convert", "libsvm", str(g / "label=1"), "--out", str(g), *FS], "inside the output"),
    (lambda g, t: ["download", str(g), str(g / "label=0")], "s3://|inside the source set"),
], ids=["reshard-group-into-its-part", "reshard-part-into-its-group", "reshard-into-itself",
        "convert-into-a-part", "convert-from-a-part-into-its-group", "download-into-a-part"])
def test_overlaps_are_refused_and_the_group_still_verifies(g, tmp_path, argv, match):
    write_criteo_libsvm(tmp_path / "a.libsvm", 50, field_size=39)
    before = snapshot(g)
    r = run_cli(argv(g, tmp_path) + ["--overwrite"])
    check_one_line_error(r, match)
    assert snapshot(g) == before and verify(str(g)).ok


# Every format, every path through it: a glob that reaches into the output's own files (the set, a vocabulary,
# a run's temporary area) is refused once expanded, before anything is touched (exit 3).
GLOB_INTO_OUT = {
    "libsvm": (["libsvm", "{d}/a.libsvm"], ["--field-size", "39"], "{d}/*/index.json"),
    "libsvm-columnar": (["libsvm", "{d}/a.libsvm"], ["--field-size", "39", "--layout", "columnar"],
                        "{d}/*/index.json"),
    "text": (["text", "{d}/a.jsonl"], ["--seq-len", "8"], "{d}/*/index.json"),
    "tabular": (["tabular", "{d}/day_0"], [], "{d}/*/vocab/C1.txt"),
    "tabular-temporary-area": (["tabular", "{d}/day_0"], [], "{d}/*/.tfpipe-tmp-x/*.txt"),
}


@pytest.fixture(scope="module")
def glob_runs(tmp_path_factory):
    """Per case: a set made at ``{d}/out``, then the same command with the glob added and ``--overwrite``; what
    the set held before and after, and the second command's result (all in one process)."""
    from cli_batch import run_commands

    from bench.commands.tabular import write_rows

    root = tmp_path_factory.mktemp("globs")
    argvs = []
    for name, (head, extra, pattern) in GLOB_INTO_OUT.items():
        d = root / name
        d.mkdir()
        write_criteo_libsvm(d / "a.libsvm", 50, field_size=39)
        (d / "a.jsonl").write_text("".join(f'{{"text": "document {i} of the glob case"}}\n' for i in range(20)))
        write_rows(str(d / "day_0"), 50)
        cmd = ["convert", *(a.format(d=d) for a in head), "--out", str(d / "out"), *extra, "--no-progress"]
        argvs += [cmd, cmd[:3] + [pattern.format(d=d)] + cmd[3:] + ["--overwrite"]]
    made = run_commands(argvs[0::2], str(root / "made.json"))
    assert all(r.code == 0 for r in made), [r.err for r in made]
    (root / "tabular-temporary-area" / "out" / ".tfpipe-tmp-x").mkdir()  # as a killed run leaves it
    (root / "tabular-temporary-area" / "out" / ".tfpipe-tmp-x" / "C1.txt").write_text("a\n")
    before = {n: snapshot(root / n / "out") for n in GLOB_INTO_OUT}
    runs = run_commands(argvs[1::2], str(root / "runs.json"))
    return {n: (before[n], snapshot(root / n / "out"), r) for n, r in zip(GLOB_INTO_OUT, runs)}


@pytest.mark.parametrize("name", list(GLOB_INTO_OUT))
def test_a_glob_into_the_output_is_refused_by_every_format(glob_runs, name):
    before, after, r = glob_runs[name]
    assert r.code == 3, r.err
    assert re.search(r"input '.*/out/.*' is inside the output .*/out: the run would read", r.err), r.err
    assert after == before


LAUNCH = ["processing", "launch", "--job-name", "j-1", "--role", "arn:aws:iam::123456789012:role/SMProc",
          "--image-uri", "683313688378.dkr.ecr.us-east-1.amazonaws.com/sagemaker-scikit-learn:1.2-1-cpu-py3",
          "--instance-type", "ml.c5.4xlarge", "--instance-count", "2", "--dry-run"]
CONVERT = ["--", "convert", "libsvm", "/opt/ml/processing/input/train", "--field-size", "39", "--out"]


@pytest.mark.parametrize("extra, out, match", [
    (["--input", "train=s3://raw/criteo/"], "s3://raw/criteo/", "--out s3://raw/criteo/ and --input train"),
    (["--input", "train=s3://raw/criteo/"], "s3://raw/criteo/out", "--out s3://raw/criteo/out and --input"),
    (["--input", "train=s3://raw/criteo/x"], "s3://raw/criteo", "overlap"),
    (["--input", "train=s3://raw/criteo/", "--code-bucket", "s3://code"], "s3://code/tfpipe-code/j-1",
     "code prefix .* and --out"),
    (["--input", "train=s3://raw/criteo/", "--code-bucket", "s3://raw/criteo/c"], "s3://o/x",
     "code prefix .* and --input train"),
    (["--input", "train=s3://raw/criteo/", "--code-bucket", "s3://raw/criteo2"], "s3://raw/criteo3", None),
], ids=["out-is-input", "out-in-input", "input-in-out", "out-is-code", "code-in-input", "prefix-not-component"])
def test_launch_dry_run_refuses_overlapping_prefixes(capsys, extra, out, match):
    from converters.cli.main import main

    code = main(LAUNCH + extra + CONVERT + [out])
    err = capsys.readouterr().err
    if match is None:
        assert code == 0, err
        return
    lines = without_compile_notices(err)
    assert code != 0 and lines.count("\n") == 1 and lines.startswith("tfpipe: error: "), err
    assert __import__("re").search(match, err), err


# -- 23.9 --run-id, --tmp-dir --------------------------------------------------------------------------------

@pytest.mark.parametrize("bad", [".", "..", " ", "a\nb", "a/b"])
def test_bad_run_id_creates_nothing(tmp_path, bad):
    from processing_sim import Cluster

    cl = Cluster(tmp_path, hosts=("algo-1",))
    write_criteo_libsvm(cl.inputs("algo-1") / "a.libsvm", 20, field_size=39)
    out = tmp_path / "out"
    p = cl.start("algo-1", ["--", "convert", "libsvm", str(cl.inputs("algo-1")), "--field-size", "39", "--out",
                            str(out)], options=("--run-id", bad))
    so, se = p.communicate(timeout=120)
    assert p.returncode != 0 and "run id" in se and "Traceback" not in se, se
    assert not out.exists()


@pytest.mark.parametrize("prep", [["--shuffle"], ["--balance", "equal"], ["--shuffle", "--balance", "equal"]],
                         ids=["shuffle", "balance", "both"])
def test_tmp_dir_inside_out_leaves_nothing_that_blocks_overwrite(tmp_path, prep):
    src = tmp_path / "a.libsvm"
    write_criteo_libsvm(src, 200, field_size=39)
    out = tmp_path / "out"
    argv = ["convert", "libsvm", str(src), "--out", str(out), *FS, *prep, "--seed", "1", "--tmp-dir",
            str(out / "tmp" / "deeper")]
    r = run_cli(argv)
    assert r.rc == 0, r.err
    assert not (out / "tmp").exists()
    r = run_cli(argv + ["--overwrite"])
    assert r.rc == 0, r.err
    assert verify(str(out)).ok


def test_tmp_dir_that_is_a_file_names_the_path(tmp_path):
    src = tmp_path / "a.libsvm"
    write_criteo_libsvm(src, 200, field_size=39)
    (tmp_path / "afile").write_text("x")
    r = run_cli(["convert", "libsvm", str(src), "--out", str(tmp_path / "out"), *FS, "--shuffle", "--seed", "1", "--tmp-dir",
                 str(tmp_path / "afile" / "sub")])
    check_one_line_error(r, re.escape(str(tmp_path / "afile")))


def test_processing_overwrite_keeps_the_old_set_until_it_commits(s3, tmp_path):
    """Two simulated Processing instances with ``--overwrite`` over a set in S3: a bad line on algo-2 fails the
    job and the old set is untouched; the rerun with the line fixed replaces it (old shards gone)."""
    from moto_s3 import keys
    from processing_sim import HOSTS, Cluster

    out = f"{s3.url}/set"
    write_criteo_shards(out, 300, shard_bytes=4_000)
    before = _objects(s3)
    cluster = Cluster(tmp_path / "job", HOSTS[:2])
    write_criteo_libsvm(cluster.inputs("algo-1") / "a.txt", 100, field_size=4)
    bad = cluster.inputs("algo-2") / "b.txt"
    bad.write_bytes(b"1 1:1 2:1 3:1 4:1\nnot-a-label 1:1 2:1 3:1 4:1\n")
    command = ["convert", "libsvm", "in/train", "--field-size", "4", "--out", out, "--workers", "1", "--overwrite"]
    res = cluster.run(command, wait_timeout=300)
    assert res["algo-2"][0] == 2 and res["algo-1"][0] != 0, res
    after = {k: v for k, v in _objects(s3).items() if ".tfpipe-tmp-" not in k}
    assert after == before and verify(out).ok
    bad.write_bytes(b"1 1:1 2:1 3:1 4:1\n0 1:1 2:1 3:1 4:2\n")
    # the rerun is a new Processing job (SageMaker job names are unique): algo-2's failure of the first job
    # does not count in it, even before algo-2 has started again
    res = cluster.run(command, job="job-2", wait_timeout=300)
    assert [r[0] for r in res.values()] == [0, 0], res
    assert verify(out).ok
    names = {s.name for s in read_manifest(out).shards}
    assert read_manifest(out).records == 102
    assert {k[len("set/"):] for k in keys(s3, "set/")} == names | {"index.json"}  # old shards and temporaries gone


# -- the commit journal acts only on what it can prove it owns ----------------------------------------------

def test_a_killed_reshards_journal_copied_into_another_set_touches_nothing(tmp_path):
    """``reshard --overwrite`` of set A killed half-way through its publishes; its journal copied into a
    healthy set B: the next runs into B, refused or ``--overwrite``, end in one line naming the journal, and
    every byte of B stays."""
    from killpoints import KILLED, run_cli_killed

    src = tmp_path / "src"
    write_criteo_shards(str(src), 60, seed=2, shard_bytes=6_000)
    a = tmp_path / "A"
    write_criteo_shards(str(a), 60, seed=1, shard_bytes=6_000)
    argv = ["reshard", str(src), "--out", str(a), "--num-shards", "4", "--no-progress"]
    r = run_cli_killed(1 + 5 + 2, argv + ["--overwrite"], tmp_path / "calls")  # journal, 5 set aside, 2 publishes
    assert r.returncode == KILLED, r.stderr[-2000:]
    journal = next(p for p in a.iterdir() if p.name.startswith(".tfpipe-tmp-commit."))
    b = tmp_path / "B"
    _old_set(b)
    shutil.copy(journal, b)
    before = snapshot(b)
    for extra in ([], ["--overwrite"]):
        r = run_cli(["reshard", str(src), "--out", str(b), "--num-shards", "2", "--no-progress", *extra])
        check_one_line_error(r, r"\.tfpipe-tmp-commit\..*does not belong to the set here")
        assert snapshot(b) == before
    assert verify(str(b)).ok


@pytest.mark.parametrize("overwrite", [[], ["--overwrite"]], ids=["refused", "overwrite"])
def test_a_deeply_nested_journal_is_one_line(tmp_path, overwrite):
    src = tmp_path / "src"
    write_criteo_shards(str(src), 60, seed=2, shard_bytes=6_000)
    out = tmp_path / "out"
    _old_set(out)
    (out / ".tfpipe-tmp-commit.r1.json").write_bytes(b"[" * 100_000 + b"]" * 100_000)
    before = snapshot(out)
    r = run_cli(["reshard", str(src), "--out", str(out), "--num-shards", "2", "--no-progress", *overwrite])
    check_one_line_error(r, "nests deeper than")
    assert snapshot(out) == before
