"""``tfpipe processing run``: simulated Processing instances (each its own config dir and working directory,
run at the same time as separate processes) converting into one shard set on a local S3 (moto's server). The
instances are forks of the test process that start as a fresh ``tfpipe`` process would (``forked_cli``), except
in the test of a failing instance, where they are ``python -c`` processes.

ShardedByS3Key: every instance sees only its own files at the same local path (here: ``in/train`` relative to
the instance's own working directory, so every instance runs the very same command line)."""
from __future__ import annotations

import json
import os
import re
from pathlib import Path

import pytest
from moto_s3 import keys
from notices import without_compile_notices
from processing_sim import HOSTS, Cluster, records_of

from converters.libsvm.convert import convert_libsvm
from converters.libsvm.synthetic import write_criteo_libsvm
from converters.shardset.manifest import MANIFEST_NAME
from converters.shardset.reader import read_manifest
from converters.text.convert import convert_text
from converters.text.synthetic import write_pile_jsonl

pytest.importorskip("boto3")
pytest.importorskip("moto.server")


def libsvm_inputs(cluster: Cluster, *, zero_on: str | None = None) -> list[Path]:
    """algo-1: two files, algo-2: one, algo-3: two (one with an index 0 when ``zero_on`` names it); host order."""
    files = []
    for i, (h, n) in enumerate(zip(cluster.hosts, (2, 1, 2))):
        for k in range(n):
            f = cluster.inputs(h) / f"day-{i}{k}.txt"
            write_criteo_libsvm(f, 150 + 40 * (i + k), field_size=4, seed=10 * i + k)
            if h == zero_on and k == 0:
                f.write_bytes(f.read_bytes() + b"1 0:1 2:0.5 3:1 4:2\n")
            files.append(f)
    return files


def test_sharded_by_s3_key_holds_every_instances_records(s3, tmp_path):
    """Three instances, index 0 only in algo-3's input: --index-base auto is decided over all of them (zero-based
    everywhere) and the set holds exactly the records of a local conversion of every input in host order."""
    cluster = Cluster(tmp_path / "job", fork=True)
    files = libsvm_inputs(cluster, zero_on="algo-3")
    out = f"{s3.url}/criteo"
    cmd = ["convert", "libsvm", "in/train", "--field-size", "4", "--out", out, "--shard-size", "8KiB",
           "--workers", "1", "--index-base", "auto"]  # the fixed-width default is asis: auto on request
    res = cluster.run(cmd)
    assert [r[0] for r in res.values()] == [0, 0, 0], res
    assert "finalized" in res["algo-1"][1] and "part written" in res["algo-3"][1]
    local = convert_libsvm([str(f) for f in files], str(tmp_path / "local"), field_size=4, shard_size=8 << 10,
                           workers=1, index_base="auto")
    assert local.options["index_base_used"] == 0
    got = records_of(out, tmp_path / "got")
    assert got == records_of(str(tmp_path / "local"), tmp_path)
    m = read_manifest(out)
    assert m.options["index_base_used"] == 0 and m.options["index_base"] == "auto"
    assert [Path(i.path).name for i in m.inputs] == [f.name for f in files]  # host order, then input order
    assert [(i.records_read, i.records_written) for i in m.inputs] == \
        [(i.records_read, i.records_written) for i in local.inputs]
    assert [h["host"] for h in m.extra["hosts"]] == list(HOSTS)
    assert not [k for k in keys(s3, "criteo/") if ".tfpipe-tmp-" in k]  # work area removed


