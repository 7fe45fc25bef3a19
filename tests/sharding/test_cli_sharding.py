"""``tfpipe shard plan``, ``shard topology``, ``reshard`` (upload/download: tests/sharding/test_s3.py) - argv tables."""
from __future__ import annotations

import json
import subprocess
import sys

import pytest

from converters.cli import main
from converters.libsvm.synthetic import write_criteo_shards


@pytest.fixture(scope="module")
def sets(tmp_path_factory):
    d = tmp_path_factory.mktemp("cli")
    write_criteo_shards(str(d / "eight"), 4000, shard_bytes=160 << 10)  # 8 shards of ~500 records
    write_criteo_shards(str(d / "three"), 1500, shard_bytes=160 << 10)
    return d


@pytest.fixture(autouse=True)
def clean_env(monkeypatch):
    for k in ("SM_HOSTS", "SM_CURRENT_HOST", "SM_CHANNELS", "SM_INPUT_DATA_CONFIG", "TF_CONFIG", "HOROVOD_RANK",
              "HOROVOD_SIZE", "HOROVOD_LOCAL_RANK", "HOROVOD_LOCAL_SIZE", "OMPI_COMM_WORLD_RANK",
              "OMPI_COMM_WORLD_SIZE", "OMPI_COMM_WORLD_LOCAL_RANK", "OMPI_COMM_WORLD_LOCAL_SIZE"):
        monkeypatch.delenv(k, raising=False)


def run(argv, capsys):
    code = main(argv)
    out = capsys.readouterr()
    return code, out.out, out.err


