"""The two-pass core run in-process (no Beam) writes what the local converters write: byte-identical shards and
equal manifests over a table of inputs and options; bad input fails the same way, before any shard exists."""
from __future__ import annotations

import gzip

import pytest
from engines_data import (
    assert_same_output,
    bad_jsonl,
    compressed_libsvm_files,
    libsvm_files,
    spoil,
    text_files,
)

from converters.engines.inprocess import run_job
from converters.libsvm.job import LibsvmJob
from converters.text.job import TextJob
from converters.libsvm.convert import run as libsvm_local
from converters.libsvm.options import LibsvmOptions
from converters.shardset.options import ShardOutputOptions
from converters.text.convert import run as text_local
from converters.text.options import TextOptions
from converters.text.tokenizers import train_bpe
from converters.util.errors import InputError, OutputExistsError


@pytest.fixture(scope="module")
def inputs(tmp_path_factory):
    d = tmp_path_factory.mktemp("engine-inputs")
    plain = libsvm_files(d / "plain")
    bad = libsvm_files(d / "bad", sizes=(5, 900, 2500), seed=3)
    # bad lines in several units of one file (units of 64 KiB ~ 170 lines), a blank and a comment line
    spoil(bad[2], {3: b"abc 1:1", 400: b"", 401: b"# note", 1800: b"1 2:1 1:1", 2400: b"1 1:x"})
    spoil(bad[0], {2: b"1 1:1"})
    zero = libsvm_files(d / "zero", sizes=(300, 200), seed=5)
    spoil(zero[1], {150: b"1 " + b" ".join(b"%d:1" % i for i in range(39))})  # index 0: zero-based
    small = libsvm_files(d / "small", sizes=(5, 40, 60), seed=7)
    return {"plain": plain, "small": small, "compressed": compressed_libsvm_files(d / "comp"), "bad": bad, "zero": zero,
            "text": text_files(d / "text"), "badtext": [bad_jsonl(str(d / "bad.jsonl"))]}


def _libsvm_opts(shard_size=1 << 30, compression=None, on_error="raise", index_base="auto", layout="example",
                 block_rows=None):
    return LibsvmOptions(39, index_base=index_base,
                         output=ShardOutputOptions(shard_size=shard_size, compression=compression, on_error=on_error,
                                                   layout=layout, block_rows=block_rows))


LIBSVM_CASES = [
    ("plain", {}, {}),
    ("plain", {"shard_size": 40_000}, {"unit_size": 50_000}),
    ("small", {"shard_size": 300}, {"unit_size": 7_000}),                       # records larger than a shard
    ("plain", {"shard_size": 64 << 10, "compression": "gzip", "index_base": 1}, {"unit_size": 64 << 10}),
    ("compressed", {"shard_size": 30_000}, {"block_bytes": 20_000}),
    ("compressed", {"shard_size": 1 << 30, "compression": "gzip"}, {}),
    ("bad", {"shard_size": 30_000, "on_error": "skip"}, {"unit_size": 64 << 10}),
    ("zero", {"shard_size": 20_000}, {"unit_size": 30_000}),
    # columnar: blocks and stored types do not depend on the units (the local run uses the default units)
    ("plain", {"shard_size": 40_000, "layout": "columnar", "block_rows": 100}, {"unit_size": 50_000}),
    ("compressed", {"shard_size": 30_000, "layout": "columnar", "compression": "gzip"}, {"block_bytes": 20_000}),
    ("bad", {"shard_size": 30_000, "on_error": "skip", "layout": "columnar", "block_rows": 7},
     {"unit_size": 64 << 10}),
]


@pytest.mark.parametrize("key, output, job", LIBSVM_CASES)
def test_libsvm_same_bytes_as_local(inputs, tmp_path, key, output, job):
    opts = _libsvm_opts(**output)
    local = libsvm_local(inputs[key], tmp_path / "local", opts, workers=1)
    two = run_job(LibsvmJob.create(inputs[key], tmp_path / "two", opts, **job))
    assert_same_output(tmp_path / "local", tmp_path / "two")
    assert two == local and two.location == str(tmp_path / "two")
    if key == "bad":
        assert sum(two.skipped.values()) == 4 and two.inputs[2].examples[0].startswith(f"{inputs[key][2]}:3: ")


