"""``tfpipe index``: TFRecord files tfpipe did not write (laid out like the DeepFM sample's ``val.tfrecords``),
adopted as a shard set, then inspect, verify, shard plan, reshard, upload/download and the pipeline on them,
plain, gzip-compressed and under an ``s3://`` prefix; raw (non-Example) records; refusals."""
from __future__ import annotations

import gzip
import json
import os
import re
import shutil

import numpy as np
import pytest

tf = pytest.importorskip("tensorflow")

from deepfm_sample import FEATURES, N, parse_all, sample_arrays, write_sample  # noqa: E402
from notices import without_compile_notices  # noqa: E402

from converters.cli import main  # noqa: E402
from converters.shardset.index import index_set  # noqa: E402
from converters.shardset.reader import read_manifest  # noqa: E402
from converters.util.errors import InputError, IntegrityError, OutputExistsError  # noqa: E402


@pytest.fixture(scope="module")
def sample(tmp_path_factory):
    """The sample file (written once) and its tensors, parsed with the sample's own feature spec."""
    d = tmp_path_factory.mktemp("deepfm")
    write_sample(d / "val.tfrecords", sample_arrays())
    return d / "val.tfrecords", parse_all([d / "val.tfrecords"])


@pytest.fixture
def data(sample, tmp_path):
    """A copy of the sample's layout: data/val.tfrecords."""
    (tmp_path / "data").mkdir()
    shutil.copy(sample[0], tmp_path / "data" / "val.tfrecords")
    return tmp_path / "data"


def cli(capsys, *argv):
    code = main([str(a) for a in argv])
    out, err = capsys.readouterr()
    return code, out, err


def assert_same(got: dict, want: dict, ordered: bool = True) -> None:
    """Every tensor equal (float bits compared); ``ordered=False``: the same rows in any order."""
    if not ordered:
        rows = {k: np.column_stack([v.reshape(len(v), -1).view(np.int32 if v.dtype == np.float32 else np.int64)
                                    .astype(np.int64) for v in (t["label"], t["ids"], t["values"])])
                for k, t in (("got", got), ("want", want))}
        a, b = (np.unique(rows[k], axis=0, return_counts=True) for k in ("got", "want"))
        assert all(np.array_equal(x, y) for x, y in zip(a, b))
        return
    for k in FEATURES:
        assert got[k].dtype == want[k].dtype and got[k].shape == want[k].shape, k
        assert np.array_equal(got[k].view(np.uint32) if got[k].dtype == np.float32 else got[k],
                              want[k].view(np.uint32) if want[k].dtype == np.float32 else want[k]), k


def pipeline_records(path, batch: int = 2500, **kw) -> dict:
    """Every record the pipeline built from the manifest yields, as numpy arrays (features and label)."""
    from pipeline.build import build_dataset
    from pipeline import PipelineSpec

    spec = PipelineSpec.from_manifest(path, batch, **kw)
    out = {k: [] for k in FEATURES}
    for feats, label in build_dataset(spec):
        out["label"].append(label.numpy())
        for k in ("ids", "values"):
            out[k].append(feats[k].numpy())
    return {k: np.concatenate(v) for k, v in out.items()}