@pytest.mark.parametrize("extra, strategy, shard_of", [
    (["--hosts", "2", "--workers-per-host", "4"], "files", lambda r: None),
    (["--hosts", "2", "--workers-per-host", "4", "--record-sharding"], "records", lambda r: [8, r]),
    (["--hosts", "2", "--workers-per-host", "4", "--pipe", "--channel-per-worker"], "channel_per_worker",
     lambda r: [2, r // 4]),
    (["--hosts", "2", "--workers-per-host", "2", "--pipe", "--channel-per-worker", "--s3-sharded"],
     "channel_per_worker_s3", lambda r: None),
    (["--hosts", "2", "--workers-per-host", "4", "--s3-sharded"], "s3_sharded", lambda r: [4, r % 4]),
    (["--hosts", "4", "--pipe"], "records", lambda r: [4, r]),
])
def test_plan_json(sets, capsys, extra, strategy, shard_of):
    code, out, err = run(["shard", "plan", str(sets / "eight"), "--batch-size", "64", "--json"] + extra, capsys)
    assert code == 0, err
    d = json.loads(out)
    assert d["strategy"] == strategy
    assert [set(r) for r in d["ranks"]] == [{"rank", "host", "local_rank", "channel", "files", "shard", "steps"}] * \
        len(d["ranks"])
    assert [r["rank"] for r in d["ranks"]] == list(range(len(d["ranks"])))
    assert {r["steps"] for r in d["ranks"]} == {d["steps_per_epoch"]} and d["steps_per_epoch"] > 0
    assert [r["shard"] for r in d["ranks"]] == [shard_of(r) for r in range(len(d["ranks"]))]
    for r in d["ranks"]:
        assert r["files"] is None or all(f.endswith(".tfrecord") for f in r["files"])


def test_plan_table(sets, capsys):
    code, out, _ = run(["shard", "plan", str(sets / "eight"), "--hosts", "2", "--workers-per-host", "2",
                        "--batch-size", "100", "--pipe", "--channel-per-worker", "--remainder", "pad"], capsys)
    assert code == 0
    lines = out.splitlines()
    assert lines[0].startswith("shard set") and "4,000 records in 8 shard(s)" in lines[0]
    header = next(i for i, line in enumerate(lines) if line.startswith("rank"))
    assert lines[header].split() == ["rank", "host", "local", "channel", "files", "shard", "records", "steps"]
    rows = [line.split() for line in lines[header + 1:header + 5]]
    assert [r[0] for r in rows] == ["0", "1", "2", "3"]
    assert rows[3][1:4] == ["algo-2", "1", "train_1"] and "shard(2," in lines[header + 4]
    assert any(line.startswith("note: remainder=pad") for line in lines)


@pytest.mark.parametrize("argv, match", [
    (["--hosts", "2", "--workers-per-host", "4"], r"fewer files \(3\) than readers \(8"),
    (["--hosts", "2", "--workers-per-host", "2", "--pipe"], r"share one FIFO"),
    (["--hosts", "2", "--s3-sharded"], r"divisible by the host count"),
    (["--hosts", "1", "--batch-size", "2000"], r"fewer than one batch of 2000"),
])
def test_impossible_plan_exits_non_zero_with_reason(sets, capsys, argv, match):
    import re

    if "--batch-size" not in argv:
        argv = argv + ["--batch-size", "32"]
    code, out, err = run(["shard", "plan", str(sets / "three")] + argv, capsys)
    assert code == 5 and out == ""
    assert err.startswith("tfpipe: error: ") and re.search(match, err) and "Traceback" not in err


def test_plan_reads_topology_from_environment(sets, capsys, monkeypatch):
    monkeypatch.setenv("SM_HOSTS", '["algo-1", "algo-2"]')
    monkeypatch.setenv("SM_CURRENT_HOST", "algo-1")
    monkeypatch.setenv("HOROVOD_RANK", "0")
    monkeypatch.setenv("HOROVOD_SIZE", "4")
    monkeypatch.setenv("HOROVOD_LOCAL_RANK", "0")
    monkeypatch.setenv("HOROVOD_LOCAL_SIZE", "2")
    code, out, _ = run(["shard", "plan", str(sets / "eight"), "--batch-size", "32", "--json"], capsys)
    assert code == 0 and len(json.loads(out)["ranks"]) == 4


@pytest.mark.parametrize("argv", [
    ["shard", "plan", "X", "--batch-size", "0"],
    ["shard", "plan", "X", "--batch-size", "8", "--hosts", "0"],
    ["shard", "plan", "X"],
    ["shard", "plan", "X", "--batch-size", "8", "--remainder", "wrap"],
    ["reshard", "X", "--out", "Y"],
    ["reshard", "X", "--out", "Y", "--num-shards", "2", "--shard-size", "1MiB"],
    ["reshard", "X", "--out", "Y", "--shard-size", "lots"],
    ["upload", "X"],
])
def test_usage_errors(argv, capsys):
    with pytest.raises(SystemExit) as exc:
        main(argv)
    assert exc.value.code == 64  # usage errors have their own exit code (bad input is 2)


def test_plan_missing_manifest(tmp_path, capsys):
    code, _, err = run(["shard", "plan", str(tmp_path), "--batch-size", "8"], capsys)
    assert code == 2 and "no manifest at" in err  # a missing input: 2, as every command


def test_reshard_cli(sets, tmp_path, capsys):
    code, out, err = run(["reshard", str(sets / "three"), "--out", str(tmp_path / "r"), "--num-shards", "4",
                          "--no-progress"], capsys)
    assert code == 0, err
    assert "wrote 1,500 records in 4 shard(s)" in out and "(375..375 records per shard)" in out
    code, out, _ = run(["shard", "plan", str(tmp_path / "r"), "--hosts", "2", "--workers-per-host", "2",
                        "--batch-size", "100", "--json"], capsys)
    assert code == 0 and json.loads(out)["dropped"] == 4 * 75
    code, _, err = run(["reshard", str(sets / "three"), "--out", str(tmp_path / "r"), "--num-shards", "2",
                        "--no-progress"], capsys)
    assert code == 3 and "not empty" in err
    code, out, _ = run(["reshard", str(sets / "three"), "--out", str(tmp_path / "r"), "--shard-size", "100KiB",
                        "--overwrite", "--no-progress"], capsys)
    assert code == 0 and "wrote 1,500 records" in out


def test_topology_command(capsys, monkeypatch):
    monkeypatch.setenv("SM_HOSTS", '["algo-1", "algo-2"]')
    monkeypatch.setenv("SM_CURRENT_HOST", "algo-2")
    code, out, _ = run(["shard", "topology", "--config-dir", "/nonexistent"], capsys)
    d = json.loads(out)
    assert code == 0 and d["topology"]["rank"] == 1
    assert d["TF_CONFIG"] == {"cluster": {"worker": ["algo-1:2222", "algo-2:2222"]},
                              "task": {"type": "worker", "index": 1}}


def test_help_lists_commands_without_heavy_imports():
    code = ("import sys\nfrom converters.cli import build_parser\n"
            "h = build_parser().format_help()\n"
            "assert all(c in h for c in ('shard', 'reshard', 'upload', 'download')), h\n"
            "bad = [m for m in ('tensorflow', 'boto3') if m in sys.modules]\nassert not bad, bad\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
