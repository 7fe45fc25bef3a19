"""Every kind of shard set through every command a user chains after conversion: each cell works end to end
(the result verifies and holds exactly the source's rows: sorted row hashes read through ``build_dataset``) or
refuses (exit 2, one error line with a reason a user can act on, no traceback, nothing written: ``REFUSED``).

A new kind joins by adding one builder to ``KINDS``, a new command by adding one function to ``COMMANDS``.
Every set is built once per test run, with tiny data, by the CLI (``built_once``); the S3 cells run against
moto's server (the ``s3`` fixture)."""
from __future__ import annotations

import hashlib
import os
from pathlib import Path

import numpy as np
import pytest
from built_once import built_once
from notices import without_compile_notices

from converters.cli import main
from converters.shardset.reader import read_manifest
from converters.shardset.setfiles import listed_names

# -- the kinds: each a function that builds its set in an empty directory with the CLI ----------------------------


def _libsvm_input(d: Path) -> str:
    from converters.libsvm.synthetic import write_criteo_libsvm

    write_criteo_libsvm(d / "in.txt", 240, field_size=4, seed=5)
    return str(d / "in.txt")


def _convert(*argv) -> None:
    assert main(["convert", *map(str, argv), "--no-progress"]) == 0, argv


def _libsvm(*opts):
    def build(d: Path) -> None:
        _convert("libsvm", _libsvm_input(d), "--out", d / "set", "--shard-size", "6KiB", *opts)
    return build


def _text(d: Path) -> None:
    from converters.text.synthetic import write_pile_jsonl

    write_pile_jsonl(d / "in.jsonl", 30, seed=3, mean_words=40)
    _convert("text", d / "in.jsonl", "--out", d / "set", "--seq-len", "32", "--shard-size", "4KiB")


def _tabular(*opts):
    def build(d: Path) -> None:
        import importlib.util

        # tests/converters/tabularref.py: the Criteo-like days of the tabular tests
        spec = importlib.util.spec_from_file_location("tabularref", Path(__file__).parent / "converters" /
                                                      "tabularref.py")
        R = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(R)
        R.write_day(d / "day-0", R.narrow(R.day_lines(7, 200, distinct=20)))
        _convert("tabular", d / "day-0", "--out", d / "set", "--shard-size", "3KiB", "--workers", "1",
                 "--schema", R.write_narrow_schema(d / "narrow.json"), *opts)
    return build


def _adopted(d: Path) -> None:
    import tensorflow as tf

    rng = np.random.default_rng(4)
    (d / "set").mkdir()
    for k in range(2):
        with tf.io.TFRecordWriter(str(d / "set" / f"part-{k}.tfrecords")) as w:
            for _ in range(60):
                w.write(tf.train.Example(features=tf.train.Features(feature={
                    "label": tf.train.Feature(float_list=tf.train.FloatList(value=[float(rng.integers(0, 2))])),
                    "ids": tf.train.Feature(int64_list=tf.train.Int64List(value=rng.integers(1, 99, 5))),
                    "values": tf.train.Feature(float_list=tf.train.FloatList(value=rng.random(5)))})
                ).SerializeToString())
    assert main(["index", str(d / "set"), "--no-progress"]) == 0


KINDS = {
    "libsvm": _libsvm("--field-size", "4"),
    "libsvm-columnar": _libsvm("--field-size", "4", "--layout", "columnar", "--block-rows", "16"),
    "libsvm-sparse": _libsvm("--sparse"),
    "libsvm-gzip": _libsvm("--field-size", "4", "--compression", "gzip"),
    "text": _text,
    "tabular-deepfm": _tabular("--min-count", "2"),
    "tabular-dlrm-columnar": _tabular("--target", "dlrm", "--layout", "columnar", "--block-rows", "16"),
    "adopted": _adopted,
    "group": _libsvm("--field-size", "4", "--split-by-label"),
}


@pytest.fixture(scope="module")
def sets(tmp_path_factory):
    """``sets(kind)``: the path of that kind's set, built the first time a test asks (read-only)."""
    def get(kind: str) -> str:
        return str(built_once(tmp_path_factory, f"matrix-{kind}", KINDS[kind]) / "set")
    return get