def test_missing_instance_fails_within_wait_timeout_and_a_rerun_finishes(s3, tmp_path):
    """algo-3 never starts: the finalizer gives up after --wait-timeout naming algo-3, writes the reason to the
    message file and no manifest. A rerun of the job (all three) reuses the parts already written."""
    cluster = Cluster(tmp_path / "job", fork=True)
    files = libsvm_inputs(cluster)
    out = f"{s3.url}/two-of-three"
    cmd = ["convert", "libsvm", "in/train", "--field-size", "4", "--out", out, "--shard-size", "8KiB",
           "--workers", "1", "--index-base", "1"]
    wait = 4.0
    res = cluster.run(cmd, hosts=HOSTS[:2], wait_timeout=wait)
    code, _, err, secs = res["algo-1"]
    assert code != 0 and "algo-3" in err and "algo-2" not in err.split("waiting for")[-1], err
    assert err.strip().count("\n") == 0, err  # one line
    assert res["algo-2"][0] == 0
    # it waited, but not much longer than the timeout past what a converting instance took (same run's clock)
    assert wait <= secs <= res["algo-2"][3] + wait + 10, (secs, res["algo-2"][3])
    message = (cluster.dir("algo-1") / "message").read_text()
    assert "algo-3" in message and message.count("\n") == 1
    assert f"criteo/{MANIFEST_NAME}" not in keys(s3) and not [k for k in keys(s3, "two-of-three/")
                                                              if not k.startswith("two-of-three/.tfpipe-tmp-")]
    # the rerun: a new job name; algo-1 and algo-2 find their parts and reuse them
    res = cluster.run(cmd, job="job-2")
    assert [r[0] for r in res.values()] == [0, 0, 0], res
    assert "reused" in res["algo-2"][1] and "reused" not in res["algo-3"][1]
    local = convert_libsvm([str(f) for f in files], str(tmp_path / "local"), field_size=4, shard_size=8 << 10,
                           workers=1, index_base=1)
    assert records_of(out, tmp_path / "got") == records_of(str(tmp_path / "local"), tmp_path)
    m = read_manifest(out)
    names = [s.name for s in m.shards]
    assert len(names) == len(set(names)) and names[-1].endswith(f"-of-{len(names):05d}.tfrecord")
    assert sorted(k for k in keys(s3, "two-of-three/")) == sorted(f"two-of-three/{n}" for n in
                                                                   [*names, MANIFEST_NAME])
    assert local.records == m.records


def test_an_instance_that_fails_stops_the_finalizer_at_once(s3, tmp_path):
    """A bad line on algo-2: algo-2 exits 2 naming file:line; the finalizer stops with algo-2's reason well
    before its wait timeout; no manifest."""
    cluster = Cluster(tmp_path / "job", HOSTS[:2])  # python -c processes: exit codes and stderr of real ones
    write_criteo_libsvm(cluster.inputs("algo-1") / "a.txt", 100, field_size=4)
    (cluster.inputs("algo-2") / "b.txt").write_bytes(b"1 1:1 2:1 3:1 4:1\nnot-a-label 1:1 2:1 3:1 4:1\n")
    out = f"{s3.url}/bad"
    res = cluster.run(["convert", "libsvm", "in/train", "--field-size", "4", "--out", out, "--workers", "1"],
                      wait_timeout=600)
    assert res["algo-2"][0] == 2 and "in/train/b.txt:2" in res["algo-2"][2]
    code, _, err, secs = res["algo-1"]
    assert code != 0 and "algo-2 failed" in err and "b.txt:2" in err
    assert secs < 300  # far from the 600 s timeout: the failure marker stopped it
    assert "b.txt:2" in (cluster.dir("algo-2") / "message").read_text()
    assert not [k for k in keys(s3, "bad/") if k.endswith(MANIFEST_NAME) and ".tfpipe-tmp-" not in k]


