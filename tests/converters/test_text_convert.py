"""Text -> shard set end to end: real TensorFlow read-back, byte tokenizer lossless, BPE stream equals
tokenizers' batch encoding, determinism across workers, manifest extras, padded modes, bad input, memory."""
from __future__ import annotations

import gzip
import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest
import zstandard
from tfread import read_back

from converters.shardset.manifest import MANIFEST_NAME
from converters.shardset.options import ShardOutputOptions
from converters.shardset.reader import read_manifest
from converters.shardset.verify import verify
from converters.text.convert import convert_text
from converters.text.options import TextOptions
from converters.text.synthetic import pile_documents, write_pile_jsonl
from converters.text.tokenizers import load_tokenizer, train_bpe
from converters.util.errors import InputError, OutputExistsError, TfpipeError

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    d = tmp_path_factory.mktemp("corpus")
    a = write_pile_jsonl(d / "a.jsonl.zst", 150, seed=1, mean_words=60, frame_docs=40)
    b = write_pile_jsonl(d / "b.jsonl", 60, seed=2, mean_words=60)
    docs = list(pile_documents(150, seed=1, mean_words=60)) + list(pile_documents(60, seed=2, mean_words=60))
    return [a, b], docs


@pytest.fixture(scope="module")
def bpe(corpus, tmp_path_factory):
    out = str(tmp_path_factory.mktemp("tok") / "tokenizer.json")
    train_bpe(corpus[0], 700, out)
    return out


def test_byte_tokenizer_lossless_end_to_end(corpus, tmp_path):
    files, docs = corpus
    m = convert_text(files, str(tmp_path / "out"), seq_len=127, shard_size=64 << 10, workers=2,
                     batch_chars=5000)
    assert len(m.shards) > 2 and m.kind == "text"
    got = read_back(m)["input_ids"]
    assert got.shape == (m.records, 128)
    stream = got.ravel()
    data = b"".join(d["text"].encode("utf-8") for d in docs)
    nbytes_docs = [len(d["text"].encode("utf-8")) for d in docs]
    total = sum(nbytes_docs) + len(docs)
    assert m.extra["tokens"] + m.extra["tokens_dropped"] == total
    assert m.extra["tokens_dropped"] == total % 128
    # dropping EOD ids reproduces the concatenated documents, except the dropped tail
    kept = stream[stream != 256].astype(np.uint8).tobytes()
    tail_docs = total - m.extra["tokens_dropped"]
    assert data.startswith(kept)
    assert len(data) - len(kept) == m.extra["tokens_dropped"] - 1  # the tail ends with the last doc's EOD
    # and EOD ids sit exactly at document ends
    ends = np.cumsum(np.array(nbytes_docs) + 1) - 1
    assert np.array_equal(np.flatnonzero(stream == 256), ends[ends < tail_docs])
    assert verify(m.location).problems == []


def test_bpe_stream_equals_tokenizers_batch_encoding(corpus, bpe, tmp_path):
    files, docs = corpus
    m = convert_text(files, str(tmp_path / "out"), seq_len=63, tokenizer=bpe, workers=3, batch_chars=3000)
    tok = load_tokenizer(bpe)
    ref = tok.tokenizer.encode_batch([d["text"] for d in docs], add_special_tokens=False)
    eod = tok.eod_id
    expect = [i for e in ref for i in e.ids + [eod]]
    stream = read_back(m)["input_ids"].ravel().tolist()
    assert m.extra["tokens_dropped"] == len(expect) % 64
    assert stream == expect[: len(stream)] and len(stream) + m.extra["tokens_dropped"] == len(expect)
    info = m.extra["tokenizer"]
    assert info["vocab_size"] == 700 and info["eod_id"] == eod == m.extra["eod_id"]
    assert info["sha256"] == tok.info.sha256 and info["name"] == "hf:tokenizer.json"


def test_deterministic_whatever_workers(corpus, bpe, tmp_path):
    outs = []
    for workers in (1, 4):
        out = tmp_path / f"w{workers}"
        convert_text(corpus[0], str(out), seq_len=31, tokenizer=bpe, workers=workers, shard_size=16 << 10,
                     batch_chars=2000)
        outs.append({p.name: p.read_bytes() for p in out.iterdir()})
    assert outs[0].keys() == outs[1].keys() and len(outs[0]) > 2
    assert outs[0] == outs[1]