@pytest.mark.parametrize("multilabel, keep_qid, output, job", [
    (False, False, {"shard_size": 20_000}, {"unit_size": 30_000}),
    (False, True, {"shard_size": 1 << 30, "compression": "gzip"}, {"unit_size": 50_000}),
    (True, False, {"shard_size": 9_000, "on_error": "skip"}, {"unit_size": 20_000}),
])
def test_sparse_libsvm_same_bytes_as_local(tmp_path, multilabel, keep_qid, output, job):
    from converters.libsvm.synthetic import write_sparse_libsvm

    paths = []
    for k, n in enumerate((5, 700, 1500)):
        p = tmp_path / f"s{k}.libsvm"
        write_sparse_libsvm(p, n, seed=k, qid=keep_qid)
        if multilabel:
            text = p.read_bytes().replace(b"\n1 ", b"\n1,3 ").replace(b"\n0 ", b"\n ")
            p.write_bytes(text + b"x 1:1\n")                          # and one bad line, skipped
        paths.append(str(p))
    opts = LibsvmOptions(None, output=ShardOutputOptions(**output), sparse=True, multilabel=multilabel,
                         keep_qid=keep_qid)
    local = libsvm_local(paths, tmp_path / "local", opts, workers=1)
    two = run_job(LibsvmJob.create(paths, tmp_path / "two", opts, **job))
    assert_same_output(tmp_path / "local", tmp_path / "two")
    assert two == local and two.extra["num_features"] > 1 and "nonzeros" in two.extra
    assert len(local.shards) > 1 or output["shard_size"] == 1 << 30


def _error(fn):
    with pytest.raises(InputError) as e:
        fn()
    return e.value


def test_libsvm_first_bad_line_in_input_order(inputs, tmp_path):
    """The message names the same file:line as the local converter's (unit-local numbers shifted)."""
    opts = _libsvm_opts()
    files = inputs["bad"][1:]  # the first bad line is line 3 of c.libsvm, far from the first unit
    spoil_free = tmp_path / "x"
    local = _error(lambda: libsvm_local(files, spoil_free / "local", opts, workers=1))
    two = _error(lambda: run_job(LibsvmJob.create(files, spoil_free / "two", opts, unit_size=4096)))
    assert str(two) == str(local) and (two.path, two.line, two.reason) == (local.path, local.line, local.reason)
    assert two.line == 3
    assert not (spoil_free / "two").exists()  # no shard, no manifest, no temporary area


def test_libsvm_bad_line_deep_in_a_file(inputs, tmp_path):
    path = libsvm_files(tmp_path / "in", sizes=(3000,), seed=9)[0]
    spoil(path, {2222: b"1 3:1 2:1"})
    opts = _libsvm_opts()
    local = _error(lambda: libsvm_local([path], tmp_path / "local", opts, workers=1))
    two = _error(lambda: run_job(LibsvmJob.create([path], tmp_path / "two", opts, unit_size=10_000)))
    assert str(two) == str(local) and two.line == 2222
    assert not (tmp_path / "two").exists()


@pytest.mark.parametrize("case, base", [("truncated_gz", "auto"), ("truncated_gz", 1), ("empty", "auto"),
                                        ("only_blank", 1)])
def test_libsvm_file_errors_as_local(inputs, tmp_path, case, base):
    """An unreadable input met by the index-base pre-pass (auto) or by pass 1 (a given base)."""
    d = tmp_path / "in"
    d.mkdir()
    files = list(inputs["plain"][:2])
    if case == "truncated_gz":
        p = d / "t.libsvm.gz"
        p.write_bytes(gzip.compress(open(inputs["plain"][2], "rb").read())[:5000])
        files.append(str(p))
    else:
        p = d / "e.libsvm"
        p.write_bytes(b"" if case == "empty" else b"\n# only a comment\n\n")
        files = [str(p)]
    opts = _libsvm_opts(index_base=base)
    local = _error(lambda: libsvm_local(files, tmp_path / "local", opts, workers=1))
    two = _error(lambda: run_job(LibsvmJob.create(files, tmp_path / "two", opts, unit_size=20_000)))
    assert str(two) == str(local) and two.reason == local.reason
    assert not (tmp_path / "two").exists()


def test_refuses_non_empty_output_and_overwrite_clears_leftovers(inputs, tmp_path):
    out = tmp_path / "out"
    out.mkdir()
    (out / ".tfpipe-tmp-deadbeef").mkdir()  # the temporary area of an interrupted run
    (out / ".tfpipe-tmp-deadbeef" / "u0000000.len").write_bytes(b"1234")
    with pytest.raises(OutputExistsError, match="interrupted run"):
        LibsvmJob.create(inputs["plain"], out, _libsvm_opts())
    run_job(LibsvmJob.create(inputs["plain"], out, _libsvm_opts(), overwrite=True))
    libsvm_local(inputs["plain"], tmp_path / "local", _libsvm_opts(), workers=1)
    assert_same_output(tmp_path / "local", out)
    (out / ".tfpipe-tmp-deadbeef").mkdir()  # the local converter clears such a leftover too
    libsvm_local(inputs["plain"], out, _libsvm_opts(), workers=1, overwrite=True)
    assert_same_output(tmp_path / "local", out)