@pytest.mark.parametrize("layout", [{}, {"layout": "columnar", "block_rows": 16}])
def test_sharded_text_packs_each_instance_separately(s3, tmp_path, layout):
    """Text, two instances: windows never span instances, so the set is the concatenation of each instance's
    own local conversion (its last partial window dropped), and the totals add up; in either layout (columnar:
    each instance's shards end with its own short block)."""
    cluster = Cluster(tmp_path / "job", HOSTS[:2], fork=True)
    per_host = []
    for i, h in enumerate(cluster.hosts):
        f = write_pile_jsonl(cluster.inputs(h) / f"pile-{i}.jsonl", 30 + 10 * i, seed=i, mean_words=40)
        per_host.append(convert_text([f], str(tmp_path / f"local-{h}"), seq_len=63, shard_size=16 << 10,
                                     workers=1, **layout))
    out = f"{s3.url}/pile"
    args = [w for k, v in layout.items() for w in (f"--{k.replace('_', '-')}", str(v))]
    res = cluster.run(["convert", "text", "in/train", "--seq-len", "63", "--out", out, "--shard-size", "16KiB",
                       "--workers", "1", *args])
    assert [r[0] for r in res.values()] == [0, 0], res
    expect = [r for h in cluster.hosts for r in records_of(str(tmp_path / f"local-{h}"), tmp_path)]
    assert records_of(out, tmp_path / "got") == expect
    m = read_manifest(out)
    for key in ("documents", "tokens", "tokens_dropped", "windows"):
        assert m.extra[key] == sum(p.extra[key] for p in per_host), key
    assert m.extra["tokenizer"] == per_host[0].extra["tokenizer"]
    assert m.layout == per_host[0].layout and m.layout.columnar == bool(layout)


def test_output_that_is_not_empty_is_refused_by_every_instance(s3, tmp_path):
    from converters.libsvm.synthetic import write_criteo_shards

    write_criteo_shards(f"{s3.url}/full", 50)
    cluster = Cluster(tmp_path / "job", HOSTS[:2], fork=True)
    for h in cluster.hosts:
        write_criteo_libsvm(cluster.inputs(h) / f"{h}.txt", 20, field_size=4)
    res = cluster.run(["convert", "libsvm", "in/train", "--field-size", "4", "--out", f"{s3.url}/full",
                       "--workers", "1"], wait_timeout=60)
    for h in cluster.hosts:
        assert res[h][0] == 3 and "--overwrite" in res[h][2], res[h]


@pytest.mark.parametrize("command, config, code, match", [
    ([], True, 2, "expected a conversion command 'convert {libsvm|text|tabular}"),
    (["convert", "libsvm", "in", "--out", "o"], True, 2, "one of the arguments --field-size --sparse is required"),
    (["convert", "libsvm", "in", "--field-size", "1", "--out", "o", "--engine", "beam"], True, 2,
     "--engine/--beam-option do not apply here: the Processing instances are the engine"),
    (["convert", "libsvm", "in", "--field-size", "1", "--out", "o", "--shuffle", "--seed", "1"], "sharded", 2,
     "--shuffle needs every instance to see every input: give the inputs as FullyReplicated"),
    (["convert", "tabular", "in", "--out", "o", "--shuffle"], True, 2,
     "--shuffle does not apply to tabular: rows are written in input order"),
    (["convert", "libsvm", "in", "--out", "o", "--split-by-label", "--sparse", "--multilabel"], True, 2, "--split-by-label needs one label per record: --multilabel records have lists"),
    (["convert", "libsvm", "in", "--field-size", "1", "--out", "o"], False, 1,
     "resourceconfig.json not found: not inside a SageMaker Processing job"),
])
def test_run_errors_are_one_line_and_go_to_the_message_file(tmp_path, capsys, command, config, code, match):
    from converters.cli import main

    cfg = tmp_path / "config"
    cfg.mkdir()
    if config:
        (cfg / "resourceconfig.json").write_text('{"current_host": "algo-1", "hosts": ["algo-1"]}')
    if config == "sharded":  # the input "in" comes from a ShardedByS3Key ProcessingInput
        (cfg / "processingjobconfig.json").write_text(json.dumps({"ProcessingJobName": "j", "ProcessingInputs": [
            {"InputName": "train", "S3Input": {"LocalPath": os.path.abspath("in"), "S3Uri": "s3://raw/train",
                                               "S3DataDistributionType": "ShardedByS3Key"}}]}))
    msg = tmp_path / "message"
    assert main(["processing", "run", "--config-dir", str(cfg), "--message-file", str(msg), *command]) == code
    err = capsys.readouterr().err
    assert match in err and without_compile_notices(err).count("\n") == 1
    assert match in msg.read_text()