def test_index_inspect_verify_and_refusals(data, capsys):
    code, out, _ = cli(capsys, "index", data, "--no-progress")
    assert code == 0 and f"indexed 1 file(s): {N:,} records" in out
    raw = (data / "index.json").read_bytes()
    m = read_manifest(data)
    assert m.kind == "adopted" and m.options["source"] == "index" and m.shards[0].name == "val.tfrecords"
    code, out, _ = cli(capsys, "inspect", data)
    assert code == 0
    for pattern in (r"label\s+float32\s+\[\]", r"ids\s+int64\s+\[39\]", r"values\s+float32\s+\[39\]"):
        assert re.search(pattern, out), (pattern, out)
    assert cli(capsys, "verify", data, "--no-progress")[0] == 0
    code, _, err = cli(capsys, "index", data, "--no-progress")  # indexed already
    assert code == 3 and "--overwrite" in err and len(without_compile_notices(err).strip().splitlines()) == 1
    assert cli(capsys, "index", data, "--no-progress", "--overwrite", "--workers", "2")[0] == 0
    assert (data / "index.json").read_bytes() == raw  # the same files give the same manifest
    body = bytearray((data / "val.tfrecords").read_bytes())
    body[len(body) // 2] ^= 0x01
    (data / "val.tfrecords").write_bytes(bytes(body))
    code, _, err = cli(capsys, "verify", data, "--no-progress")
    assert code == 4 and "val.tfrecords" in err and re.search(r"at byte \d+", err), err
    with pytest.raises(IntegrityError, match=r"val.tfrecords: corrupt record data \(data CRC mismatch\) at byte \d+"):
        index_set(data, overwrite=True)


def test_plan_reshard_and_pipeline_give_the_sample_records(data, sample, tmp_path, capsys):
    from sharding.plan import plan
    from sharding.topology import Topology

    want = sample[1]
    assert cli(capsys, "index", data, "--no-progress")[0] == 0
    assert_same(pipeline_records(data), want)  # File mode, one rank: every record, in order
    code, out, _ = cli(capsys, "shard", "plan", data, "--hosts", "1", "--workers-per-host", "2", "--batch-size",
                       "100", "--record-sharding", "--json")
    assert code == 0 and json.loads(out)
    p = plan(read_manifest(data), Topology(hosts=("algo-1",), workers_per_host=2), batch_size=100,
             record_sharding=True)
    parts = [pipeline_records(data, 100, plan=p, rank=r) for r in range(2)]
    assert [len(x["label"]) for x in parts] == [N // 2, N // 2]
    assert_same({k: np.concatenate([x[k] for x in parts]) for k in FEATURES}, want, ordered=False)
    out4 = tmp_path / "four"
    assert cli(capsys, "reshard", data, "--out", out4, "--num-shards", "4", "--no-progress")[0] == 0
    m4 = read_manifest(out4)
    assert len(m4.shards) == 4 and m4.records == N and m4.schema == read_manifest(data).schema
    assert cli(capsys, "verify", out4, "--no-progress")[0] == 0
    assert_same(parse_all(m4.shard_paths()), want)


def test_gzip_files_are_adopted_and_a_mix_is_refused(data, sample, capsys):
    from converters.tfrecord.reader import iter_framed

    raw = (data / "val.tfrecords").read_bytes()
    lengths = np.concatenate([n for _, n in iter_framed(data / "val.tfrecords")])
    (data / "val.tfrecords").unlink()
    half = N // 2
    cut = int(lengths[:half].sum())  # a record boundary
    (data / "val-a.tfrecords.gz").write_bytes(gzip.compress(raw[:cut], mtime=0))
    (data / "val-b.tfrecords.gz").write_bytes(gzip.compress(raw[cut:], mtime=0))
    code, out, _ = cli(capsys, "index", data, "--no-progress", "--workers", "2")
    assert code == 0 and "GZIP" in out
    m = read_manifest(data)
    assert m.compression == "gzip" and [s.records for s in m.shards] == [half, N - half]
    assert cli(capsys, "verify", data, "--no-progress")[0] == 0
    assert_same(pipeline_records(data), sample[1])
    (data / "plain.tfrecords").write_bytes(raw[:int(lengths[0])])
    with pytest.raises(InputError, match="mixed"):
        index_set(data, overwrite=True)


def test_s3_prefix_adopted_verified_and_downloaded(sample, s3, tmp_path, capsys):
    s3.client.upload_file(str(sample[0]), s3.bucket, "deepfm/data/val.tfrecords")
    url = f"{s3.url}/deepfm/data"
    code, out, err = cli(capsys, "index", url, "--no-progress")
    assert code == 0, err
    assert "int64" in out and read_manifest(url).records == N
    assert cli(capsys, "verify", url, "--no-progress")[0] == 0
    code, _, err = cli(capsys, "index", url + "/", "--no-progress")
    assert code == 3 and "--overwrite" in err
    local = tmp_path / "down"
    assert cli(capsys, "download", url, local, "--no-progress")[0] == 0
    assert cli(capsys, "verify", local, "--no-progress")[0] == 0
    assert_same(parse_all(read_manifest(local).shard_paths()), sample[1])
    assert cli(capsys, "upload", local, f"{s3.url}/copy", "--no-progress")[0] == 0  # the adopted names travel
    assert cli(capsys, "verify", f"{s3.url}/copy", "--no-progress")[0] == 0
    assert read_manifest(f"{s3.url}/copy").shards == read_manifest(url).shards


def test_raw_records_give_a_raw_set_the_pipeline_yields_as_bytes(tmp_path, capsys):
    d = tmp_path / "raw"
    d.mkdir()
    payloads = [b"not an example %d" % i for i in range(7)] + [b""]
    with tf.io.TFRecordWriter(str(d / "blobs.rec")) as w:
        for p in payloads:
            w.write(p)
    code, out, _ = cli(capsys, "index", d, "--no-progress")
    assert code == 0 and "raw records" in out
    m = read_manifest(d)
    assert m.schema.raw and m.schema.features == () and m.records == 8 and "not tf.train.Example" in m.extra[
        "raw_records"]
    assert cli(capsys, "inspect", d)[0] == 0 and cli(capsys, "verify", d, "--no-progress")[0] == 0
    from pipeline.build import build_dataset
    from pipeline import PipelineSpec

    spec = PipelineSpec.from_manifest(d, 3)
    assert spec.parse is False
    got = [x for batch in build_dataset(spec) for x in batch.numpy().tolist()]
    assert got == payloads


@pytest.mark.parametrize("setup, target, exc, match", [
    (lambda d: (d / "README.md").write_text("# notes on the set\n" * 3), "{d}", IntegrityError,
     r"data/README.md: corrupt record header \(length CRC mismatch\) at byte 0"),
    (lambda d: (d / "meta.json").write_text("{}"), "{d}/*", InputError, r"meta.json: cannot be a file of the set"),
    (lambda d: (d / ".hidden").write_bytes(b""), "{d}/.*", InputError, r".hidden: cannot be a file of the set"),
    (lambda d: (d / "sub").mkdir(), "{d}/*/val.tfrecords", InputError, r"wildcards only in the file name"),
    (lambda d: None, "{d}/*.nothing", InputError, r"no files to index"),
    (lambda d: os.mkfifo(d / "p"), "{d}/p", InputError, r"p: not a directory"),
    (lambda d: None, "{d}/nothing/", InputError, r"no such directory"),
])
def test_refusals_say_why_and_write_nothing(data, setup, target, exc, match):
    setup(data)
    with pytest.raises(exc, match=match):
        index_set(target.format(d=data))
    assert not (data / "index.json").exists()


def test_one_file_is_a_set_of_that_file_in_its_folder(data, tmp_path):
    (data / "train.tfrecords").write_bytes(b"")
    m = index_set(data / "val.tfrecords")
    assert [s.name for s in m.shards] == ["val.tfrecords"] and m.location == str(data) and m.records == N
    assert read_manifest(data).records == N


def test_a_feature_missing_from_some_records_is_variable_length_with_its_share(tmp_path):
    d = tmp_path / "var"
    d.mkdir()
    with tf.io.TFRecordWriter(str(d / "part-0")) as w:
        for i in range(10):
            f = {"label": tf.train.Feature(float_list=tf.train.FloatList(value=[i])),
                 "tokens": tf.train.Feature(int64_list=tf.train.Int64List(value=list(range(i % 4))))}
            if i % 5:
                f["name"] = tf.train.Feature(bytes_list=tf.train.BytesList(value=[b"x"]))
            w.write(tf.train.Example(features=tf.train.Features(feature=f)).SerializeToString())
    m = index_set(d)
    assert m.schema["label"].shape == () and m.schema.label == "label"
    assert m.schema["tokens"].varlen and m.schema["name"].varlen and m.schema["name"].dtype == "string"
    assert m.extra["features"]["name"]["present"] == 0.8 and m.extra["features"]["tokens"]["max_values"] == 3
    from pipeline.build import build_dataset
    from pipeline import PipelineSpec

    feats, label = next(iter(build_dataset(PipelineSpec.from_manifest(d, 10, sparse_as="ragged"))))
    assert label.numpy().tolist() == list(range(10))
    assert feats["tokens"].to_list() == [list(range(i % 4)) for i in range(10)]
    with pytest.raises(OutputExistsError):
        index_set(d)


def test_pipe_mode_and_tune_on_an_adopted_set(data, sample, tmp_path, capsys):
    """Pipe mode (a FIFO fed with the set's files, as SageMaker streams a channel) reads the adopted set's
    records exactly; ``pipeline tune`` measures its candidates on it."""
    from pipeline.build import build_dataset
    from pipeline.graph.pipesource import simulate_channel
    from pipeline import PipelineSpec

    assert cli(capsys, "index", data, "--no-progress")[0] == 0
    fifo_dir = tmp_path / "fifos"
    fifo_dir.mkdir()
    writer = simulate_channel(str(fifo_dir), "train", read_manifest(data).shard_paths(), epochs=1)
    spec = PipelineSpec.from_manifest(data, 2500, mode="pipe", channel="train", pipe_dir=str(fifo_dir),
                                      pipe_timeout=20)
    got = {k: [] for k in FEATURES}
    for feats, label in build_dataset(spec):
        got["label"].append(label.numpy())
        for k in ("ids", "values"):
            got[k].append(feats[k].numpy())
    writer.join(10)
    assert writer.error is None
    assert_same({k: np.concatenate(v) for k, v in got.items()}, sample[1])
    code, out, err = cli(capsys, "pipeline", "tune", data, "--batch-size", "1000", "--seconds", "3", "--repeats", "1",
                         "--no-store")
    assert code == 0 and "winner" in out, err


def test_bench_pipeline_measures_an_adopted_set(data, capsys):
    """``bench pipeline DIR`` runs its variants on an adopted set as on a converted one."""
    assert cli(capsys, "index", data, "--no-progress")[0] == 0
    code, out, err = cli(capsys, "bench", "pipeline", data, "--batch-size", "500", "--step-ms", "1", "--steps", "3",
                         "--warmup", "1", "--variants", "vectorized", "--no-throughput")
    assert code == 0, err
    assert "vectorized" in out


@pytest.mark.parametrize("name", ["../secret.tfrecords", "/etc/passwd", ".tfpipe-tmp-x", "index.json", "a\x07b"])
def test_an_adopted_manifest_still_lists_only_plain_names_of_its_folder(data, name):
    index_set(data)
    m = json.loads((data / "index.json").read_text())
    m["shards"][0]["name"] = name
    (data / "index.json").write_text(json.dumps(m))
    with pytest.raises(IntegrityError, match=r"shards\[0\] name"):
        read_manifest(data)