@pytest.fixture(scope="module")
def bpe(inputs, tmp_path_factory):
    out = str(tmp_path_factory.mktemp("tok") / "tokenizer.json")
    train_bpe(inputs["text"][:2], 600, out)
    return out


COLUMNAR_7 = {"layout": "columnar", "block_rows": 7}
TEXT_CASES = [
    ({"seq_len": 64}, {}),
    ({"seq_len": 64, "shard_size": 20_000}, {"chunk_tokens": 3000}),
    ({"seq_len": 5, "shard_size": 2_000}, {"chunk_tokens": 777}),             # windows span many chunks
    ({"seq_len": 100, "pad_last": True, "shard_size": 9_000}, {"chunk_tokens": 1000}),
    ({"seq_len": 50, "no_cross_doc": True, "shard_size": 16_000, "compression": "gzip"}, {"chunk_tokens": 2000}),
    ({"seq_len": 3000, "pad_last": True}, {"chunk_tokens": 500}),                 # one window spans files
    ({"seq_len": 32, "tokenizer": "BPE", "shard_size": 8_000}, {"chunk_tokens": 1000}),
    ({"seq_len": 32, "tokenizer": "BPE", "no_cross_doc": True, "mask_name": "attention_mask"}, {}),
    # columnar blocks of windows: shards cut on block boundaries, the same bytes on every engine
    ({"seq_len": 64, "shard_size": 20_000, **COLUMNAR_7}, {"chunk_tokens": 3000}),
    ({"seq_len": 5, "shard_size": 2_000, **COLUMNAR_7}, {"chunk_tokens": 777}),
    ({"seq_len": 100, "pad_last": True, "shard_size": 9_000, **COLUMNAR_7}, {"chunk_tokens": 1000}),
    ({"seq_len": 50, "no_cross_doc": True, "shard_size": 16_000, "compression": "gzip", **COLUMNAR_7},
     {"chunk_tokens": 2000}),
    ({"seq_len": 32, "tokenizer": "BPE", "layout": "columnar", "block_rows": 256}, {}),
]


def _text_opts(seq_len, shard_size=1 << 30, compression=None, on_error="raise", layout="example", block_rows=None,
               **kw):
    return TextOptions(seq_len=seq_len, output=ShardOutputOptions(shard_size=shard_size, compression=compression,
                                                                  on_error=on_error, layout=layout,
                                                                  block_rows=block_rows), **kw)


@pytest.mark.parametrize("opts, job", TEXT_CASES)
def test_text_same_bytes_as_local(inputs, bpe, tmp_path, opts, job):
    if opts.get("tokenizer") == "BPE":
        opts = {**opts, "tokenizer": bpe}
    o = _text_opts(**opts)
    local = text_local(inputs["text"], str(tmp_path / "local"), o, workers=2, batch_chars=4000)
    two = run_job(TextJob.create(inputs["text"], tmp_path / "two", o, **job))
    assert_same_output(tmp_path / "local", tmp_path / "two")
    assert two == local
    assert two.extra["documents"] == 3 + 120 + 40 + 6 + 30


def test_text_bad_records(inputs, tmp_path):
    files = inputs["text"][:1] + inputs["badtext"]
    skip = _text_opts(16, shard_size=4000, on_error="skip")
    local = text_local(files, str(tmp_path / "local"), skip, workers=1)
    two = run_job(TextJob.create(files, tmp_path / "two", skip))
    assert_same_output(tmp_path / "local", tmp_path / "two")
    assert two.skipped == local.skipped == {"empty_text": 1, "invalid_json": 1, "missing_text": 1}
    raise_ = _text_opts(16)
    e_local = _error(lambda: text_local(files, str(tmp_path / "l2"), raise_, workers=1))
    e_two = _error(lambda: run_job(TextJob.create(files, tmp_path / "t2", raise_)))
    assert str(e_two) == str(e_local) and e_two.line == 4 and e_two.path == inputs["badtext"][0]
    assert not (tmp_path / "t2").exists()