@pytest.mark.parametrize("extra", [("--negative-rate", "0.5", "--numeric", "minmax", "--layout", "columnar",
                                    "--block-rows", "32"),
                                   ("--vocab-from", "VOCAB")])
def test_sharded_tabular_on_several_instances_is_one_conversion_of_every_instances_days(s3, tmp_path, extra):
    """Tabular, three ShardedByS3Key instances, each with its own days (algo-2 with none): the vocabularies,
    min-max and negative draws belong to the whole input, so the instances run one job over every host's days.
    The set published is a local conversion of all the days in host order, byte for byte, and verifies. An
    instance that never starts stops the others in one line naming it, and a rerun finishes. A narrow table
    (three categorical columns: each is a file per input in every round, an S3 request each)."""
    import tabularref as R

    from converters.cli import main
    from converters.shardset.verify import verify
    from converters.storage import open_storage

    cluster = Cluster(tmp_path / "job", fork=True)
    files = []
    for i, h in enumerate(cluster.hosts):
        where = cluster.inputs(h)
        for k in range(2 if h != "algo-2" else 0):
            f = where / f"day-{i}{k}"
            R.write_day(f, R.narrow(R.day_lines(10 * i + k, 60 + 20 * i, distinct=30)))
            files.append(f)
    opts = ["--shard-size", "2KiB", "--workers", "1", "--schema", R.write_narrow_schema(tmp_path / "narrow.json")]
    if "VOCAB" in extra:
        assert main(["convert", "tabular", *map(str, files[:2]), "--out", str(tmp_path / "vocab"), "--no-progress",
                     "--min-count", "2", *opts]) == 0
        extra = tuple(str(tmp_path / "vocab") if x == "VOCAB" else x for x in extra)
    out = f"{s3.url}/criteo"
    cmd = ["convert", "tabular", "in/train", "--out", out, *extra, *opts]
    if "--vocab-from" in extra:  # algo-3 never starts: the others give up naming it; a rerun of all three finishes
        res = cluster.run(cmd, hosts=HOSTS[:2], wait_timeout=4.0)
        for rc, _, err, _ in res.values():   # a host that had not listed its days within the wait is named too
            assert rc != 0 and re.search(r"waiting for the input list of (algo-\d, )*algo-3 ", err), res
            assert without_compile_notices(err).count("\n") == 1, res
        assert not [k for k in keys(s3, "criteo/") if ".tfpipe-tmp-" not in k]
    res = cluster.run(cmd, job="job-2")   # a rerun is a new job: the first one's failures do not count in it
    assert [r[0] for r in res.values()] == [0, 0, 0], res
    assert main(["convert", "tabular", *map(str, files), "--out", str(tmp_path / "local"), "--no-progress",
                 *extra, *opts]) == 0
    local = read_manifest(str(tmp_path / "local"))
    m = read_manifest(out)
    assert verify(out).ok and m.records == local.records and len(m.shards) > 1
    assert m.extra["categorical"] == local.extra["categorical"] and m.extra.get("minmax") == local.extra.get("minmax")
    assert m.extra["negative_kept_fraction"] == local.extra["negative_kept_fraction"]
    assert [os.path.basename(i.path) for i in m.inputs] == [f.name for f in files]  # host order, then input order
    remote = open_storage(out)
    names = [s.name for s in local.shards] + [e["name"] for e in local.extra["files"]]
    assert [remote.read_bytes(n) for n in names] == [(tmp_path / "local" / n).read_bytes() for n in names]
    assert not [k for k in keys(s3, "criteo/") if ".tfpipe-tmp-" in k]


