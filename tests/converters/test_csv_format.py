"""Adding a format takes one folder and nothing else: ``csvfmt`` (CSV rows of numbers -> a float32 feature),
defined only in the tests and registered at run time, is converted by the local engine, the in-process
reference engine, Beam (in-process runner) and two simulated SageMaker Processing instances (FullyReplicated:
the same bytes; ShardedByS3Key: every instance's records, host by host) — with no tfpipe module touched but the
registry's API. Shards are read back with TensorFlow."""
from __future__ import annotations

import threading

import numpy as np
import pytest
from engines_data import assert_same_output
from processing_sim import Cluster
from tfread import read_back

import csvfmt
from converters import registry
from converters.engines.inprocess import run_job
from converters.shardset.options import ShardOutputOptions
from converters.shardset.reader import read_manifest
from converters.util.errors import InputError

HOSTS = ("algo-1", "algo-2")


@pytest.fixture
def csv_format():
    fmt = csvfmt.register()
    yield fmt
    registry.unregister(csvfmt.NAME)


def write_csv(d, sizes=(7, 130, 41), *, seed: int = 0, width: int = 4) -> list[np.ndarray]:
    """Files a.csv, b.csv, ... of ``sizes`` rows (a blank line in each); returns each file's rows (float32)."""
    d.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(seed)
    out = []
    for k, n in enumerate(sizes):
        rows = rng.uniform(-1e3, 1e3, (n, width)).round(3).astype(np.float32)
        lines = [",".join(f"{v:.3f}" for v in r) for r in rows]
        lines.insert(n // 2, "")
        (d / f"{chr(97 + k)}.csv").write_text("\n".join(lines) + "\n")
        out.append(rows)
    return out


def _opts(shard_size: int = 1 << 10, on_error: str = "raise") -> csvfmt.CsvOptions:
    return csvfmt.CsvOptions(4, ShardOutputOptions(shard_size=shard_size, on_error=on_error))


def _instances(jobs: dict, config: dict, **kw) -> dict:
    """Run ``run_instance`` for every host at the same time (threads); {host: result or exception}."""
    from converters.engines.processing.instance import run_instance

    got: dict = {}

    def one(host):
        try:
            got[host] = run_instance(jobs[host], config_dir=config[host], timeout=120, poll=0.05, **kw)
        except BaseException as exc:  # noqa: BLE001 - reported by the test
            got[host] = exc

    threads = [threading.Thread(target=one, args=(h,)) for h in jobs]
    for t in threads:
        t.start()
    for t in threads:
        t.join(300)
    return got


def _job(data, out, options):
    from converters.engines.processing.job import ConvertJob

    argv = ("convert", csvfmt.NAME, "in", "--out", str(out))
    return ConvertJob(csvfmt.NAME, argv, (str(data),), str(out), options, workers=1)


def test_every_engine_writes_the_local_bytes(csv_format, tmp_path):
    data = tmp_path / "data"
    rows = write_csv(data)
    opts = _opts()
    local = registry.get("csv").run([str(data)], tmp_path / "local", opts)
    assert local.kind == "csv" and len(local.shards) > 3 and local.records == sum(len(r) for r in rows)
    back = read_back(read_manifest(str(tmp_path / "local")))
    np.testing.assert_array_equal(back["x"], np.concatenate(rows))
    assert [(i.records_read, i.blank_lines) for i in local.inputs] == [(len(r), 1) for r in rows]

    m = run_job(csv_format.create_job([str(data)], tmp_path / "inprocess", opts))
    assert_same_output(tmp_path / "local", tmp_path / "inprocess")
    assert m == local

    beam = pytest.importorskip("converters.engines.beam", exc_type=ImportError)
    m = beam.convert_csv([str(data)], tmp_path / "beam", opts)
    assert_same_output(tmp_path / "local", tmp_path / "beam")
    assert m == local

    cluster = Cluster(tmp_path / "job", HOSTS, sharded=False, shared=data)
    config = {}
    for h in HOSTS:
        cluster.configure(h, "csv-1")
        config[h] = str(cluster.dir(h) / "config")
    out = tmp_path / "processing"
    job = _job(data, out, opts)
    got = _instances({h: job for h in HOSTS}, config)
    assert not [r for r in got.values() if isinstance(r, BaseException)], got
    assert got["algo-1"].finalizer and got["algo-1"].distribution == "FullyReplicated"
    assert_same_output(tmp_path / "local", out)
    back = read_back(read_manifest(str(out)))
    np.testing.assert_array_equal(back["x"], np.concatenate(rows))


def test_sharded_instances_write_every_instances_records(csv_format, tmp_path):
    cluster = Cluster(tmp_path / "job", HOSTS, sharded=True)
    sizes = {"algo-1": (9, 60), "algo-2": (33,)}
    rows = {h: write_csv(cluster.inputs(h), sizes[h], seed=k) for k, h in enumerate(HOSTS)}
    config, jobs = {}, {}
    out = tmp_path / "processing"
    for h in HOSTS:
        cluster.configure(h, "csv-2")
        config[h] = str(cluster.dir(h) / "config")
        jobs[h] = _job(cluster.inputs(h), out, _opts())
    got = _instances(jobs, config, run="csv-sharded")
    assert not [r for r in got.values() if isinstance(r, BaseException)], got
    m = read_manifest(str(out))
    assert m.kind == "csv" and [i.records_read for i in m.inputs] == [9, 60, 33]
    assert [h["records"] for h in m.extra["hosts"]] == [69, 33]
    back = read_back(m)
    np.testing.assert_array_equal(back["x"], np.concatenate([r for h in HOSTS for r in rows[h]]))


def test_bad_input_is_the_same_error_on_every_engine(csv_format, tmp_path):
    data = tmp_path / "data"
    write_csv(data)
    (data / "b.csv").write_text((data / "b.csv").read_text().replace("\n", "\n1,2,x,4\n", 20))
    with pytest.raises(InputError) as local:
        csv_format.run([str(data)], tmp_path / "local", _opts())
    assert "b.csv:2: bad_row" in str(local.value) and local.value.reason == "bad_row"
    with pytest.raises(InputError) as inprocess:
        run_job(csv_format.create_job([str(data)], tmp_path / "inprocess", _opts()))
    assert str(inprocess.value) == str(local.value)
    skipped = csv_format.run([str(data)], tmp_path / "skip", _opts(on_error="skip"))
    m = run_job(csv_format.create_job([str(data)], tmp_path / "skip2", _opts(on_error="skip")))
    assert_same_output(tmp_path / "skip", tmp_path / "skip2")
    assert m.skipped == skipped.skipped == {"bad_row": 20}


def test_a_registered_format_is_found_by_name_and_forgotten(tmp_path):
    from converters.cli.convert_argv import parse_convert
    from converters.engines.processing.job import ConvertJob

    with pytest.raises(ValueError, match="unknown format 'csv': expected one of libsvm, text"):
        ConvertJob("csv", (), ("x",), str(tmp_path), _opts())
    csvfmt.register()
    try:
        assert registry.names()[-1] == "csv" and registry.get("csv") is csvfmt.FORMAT
        assert ConvertJob("csv", (), ("x",), str(tmp_path), _opts()).fmt is csvfmt.FORMAT
        with pytest.raises(ValueError, match=r"convert \{libsvm\|text\|tabular\}"):  # no command line declared
            parse_convert(["convert", "csv", "x", "--out", str(tmp_path)])
    finally:
        registry.unregister("csv")
    with pytest.raises(registry.UnknownFormatError):
        registry.get("csv")
