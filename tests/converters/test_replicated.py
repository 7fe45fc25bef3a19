"""FullyReplicated on simulated Processing instances (separate processes, own config dirs, at the same time) into
one ``s3://`` set on moto's S3: every shard and ``index.json`` byte-identical to a local ``tfpipe convert`` of the
same inputs with the same options; a missing instance, a rerun, and bad input. The instances are forks of the
test process that start as a fresh ``tfpipe`` process would (``forked_cli``), except in the bad-input test, where
they are ``python -c`` processes whose error line is compared with a local run's."""
from __future__ import annotations

import gzip
import os
import re
import shutil

import pytest
from moto_s3 import keys
from notices import without_compile_notices
from processing_sim import HOSTS, Cluster

from converters.cli import main
from converters.libsvm.synthetic import write_criteo_libsvm
from converters.shardset.manifest import MANIFEST_NAME
from converters.text.synthetic import write_pile_jsonl

pytest.importorskip("boto3")
pytest.importorskip("moto.server")


UNITS = ("--unit-size", "32KiB", "--poll", "0.2")  # several units per big file, shared out among the hosts


def s3_files(s3, prefix: str) -> dict[str, bytes]:
    return {k[len(prefix):]: s3.client.get_object(Bucket=s3.bucket, Key=k)["Body"].read() for k in keys(s3, prefix)}


def dir_files(path) -> dict[str, bytes]:
    return {n: open(os.path.join(path, n), "rb").read() for n in sorted(os.listdir(path))}


def libsvm_data(d, *, zero: bool = False, bad: bool = False):
    """Three files of very different sizes (one of 5 lines), one of them also gzip-compressed."""
    d.mkdir(parents=True, exist_ok=True)
    write_criteo_libsvm(d / "a-big.txt", 2500, field_size=5, seed=1)
    write_criteo_libsvm(d / "b-five.txt", 5, field_size=5, seed=2)
    write_criteo_libsvm(d / "c-mid.txt", 700, field_size=5, seed=3)
    with open(d / "c-mid.txt", "rb") as f, gzip.open(d / "d-mid.txt.gz", "wb") as g:
        shutil.copyfileobj(f, g)
    if zero:
        with open(d / "c-mid.txt", "ab") as f:
            f.write(b"0 0:1 1:2 2:3 3:4 4:5\n")
    if bad:
        lines = (d / "a-big.txt").read_bytes().split(b"\n")
        lines[1800] = b"oops 1:1"
        lines[2100] = b"1 1:1 2:x 3:1 4:1 5:1"
        (d / "a-big.txt").write_bytes(b"\n".join(lines))


def text_data(d):
    d.mkdir(parents=True, exist_ok=True)
    write_pile_jsonl(d / "a.jsonl", 60, seed=1, mean_words=40)
    write_pile_jsonl(d / "b.jsonl.zst", 5, seed=2, mean_words=40, frame_docs=2)
    write_pile_jsonl(d / "c.jsonl.gz", 30, seed=3, mean_words=60)


CASES = {
    "libsvm-skip": (libsvm_data, dict(bad=True), ["libsvm", "--field-size", "5", "--on-error", "skip",
                                                  "--shard-size", "48KiB", "--workers", "1"]),
    "libsvm-zero-gzip-2workers": (libsvm_data, dict(zero=True), ["libsvm", "--field-size", "5", "--shard-size",
                                                                 "64KiB", "--compression", "gzip", "--workers",
                                                                 "2"]),
    "libsvm-columnar": (libsvm_data, {}, ["libsvm", "--field-size", "5", "--layout", "columnar", "--block-rows",
                                          "64", "--shard-size", "16KiB", "--workers", "1"]),
    "text-packed": (text_data, {}, ["text", "--seq-len", "31", "--shard-size", "8KiB", "--workers", "1"]),
    "text-no-cross-doc": (text_data, {}, ["text", "--seq-len", "64", "--no-cross-doc", "--shard-size", "8KiB",
                                          "--workers", "1"]),
    "text-columnar": (text_data, {}, ["text", "--seq-len", "31", "--shard-size", "8KiB", "--workers", "1",
                                      "--layout", "columnar", "--block-rows", "20"]),
}


@pytest.mark.parametrize("case", list(CASES))
def test_byte_identical_to_a_local_conversion(s3, tmp_path, case):
    make, kw, opts = CASES[case]
    data = tmp_path / "data"
    make(data, **kw)
    fmt, rest = opts[0], opts[1:]
    local = tmp_path / "local"
    assert main(["convert", fmt, str(data), "--out", str(local), "--no-progress", *rest]) == 0
    cluster = Cluster(tmp_path / "job", sharded=False, shared=data, fork=True)
    res = cluster.run(["convert", fmt, str(data), "--out", f"{s3.url}/set", *rest], options=UNITS)
    assert [r[0] for r in res.values()] == [0, 0, 0], res
    got = s3_files(s3, "set/")
    want = dir_files(local)
    assert sorted(got) == sorted(want) and MANIFEST_NAME in got and len(got) > 3
    for name in want:
        assert got[name] == want[name], name  # every shard and index.json, byte for byte
    # the work really was shared: the hosts' pass-1 units add up, every host wrote shards, and with LibSVM's
    # byte-range units every host also converted some (a whole text file goes to one host: 3 files here)
    done = {h: {k: (int(a), int(n)) for k, a, n in re.findall(r"(pass1|pass2) (\d+) of (\d+)", res[h][1])}
            for h in HOSTS}
    assert sum(d["pass1"][0] for d in done.values()) == done["algo-1"]["pass1"][1]
    assert all(d["pass2"][0] >= 1 for d in done.values()), done
    assert fmt == "text" or all(d["pass1"][0] >= 1 for d in done.values()), done