def test_manifest_extras_and_subsets(corpus, tmp_path):
    files, docs = corpus
    m = convert_text(files, str(tmp_path / "out"), seq_len=255, exclude_subsets=["ArXiv"])
    m2 = read_manifest(tmp_path / "out")
    assert m2.extra == m.extra and m2.records == m.records
    x = m.extra
    kept = [d for d in docs if d["meta"]["pile_set_name"] != "ArXiv"]
    assert x["documents"] == len(kept) and "ArXiv" not in x["subsets"]
    for name, c in x["subsets"].items():
        sub = [d for d in kept if d["meta"]["pile_set_name"] == name]
        assert c["documents"] == len(sub)
        assert c["tokens"] == sum(len(d["text"].encode()) + 1 for d in sub)
    assert sum(c["tokens"] for c in x["subsets"].values()) == x["tokens"] + x["tokens_dropped"]
    assert x["seq_len"] == 255 and x["windows"] == m.records and x["padding_tokens"] == 0
    assert x["tokenizer"] == {"name": "byte", "vocab_size": 257, "eod_id": 256, "sha256": None}
    read = sum(i.records_read for i in m.inputs)
    assert read == len(docs) == sum(i.records_written for i in m.inputs) + sum(m.skipped.values())
    assert m.skipped == {"subset_filtered": len(docs) - len(kept)}
    assert m.options["exclude_subsets"] == ["ArXiv"] and m.options["seq_len"] == 255


@pytest.mark.parametrize("mode", ["no_cross_doc", "pad_last"])
def test_padded_modes_have_mask(corpus, tmp_path, mode):
    files, docs = corpus
    m = convert_text(files[1], str(tmp_path / "out"), seq_len=100, compression="gzip", **{mode: True},
                     mask_name="attention_mask" if mode == "pad_last" else "loss_mask")
    mask_name = m.extra["mask"]
    assert {f.name for f in m.schema.features} == {"input_ids", mask_name}
    got = read_back(m)
    ids, mask = got["input_ids"], got[mask_name]
    assert m.extra["tokens_dropped"] == 0
    assert int(mask.sum()) == m.extra["tokens"] and mask.size - int(mask.sum()) == m.extra["padding_tokens"] > 0
    real = ids[mask == 1]
    texts = [d["text"] for d in list(pile_documents(60, seed=2, mean_words=60))]
    assert real[real != 256].astype(np.uint8).tobytes() == "".join(texts).encode()
    if mode == "no_cross_doc":
        # every window holds at most one EOD, and only as its last real id
        for row, mrow in zip(ids, mask):
            r = row[mrow == 1]
            assert (r[:-1] != 256).all()
    else:
        assert mask[:-1].all() and not mask[-1].all()


def _zst(*parts: bytes) -> bytes:
    c = zstandard.ZstdCompressor()
    return b"".join(c.compress(p) for p in parts)


GOOD = b'{"text": "good doc", "meta": {"pile_set_name": "ArXiv"}}\n'
BAD = [
    ("invalid_json", "in.jsonl", GOOD + b"{nope\n" + GOOD, "invalid_json", 2),
    ("truncated_line", "in.jsonl", GOOD + b'{"text": "x', "truncated_line", 2),
    ("missing_text", "in.jsonl", GOOD + b'{"body": 1}\n', "missing_text", 2),
    ("text_not_string", "in.jsonl", b'{"text": {"a": 1}}\n' + GOOD, "text_not_string", 1),
    ("lone_surrogate", "in.jsonl", GOOD + b'{"text": "\\ud800"}\n', "lone_surrogate", 2),
    ("invalid_utf8", "in.jsonl", GOOD + b'{"text": "\xc3\x28"}\n', "invalid_utf8", 2),
    ("truncated_zst", "in.jsonl.zst", _zst(GOOD * 2, GOOD * 30)[:-5], "truncated_file", None),
    ("gzip_named_zst", "in.jsonl.zst", gzip.compress(GOOD), "unreadable_file", None),
    ("plain_named_zst", "in.jsonl.zst", GOOD, "unreadable_file", None),
]