# -- rows through build_dataset ------------------------------------------------------------------------------

def _row_hashes(batch) -> list[str]:
    """One sha256 per row of a batch (a dict of dense, ragged or sparse tensors; or a tuple of such)."""
    import tensorflow as tf

    parts = batch if isinstance(batch, tuple) else (batch,)
    flat = {}
    for i, part in enumerate(parts):
        for name, t in (part.items() if isinstance(part, dict) else [(str(i), part)]):
            if isinstance(t, tf.SparseTensor):
                t = tf.RaggedTensor.from_sparse(t)
            flat[f"{i}.{name}"] = t.to_list() if isinstance(t, tf.RaggedTensor) else t.numpy()
    n = len(next(iter(flat.values())))
    return [hashlib.sha256(repr([(k, np.asarray(v[r]).tolist()) for k, v in sorted(flat.items())]).encode())
            .hexdigest() for r in range(n)]


def batches(set_path: str, batch_size: int = 16, resume=None, **kw) -> list[list[str]]:
    from pipeline import PipelineSpec, build_dataset

    spec = PipelineSpec.from_manifest(set_path, batch_size, **{"epochs": 1, **kw})
    return [_row_hashes(b) for b in build_dataset(spec, resume=resume)]


def rows(set_path: str, **kw) -> list[str]:
    """The set's rows as sorted row hashes, read through build_dataset."""
    return sorted(h for b in batches(set_path, **kw) for h in b)


_SOURCE_ROWS: dict[str, list[str]] = {}


def source_rows(sets, kind: str) -> list[str]:
    if kind not in _SOURCE_ROWS:
        _SOURCE_ROWS[kind] = rows(sets(kind))
    return _SOURCE_ROWS[kind]


def cli(capsys, *argv) -> tuple[int, str, str]:
    try:
        code = main([str(a) for a in argv])
    except SystemExit as exc:  # argparse's usage errors
        code = exc.code
    out, err = capsys.readouterr()
    return code, out, without_compile_notices(err)


class Failed(AssertionError):
    """A command that exited non-zero: ``code`` and its stderr ``err``."""

    def __init__(self, argv, code: int, err: str):
        super().__init__(f"{' '.join(map(str, argv))}: exit {code}: {err}")
        self.code, self.err = code, err


def ok(capsys, *argv) -> str:
    code, out, err = cli(capsys, *argv)
    if code != 0:
        raise Failed(argv, code, err)
    return out


def same_set(capsys, sets, kind: str, out: str, **spec) -> None:
    """``out`` verifies and holds exactly the source's rows (read with the spec options ``spec``)."""
    ok(capsys, "verify", out, "--no-progress")
    got = rows(out, **spec)
    assert len(got) == read_manifest(sets(kind)).records and got == source_rows(sets, kind)


# -- the commands: each ``command(capsys, sets, kind, tmp_path, s3)`` ------------------------------------------

def _other_layout(src: str) -> list[str]:
    return ["--layout", "example"] if read_manifest(src).layout.columnar else ["--layout", "columnar",
                                                                              "--block-rows", "16"]


def c_verify(capsys, sets, kind, tmp, s3):
    assert "OK" in ok(capsys, "verify", sets(kind), "--no-progress")


def c_inspect(capsys, sets, kind, tmp, s3):
    assert ok(capsys, "inspect", sets(kind))


def _reshard(*opts):
    def command(capsys, sets, kind, tmp, s3):
        src = sets(kind)
        ok(capsys, "reshard", src, "--out", tmp / "out", "--no-progress",
           *[x for o in opts for x in (_other_layout(src) if o == "OTHER" else [o])])
        same_set(capsys, sets, kind, str(tmp / "out"))
        m = read_manifest(str(tmp / "out"))
        assert m.extra.get("files") == read_manifest(src).extra.get("files")  # the vocabularies, as they were
    return command