def tree_files(path) -> dict[str, bytes]:
    return {os.path.relpath(os.path.join(d, n), path): open(os.path.join(d, n), "rb").read()
            for d, _, names in os.walk(path) for n in names}


def test_prepared_conversion_byte_identical_to_local(s3, tmp_path):
    """--shuffle --balance --split-by-label (bad lines skipped): pass 1, the scatter round and pass 2 shared out
    among the hosts, the group written by the finalizer; every file byte for byte a local conversion's."""
    data = tmp_path / "data"
    libsvm_data(data, bad=True)
    rest = ["--field-size", "5", "--on-error", "skip", "--shard-size", "20KiB", "--workers", "1", "--shuffle",
            "--seed", "3", "--shuffle-memory", "1MiB", "--balance", "0=0.5", "--split-by-label"]
    local = tmp_path / "local"
    assert main(["convert", "libsvm", str(data), "--out", str(local), "--no-progress", *rest]) == 0
    cluster = Cluster(tmp_path / "job", sharded=False, shared=data, fork=True)
    res = cluster.run(["convert", "libsvm", str(data), "--out", f"{s3.url}/set", *rest], options=UNITS)
    assert [r[0] for r in res.values()] == [0, 0, 0], res
    got, want = s3_files(s3, "set/"), tree_files(local)
    assert sorted(got) == sorted(want) and {"label=0/index.json", "label=1/index.json"} <= set(got)
    for name in want:
        assert got[name] == want[name], name
    done = {h: {k: int(a) for k, a in re.findall(r"(scatter|pass2) (\d+) of \d+", res[h][1])} for h in HOSTS}
    assert all(d["scatter"] >= 1 and d["pass2"] >= 1 for d in done.values()), done


def test_missing_instance_fails_naming_it_and_a_rerun_reuses_the_work(s3, tmp_path):
    data = tmp_path / "data"
    libsvm_data(data)
    cmd = ["convert", "libsvm", str(data), "--field-size", "5", "--out", f"{s3.url}/set", "--shard-size", "48KiB",
           "--workers", "1", "--index-base", "1"]  # no pre-pass round: pass 1 runs, then the wait times out
    cluster = Cluster(tmp_path / "job", sharded=False, shared=data, fork=True)
    wait = 4.0
    res = cluster.run(cmd, hosts=HOSTS[:2], wait_timeout=wait, options=UNITS)
    for h in HOSTS[:2]:
        code, _, err, secs = res[h]
        assert code != 0 and "algo-3" in err and without_compile_notices(err).count("\n") == 1, err
    assert wait <= res["algo-1"][3] <= max(r[3] for r in res.values()) + wait
    assert "algo-3" in (cluster.dir("algo-1") / "message").read_text()
    assert not [k for k in keys(s3, "set/") if ".tfpipe-tmp-" not in k]  # no manifest, no final shard
    res = cluster.run(cmd, job="job-2", options=UNITS)
    assert [r[0] for r in res.values()] == [0, 0, 0], res
    assert "reused" in res["algo-1"][1] and "reused" in res["algo-2"][1] and "reused" not in res["algo-3"][1]
    local = tmp_path / "local"
    assert main(["convert", "libsvm", str(data), "--field-size", "5", "--out", str(local), "--shard-size", "48KiB",
                 "--index-base", "1", "--no-progress"]) == 0
    assert s3_files(s3, "set/") == dir_files(local)


def test_bad_input_stops_every_instance_with_the_local_error(s3, tmp_path, capsys):
    data = tmp_path / "data"
    libsvm_data(data, bad=True)
    opts = ["--field-size", "5", "--shard-size", "48KiB"]
    assert main(["convert", "libsvm", str(data), "--out", str(tmp_path / "local"), "--no-progress", *opts]) == 2
    local_err = without_compile_notices(capsys.readouterr().err).strip()
    assert "a-big.txt:1801" in local_err
    cluster = Cluster(tmp_path / "job", sharded=False, shared=data)  # python -c processes
    res = cluster.run(["convert", "libsvm", str(data), "--out", f"{s3.url}/set", "--workers", "1", *opts],
                      options=UNITS)
    assert res["algo-1"][0] == 2
    assert without_compile_notices(res["algo-1"][2]).strip() == local_err  # the very same line
    for h in HOSTS[1:]:
        assert res[h][0] != 0 and "algo-1 failed: " in res[h][2] and "a-big.txt:1801" in res[h][2]
    assert not [k for k in keys(s3, "set/") if ".tfpipe-tmp-" not in k]