@pytest.mark.parametrize("name, fname, content, reason, line", BAD, ids=[b[0] for b in BAD])
def test_bad_input_raise_leaves_no_output(tmp_path, name, fname, content, reason, line):
    bad = tmp_path / fname
    bad.write_bytes(content)
    good = tmp_path / "good.jsonl"
    good.write_bytes(GOOD * 5)
    out = tmp_path / "out"
    with pytest.raises(InputError) as ei:
        convert_text([str(good), str(bad)], str(out), seq_len=4)
    assert str(bad) in str(ei.value)
    if line is not None:
        assert f"{bad}:{line}:" in str(ei.value)
    assert not out.exists() or os.listdir(out) == []


@pytest.mark.parametrize("name, fname, content, reason, line", BAD, ids=[b[0] for b in BAD])
def test_bad_input_skip_counts(tmp_path, name, fname, content, reason, line):
    bad = tmp_path / fname
    bad.write_bytes(content)
    good = tmp_path / "good.jsonl"
    good.write_bytes(GOOD * 5 + b'{"text": ""}\n\n')
    m = convert_text([str(good), str(bad)], str(tmp_path / "out"), seq_len=4, on_error="skip")
    assert m.skipped == dict(sorted({reason: 1, "empty_text": 1}.items()))
    for st in m.inputs:
        assert st.records_read == st.records_written + st.records_skipped
    assert m.inputs[0].blank_lines == 1
    assert m.extra["documents"] == sum(i.records_written for i in m.inputs)
    assert m.extra["subsets"]["ArXiv"]["documents"] == m.extra["documents"]


def test_refuses_nonempty_output_and_overwrites(corpus, tmp_path):
    out = tmp_path / "out"
    convert_text(corpus[0][1], str(out), seq_len=64)
    with pytest.raises(OutputExistsError):
        convert_text(corpus[0][1], str(out), seq_len=64)
    m = convert_text(corpus[0][1], str(out), seq_len=32, overwrite=True)
    assert read_manifest(out).extra["seq_len"] == 32 == m.extra["seq_len"]


@pytest.mark.parametrize("kwargs, exc, match", [
    ({"seq_len": 0}, ValueError, "seq_len must be a positive integer, got 0"),
    ({"seq_len": 8, "workers": 0}, ValueError, "workers must be a positive integer, got 0"),
    ({"seq_len": 8, "on_error": "ignore"}, ValueError, "on_error must be"),
    ({"seq_len": 8, "compression": "zstd"}, ValueError, "compression must be"),
    ({"seq_len": 8, "include_subsets": "ArXiv"}, ValueError, "must be a collection of subset names"),
    ({"seq_len": 8, "tokenizer": "nope"}, TfpipeError, "unknown tokenizer 'nope'"),
])
def test_option_errors(corpus, tmp_path, kwargs, exc, match):
    with pytest.raises(exc, match=match):
        convert_text(corpus[0][1], str(tmp_path / "out"), **kwargs)
    assert not (tmp_path / "out" / MANIFEST_NAME).exists()


def test_unknown_input_format_fails_before_output(tmp_path):
    p = tmp_path / "data.csv"
    p.write_text("a,b\n")
    with pytest.raises(TfpipeError, match="unknown input format"):
        convert_text([str(p)], str(tmp_path / "out"), seq_len=8)
    assert not (tmp_path / "out").exists()


def test_options_dataclass_is_frozen_and_validated():
    o = TextOptions(seq_len=8, include_subsets=["b", "a", "a"], output=ShardOutputOptions(compression="none"))
    assert o.include_subsets == ("a", "b") and o.output.compression is None
    assert o.to_json()["include_subsets"] == ["a", "b"] and o.to_json()["compression"] is None
    with pytest.raises(Exception):
        o.seq_len = 9