def c_s3(capsys, sets, kind, tmp, s3):
    """upload -> verify s3:// -> rows streamed from s3:// -> download -> verify -> the same files."""
    src, url = sets(kind), f"{s3.url}/{kind}"
    ok(capsys, "upload", src, url, "--no-progress")
    same_set(capsys, sets, kind, url, stream_cache_dir=str(tmp / "cache"))
    ok(capsys, "download", url, tmp / "down", "--no-progress")
    same_set(capsys, sets, kind, str(tmp / "down"))
    names = listed_names(read_manifest(src))
    assert [(tmp / "down" / n).read_bytes() for n in names] == [Path(src, n).read_bytes() for n in names]


def c_build_local(capsys, sets, kind, tmp, s3):
    """A seeded shuffled read holds every row once, as the plain read does."""
    got = rows(sets(kind), shuffle_buffer=64, seed=3)
    assert got == source_rows(sets, kind) and len(got) == read_manifest(sets(kind)).records


def c_resume(capsys, sets, kind, tmp, s3):
    """A seeded shuffled read stopped half-way and resumed from its state yields the rest of the epoch."""
    from pipeline import PipelineSpec, input_state

    kw = {"shuffle_buffer": 64, "seed": 7, "resumable": True}
    full = batches(sets(kind), 8, **kw)
    half = len(full) // 2
    state = input_state(PipelineSpec.from_manifest(sets(kind), 8, epochs=1, **kw), half)
    assert batches(sets(kind), 8, resume=state, **kw) == full[half:]
    assert sorted(h for b in full for h in b) == source_rows(sets, kind)


def c_explain(capsys, sets, kind, tmp, s3):
    assert ok(capsys, "pipeline", "explain", sets(kind), "--batch-size", "16")


def c_bench_pipeline(capsys, sets, kind, tmp, s3):
    ok(capsys, "bench", "pipeline", sets(kind), "--batch-size", "16", "--step-ms", "1", "--steps", "3", "--warmup",
       "1", "--no-throughput")


def c_bench_layout(capsys, sets, kind, tmp, s3):
    ok(capsys, "bench", "layout", sets(kind), "--windows", "0", "--batch-size", "8", "--text-batch-size", "8",
       "--repeats", "1")


def c_vocab_from(capsys, sets, kind, tmp, s3):
    """The tabular sets' own input converted again with ``--vocab-from SET`` and no other option: the schema,
    target and transform come from SET, and the result holds SET's rows (the same ids)."""
    day = Path(sets("tabular-deepfm")).parent / "day-0"  # the input of every tabular kind
    ok(capsys, "convert", "tabular", day, "--out", tmp / "out", "--vocab-from", sets(kind), "--workers", "1",
       "--no-progress")
    same_set(capsys, sets, kind, str(tmp / "out"))


COMMANDS = {
    "verify": c_verify,
    "inspect": c_inspect,
    "reshard-3": _reshard("--num-shards", "3"),
    "reshard-layout": _reshard("--num-shards", "2", "OTHER"),
    "reshard-shuffle": _reshard("--num-shards", "2", "--shuffle", "--seed", "5"),
    "s3": c_s3,
    "build-local": c_build_local,
    "resume": c_resume,
    "explain": c_explain,
    "bench-pipeline": c_bench_pipeline,
    "bench-layout": c_bench_layout,
    "vocab-from": c_vocab_from,
}

# cells that refuse in one line (exit 2, nothing written): (kind, command) -> words of the reason
REFUSED: dict[tuple[str, str], str] = {
    ("libsvm-sparse", "reshard-layout"): "cannot re-lay as columnar: feature 'ids' has variable length",
    ("libsvm-sparse", "bench-layout"): "variable-length features ['ids', 'values'] have no columnar form",
    **{(kind, "vocab-from"): "not a set written by convert tabular"
       for kind in KINDS if not kind.startswith("tabular")},
}

_S3_COMMANDS = {"s3"}