@pytest.mark.parametrize("sharded, hosts", [(True, 1), (False, 1), (False, 3)])
def test_tabular_is_the_local_set_with_its_vocabularies(s3, tmp_path, sharded, hosts):
    """One instance (ShardedByS3Key or FullyReplicated) or three FullyReplicated ones: the set published holds
    the shards and vocabulary files of a local conversion of the same days, byte for byte, and verifies. The
    Criteo schema on the ShardedByS3Key instance, a narrow table otherwise (each categorical column is a file
    per input in every round, an S3 request each)."""
    import tabularref as R

    from converters.shardset.verify import verify
    from converters.storage import open_storage
    from converters.tabular.convert import run
    from converters.tabular.options import TabularOptions
    from converters.shardset.options import ShardOutputOptions

    shared = None if sharded else tmp_path / "days"
    cluster = Cluster(tmp_path / "job", hosts=HOSTS[:hosts], sharded=sharded, shared=shared, fork=True)
    where = cluster.inputs(HOSTS[0]) if sharded else shared
    where.mkdir(exist_ok=True)
    files = []
    wide = sharded
    for i in range(4 if hosts > 1 else 2):
        f = where / f"day-{i}"
        lines = R.day_lines(i, 80, distinct=30)
        R.write_day(f, lines if wide else R.narrow(lines))
        files.append(f)
    out = f"{s3.url}/one"
    size = 8 << 10 if wide else 2 << 10
    schema = "criteo" if wide else R.write_narrow_schema(tmp_path / "narrow.json")
    res = cluster.run(["convert", "tabular", "in/train" if sharded else str(shared), "--out", out, "--shard-size",
                       f"{size}B", "--workers", "1", "--schema", schema])
    assert [r[0] for r in res.values()] == [0] * hosts, res
    local = run([str(f) for f in files], str(tmp_path / "local"),
                TabularOptions(schema=schema, output=ShardOutputOptions(shard_size=size)), workers=1)
    m = read_manifest(out)
    assert verify(out).ok and m.records == local.records and len(m.shards) > 1
    remote = open_storage(out)
    names = [s.name for s in local.shards] + [e["name"] for e in local.extra["files"]]
    assert [remote.read_bytes(n) for n in names] == [(tmp_path / "local" / n).read_bytes() for n in names]
    assert not [k for k in keys(s3, "one/") if ".tfpipe-tmp-" in k]


@pytest.mark.parametrize("sharded", [True, False])
def test_overwrite_onto_an_earlier_tabular_set_replaces_it_with_its_vocabularies(tmp_path, sharded):
    """``--overwrite`` onto a tabular set converted before (its ``vocab/`` beside the shards): the finalizer
    accepts the set's own files and publishes the new set with its vocabularies; a file tfpipe did not write in
    ``vocab/`` is still refused. One instance, local output."""
    import tabularref as R

    from converters.shardset.verify import verify

    cluster = Cluster(tmp_path / "job", hosts=HOSTS[:1], sharded=sharded, shared=None if sharded else tmp_path / "in")
    where = cluster.inputs(HOSTS[0]) if sharded else tmp_path / "in"
    where.mkdir(exist_ok=True)
    R.write_day(where / "day-0", R.narrow(R.day_lines(3, 60, distinct=20)))
    out = tmp_path / "out"
    cmd = ["convert", "tabular", "in/train" if sharded else str(where), "--out", str(out), "--workers", "1",
           "--shard-size", "2KiB", "--schema", R.write_narrow_schema(tmp_path / "narrow.json")]
    assert [r[0] for r in cluster.run(cmd).values()] == [0], "first run"
    first = read_manifest(str(out))
    R.write_day(where / "day-0", R.narrow(R.day_lines(4, 90, distinct=25)))
    res = cluster.run([*cmd, "--overwrite"], job="job-2")
    assert [r[0] for r in res.values()] == [0], res
    m = read_manifest(str(out))
    assert verify(str(out)).ok and m.records == 90 != first.records
    assert sorted(os.listdir(out / "vocab")) == sorted(os.path.basename(e["name"]) for e in m.extra["files"])
    (out / "vocab" / "notes.txt").write_text("mine")
    res = cluster.run([*cmd, "--overwrite"], job="job-3")
    assert res[HOSTS[0]][0] != 0 and "vocab/notes.txt" in res[HOSTS[0]][2], res
    assert verify(str(out)).ok