def test_memory_bounded(tmp_path):
    """Peak RSS barely grows from a 4 MiB to a 48 MiB input (the input is never held in memory)."""
    script = textwrap.dedent("""
        import json, sys, zstandard
        from converters.text.synthetic import pile_documents
        from converters.text.convert import convert_text
        mib, path, out = int(sys.argv[1]), sys.argv[2], sys.argv[3]
        docs = list(pile_documents(100, seed=0, mean_words=300))
        lines = "".join(json.dumps(d) + "\\n" for d in docs).encode()
        per_copy = sum(len(d["text"].encode()) + 1 for d in docs)
        c = zstandard.ZstdCompressor(level=1)
        with open(path, "wb") as f:
            total = copies = 0
            while total < mib << 20:
                f.write(c.compress(lines)); total += len(lines); copies += 1
        m = convert_text([path], out, seq_len=2048, shard_size=32 << 20, workers=2)
        # VmHWM: this process's own peak (ru_maxrss would include the forking parent's peak)
        hwm = next(int(l.split()[1]) for l in open("/proc/self/status") if l.startswith("VmHWM:"))
        print(m.extra["tokens"] + m.extra["tokens_dropped"], copies * per_copy, hwm // 1024)
    """)
    res = []
    for mib in (4, 48):
        r = subprocess.run([sys.executable, "-c", script, str(mib), str(tmp_path / f"in{mib}.jsonl.zst"),
                            str(tmp_path / f"out{mib}")], capture_output=True, text=True, cwd=ROOT, timeout=300)
        assert r.returncode == 0, r.stderr
        tokens, expect, rss = map(int, r.stdout.split()[-3:])
        assert tokens == expect  # the whole input went through (text bytes + one EOD per document)
        res.append(rss)
    small, big = res
    assert big < 1024, f"peak RSS {big} MiB"
    assert big - small < 128, f"peak RSS grew from {small} to {big} MiB for 12x the input"


@pytest.mark.parametrize("seq_len", [40, 57, 62, 63, 64, 100, 8190])
def test_window_records_match_protobuf_across_varint_boundaries(seq_len):
    """Regression: an Example whose Features length is exactly 127 (or 16383) was written one byte short."""
    import tensorflow as tf

    from converters.text.options import text_schema
    from converters.tfrecord.examples import serialize_batch
    from converters.tfrecord.reader import FRAME_OVERHEAD

    rng = np.random.default_rng(seq_len)
    w = seq_len + 1
    # ids whose varint sizes (1-3 bytes) vary, so payload sizes sweep across the 127 / 16383 boundaries
    ids = np.where(rng.random((200, w)) < rng.random((200, 1)), rng.integers(0, 128, (200, w)),
                   rng.integers(128, 20000, (200, w))).astype(np.int64)
    framed, lengths = serialize_batch(text_schema(seq_len), {"input_ids": ids})
    pos = 0
    for row, n in zip(ids, lengths):
        payload = framed[pos + 12: pos + n - 4].tobytes()
        ex = tf.train.Example(features=tf.train.Features(
            feature={"input_ids": tf.train.Feature(int64_list=tf.train.Int64List(value=row.tolist()))}))
        assert payload == ex.SerializeToString(deterministic=True)
        assert n == len(payload) + FRAME_OVERHEAD
        pos += int(n)