@pytest.mark.parametrize("command", list(COMMANDS))
@pytest.mark.parametrize("kind", list(KINDS))
def test_every_kind_through_every_command(kind, command, sets, tmp_path, capsys, request):
    s3 = request.getfixturevalue("s3") if command in _S3_COMMANDS else None
    if (kind, command) in REFUSED:
        with pytest.raises(Failed) as exc:
            COMMANDS[command](capsys, sets, kind, tmp_path, s3)
        err = exc.value.err
        errors = [ln for ln in err.splitlines() if "error:" in ln]
        assert exc.value.code == 2 and len(errors) == 1 and REFUSED[kind, command] in errors[0], err
        assert "Traceback" not in err
        assert os.listdir(tmp_path) == []  # nothing written
        return
    COMMANDS[command](capsys, sets, kind, tmp_path, s3)


@pytest.mark.parametrize("damage, words", [("flipped", "vocab/C2.txt: sha256"),
                                           ("linked", "vocab/C1.txt: vocab is a symbolic link")],
                         ids=["flipped", "linked"])
@pytest.mark.parametrize("command", ["reshard", "upload"])
def test_a_damaged_side_file_stops_every_copy_naming_it(command, damage, words, sets, tmp_path, capsys, request):
    """A vocabulary changed after the conversion (same size, one byte flipped), or a ``vocab/`` that links to
    files outside the set, is not copied on: the command exits 4 naming the file, and nothing is published."""
    import shutil

    from moto_s3 import keys

    src = tmp_path / "src"
    shutil.copytree(sets("tabular-deepfm"), src)
    if damage == "flipped":
        vocab = src / "vocab" / "C2.txt"
        data = bytearray(vocab.read_bytes())
        data[0] ^= 1
        vocab.write_bytes(bytes(data))
    else:
        (src / "vocab").rename(tmp_path / "elsewhere")
        (src / "vocab").symlink_to(tmp_path / "elsewhere")
    if command == "reshard":
        code, _, err = cli(capsys, "reshard", src, "--out", tmp_path / "out", "--num-shards", "2", "--no-progress")
        assert not (tmp_path / "out").exists() or os.listdir(tmp_path / "out") == []
    else:
        s3 = request.getfixturevalue("s3")
        code, _, err = cli(capsys, "upload", src, f"{s3.url}/up", "--no-progress")
        assert keys(s3) == []
    assert code == 4 and words in err and len(err.strip().splitlines()) == 1, err


def test_reshard_from_and_into_s3_carries_the_side_files(sets, tmp_path, capsys, s3):
    """``reshard`` with the source or the output in S3: the vocabularies go along, and both results verify."""
    src = sets("tabular-dlrm-columnar")
    ok(capsys, "reshard", src, "--out", f"{s3.url}/r", "--num-shards", "2", "--layout", "example", "--no-progress")
    ok(capsys, "reshard", f"{s3.url}/r", "--out", tmp_path / "back", "--num-shards", "1", "--no-progress")
    for out in (f"{s3.url}/r", str(tmp_path / "back")):
        ok(capsys, "verify", out, "--no-progress")
    side = [e["name"] for e in read_manifest(src).extra["files"]]
    assert side and [(tmp_path / "back" / n).read_bytes() for n in side] == [Path(src, n).read_bytes() for n in side]
    assert rows(str(tmp_path / "back")) == source_rows(sets, "tabular-dlrm-columnar")


def test_upload_overwrite_replaces_a_set_with_its_side_files(sets, tmp_path, capsys, s3):
    """``upload --overwrite`` of one tabular set onto another (other vocabularies under the same names): the
    objects under the prefix are exactly the new set's files, and it verifies."""
    from moto_s3 import keys

    first, second, url = sets("tabular-deepfm"), sets("tabular-dlrm-columnar"), f"{s3.url}/t"
    ok(capsys, "upload", first, url, "--no-progress")
    ok(capsys, "upload", second, url, "--overwrite", "--no-progress")
    ok(capsys, "verify", url, "--no-progress")
    names = listed_names(read_manifest(second))
    assert keys(s3) == sorted(f"t/{n}" for n in names)
    assert [s3.client.get_object(Bucket=s3.bucket, Key=f"t/{n}")["Body"].read() for n in names] == \
        [Path(second, n).read_bytes() for n in names]