def test_mixed_formats_in_input_order_with_progress(tmp_path, capsys):
    """jsonl.gz + parquet + txt in one run: documents in input order, remainder carried across files."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    (tmp_path / "a.jsonl.gz").write_bytes(gzip.compress(b'{"text": "alpha"}\n{"text": "beta"}\n'))
    pq.write_table(pa.table({"text": ["gamma", "delta"]}), str(tmp_path / "b.parquet"), row_group_size=1)
    (tmp_path / "c.txt").write_text("eps\nilon\n\nzeta\n")
    files = [str(tmp_path / n) for n in ("a.jsonl.gz", "b.parquet", "c.txt")]
    m = convert_text(files, str(tmp_path / "out"), seq_len=6, pad_last=True, progress=True)
    got = read_back(m)
    ids, mask = got["input_ids"], got["loss_mask"]
    real = ids[mask == 1]
    parts = np.split(real, np.flatnonzero(real == 256) + 1)
    texts = [bytes(p[:-1].astype(np.uint8)).decode() for p in parts if p.size]
    assert texts == ["alpha", "beta", "gamma", "delta", "eps\nilon", "zeta"]
    assert [i.records_written for i in m.inputs] == [2, 2, 2]
    assert m.extra["subsets"] == {"": {"documents": 6, "tokens": sum(len(t) + 1 for t in texts)}}


# -- sizes checked before anything is allocated or any output exists ---------------------------------------

@pytest.mark.parametrize("name,seq_len,kw,memory,match", [
    ("a.jsonl.gz", 1_000_000_000, {"no_cross_doc": True}, None,
     r"every record about 2\.8 GiB; a tf.train.Example must stay under"),
    ("a.jsonl.gz", 10_000_000, {"no_cross_doc": True}, 256 << 20,
     r"needs about 3\d\d\.\d MiB of memory per window .* more than half of the 256\.0 MiB available"),
    ("a.jsonl", 100_000_000, {"no_cross_doc": True}, None, r"longer than the whole input could fill \(at most 36 "),
])
def test_windows_that_cannot_be_made_are_refused_up_front(tmp_path, monkeypatch, name, seq_len, kw, memory, match):
    import converters.text.convert as tc

    if memory is not None:  # a machine with this much memory available
        monkeypatch.setattr(tc, "available_memory", lambda: memory)
    src = tmp_path / name  # compressed: its size bounds nothing, so memory and the record limit decide
    data = b'{"text": "hello"}\n'
    src.write_bytes(gzip.compress(data) if name.endswith(".gz") else data)
    with pytest.raises(TfpipeError, match=match):
        convert_text([str(src)], str(tmp_path / "out"), seq_len=seq_len, **kw)
    assert not (tmp_path / "out").exists()


def test_deeply_nested_json_is_a_counted_skip(tmp_path):
    src = tmp_path / "a.jsonl"
    src.write_text('{"text": "a"}\n{"text": ' + "[" * 100_000 + "]" * 100_000 + '}\n{"text": "b"}\n')
    m = convert_text([str(src)], str(tmp_path / "out"), seq_len=3, on_error="skip")
    assert m.inputs[0].skipped == {"invalid_json": 1} and m.extra["documents"] == 2
    with pytest.raises(InputError, match=r"a\.jsonl:2: invalid JSON: nested too deeply"):
        convert_text([str(src)], str(tmp_path / "out2"), seq_len=3)


def test_manifest_records_the_tokenizers_name_not_its_path(corpus, bpe, tmp_path):
    m = convert_text(corpus[0], str(tmp_path / "out"), seq_len=31, tokenizer=bpe)
    assert m.options["tokenizer"] == os.path.basename(bpe) and os.sep not in m.options["tokenizer"]


# -- the keyword form takes the command line's options ------------------------------------------------------

def test_shuffle_and_size_keywords_give_the_cli_bytes(corpus, tmp_path):
    from converters.cli import main

    src = str(corpus[0][1])
    m = convert_text(src, str(tmp_path / "py"), seq_len=63, shard_size="16KiB", shuffle=True, seed=5, workers=1)
    assert main(["convert", "text", src, "--out", str(tmp_path / "cli"), "--seq-len", "63", "--shard-size",
                 "16KiB", "--shuffle", "--seed", "5", "--workers", "1", "--no-progress"]) == 0
    names = sorted(os.listdir(tmp_path / "py"))
    assert names == sorted(os.listdir(tmp_path / "cli")) and len(m.shards) > 1
    for n in names:
        if n.endswith(".tfrecord"):
            assert (tmp_path / "py" / n).read_bytes() == (tmp_path / "cli" / n).read_bytes()
    assert m.extra["shuffle"]["seed"] == 5


@pytest.mark.parametrize("kwargs,match", [
    ({"shuffle": True}, "shuffle=True needs seed=S"),
    ({"shard_size": "lots"}, "shard_size must be .* got 'lots'"),
])
def test_keyword_mistakes(corpus, tmp_path, kwargs, match):
    with pytest.raises(ValueError, match=match):
        convert_text(str(corpus[0][1]), str(tmp_path / "o"), seq_len=8, **kwargs)


def test_existing_output_says_overwrite_true(corpus, tmp_path):
    convert_text(str(corpus[0][1]), str(tmp_path / "o"), seq_len=16)
    with pytest.raises(OutputExistsError, match="pass overwrite=True") as info:
        convert_text(str(corpus[0][1]), str(tmp_path / "o"), seq_len=16)
    assert "--overwrite" in info.value.cli_message
