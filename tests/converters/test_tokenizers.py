"""converters.tokenizers: byte tokenizer, tokenizer.json loading, fingerprint, BPE training."""
from __future__ import annotations

import hashlib
import json

import numpy as np
import pytest

from converters.text.synthetic import pile_documents, write_pile_jsonl
from converters.text.tokenizers import (
    ByteTokenizer,
    HFTokenizer,
    load_tokenizer,
    train_bpe,
)
from converters.util.errors import OutputExistsError, TfpipeError

TEXTS = ["hello", "", "café ñ", "日本語", "emoji 😀!", "tab\tnew\nline\r\n", "\x00nul"]


@pytest.fixture(scope="module")
def bpe(tmp_path_factory):
    d = tmp_path_factory.mktemp("bpe")
    src = write_pile_jsonl(d / "docs.jsonl", 300, seed=3, mean_words=80)
    out = str(d / "tokenizer.json")
    info = train_bpe([src], 600, out)
    return out, info


def test_byte_tokenizer_roundtrip():
    tok = ByteTokenizer()
    ids, lens = tok.encode_batch(TEXTS)
    assert tok.vocab_size == 257 and tok.eod_id == 256
    assert lens.tolist() == [len(t.encode("utf-8")) for t in TEXTS]
    assert ids.max() < 256
    parts = np.split(ids, np.cumsum(lens)[:-1])
    assert [tok.decode(p) for p in parts] == TEXTS


def test_byte_tokenizer_empty_batch():
    ids, lens = ByteTokenizer().encode_batch([])
    assert ids.size == 0 and lens.size == 0


def test_byte_info():
    info = load_tokenizer("byte").info
    assert info.to_json() == {"name": "byte", "vocab_size": 257, "eod_id": 256, "sha256": None}


def test_hf_matches_tokenizers_batch_encoding(bpe):
    path, info = bpe
    tok = load_tokenizer(path)
    assert isinstance(tok, HFTokenizer)
    docs = [d["text"] for d in pile_documents(50, seed=9, mean_words=40)] + TEXTS
    ids, lens = tok.encode_batch(docs)
    ref = tok.tokenizer.encode_batch(docs, add_special_tokens=False)
    assert lens.tolist() == [len(e.ids) for e in ref]
    assert ids.tolist() == [i for e in ref for i in e.ids]
    # byte-level BPE is lossless
    parts = np.split(ids, np.cumsum(lens)[:-1])
    assert [tok.decode(p) for p in parts] == docs


def test_hf_fingerprint(bpe):
    path, info = bpe
    tok = load_tokenizer(path)
    with open(path, "rb") as f:
        assert tok.info.sha256 == hashlib.sha256(f.read()).hexdigest() == info.sha256
    assert tok.info.vocab_size == 600
    assert tok.eod_id == tok.tokenizer.token_to_id("<|endoftext|>")
    assert tok.info.name == "hf:tokenizer.json"


def test_hf_explicit_and_missing_eod(bpe, tmp_path):
    path, _ = bpe
    # any token in the vocabulary can be named as EOD
    some = next(iter(json.load(open(path))["model"]["vocab"]))
    assert load_tokenizer(path, eod_token=some).eod_id == HFTokenizer(path, eod_token=some).tokenizer.token_to_id(some)
    with pytest.raises(TfpipeError, match="no end-of-document token '<nope>'"):
        load_tokenizer(path, eod_token="<nope>")
    # a tokenizer.json without any of the usual EOD tokens
    data = json.load(open(path))
    data["added_tokens"] = []
    data["model"]["vocab"].pop("<|endoftext|>")
    stripped = tmp_path / "noeod.json"
    stripped.write_text(json.dumps(data))
    with pytest.raises(TfpipeError, match="no end-of-document token among"):
        load_tokenizer(str(stripped))


@pytest.mark.parametrize("spec, match", [
    ("nonexistent-tok", "unknown tokenizer 'nonexistent-tok'"),
    ("missing/tokenizer.json", "no such file"),
])
def test_load_errors(spec, match):
    with pytest.raises(TfpipeError, match=match):
        load_tokenizer(spec)


def test_bad_tokenizer_file(tmp_path):
    p = tmp_path / "tokenizer.json"
    p.write_text("{not json")
    with pytest.raises(TfpipeError, match="cannot be loaded"):
        load_tokenizer(str(p))


def test_byte_rejects_eod_token():
    with pytest.raises(ValueError, match="applies to a tokenizer.json"):
        load_tokenizer("byte", eod_token="<|endoftext|>")


def test_train_refuses_existing_and_small_vocab(bpe, tmp_path):
    path, _ = bpe
    src = write_pile_jsonl(tmp_path / "d.jsonl", 20, seed=1, mean_words=20)
    with pytest.raises(OutputExistsError):
        train_bpe([src], 600, path)
    with pytest.raises(ValueError, match="vocab_size must be at least 258"):
        train_bpe([src], 100, str(tmp_path / "t.json"))


def test_train_refuses_a_fifo_out_before_training(tmp_path):
    import os

    from converters.util.errors import OutputError

    src = write_pile_jsonl(tmp_path / "d.jsonl", 20, seed=1, mean_words=20)
    fifo = tmp_path / "tok.fifo"
    os.mkfifo(fifo)
    with pytest.raises(OutputError, match="is a FIFO.*read back"):  # never opened: no reader, no hang
        train_bpe([src], 400, str(fifo), overwrite=True)
    with pytest.raises(OutputError, match="is a directory"):
        train_bpe([src], 400, str(tmp_path), overwrite=True)


def test_train_max_chars_and_empty_input(tmp_path):
    src = write_pile_jsonl(tmp_path / "d.jsonl", 50, seed=1, mean_words=20)
    info = train_bpe([src], 400, str(tmp_path / "t.json"), max_chars=2000)
    assert info.vocab_size <= 400
    empty = tmp_path / "e.jsonl"
    empty.write_text('{"text": ""}\n')
    with pytest.raises(TfpipeError, match="no documents to train on"):
        train_bpe([str(empty)], 400, str(tmp_path / "t2.json"))
    assert not (tmp_path / "t2.json").exists()


@pytest.mark.parametrize("sub_batch", [1, 100, 1 << 18])
def test_hf_sub_batches_give_the_same_ids(bpe, monkeypatch, sub_batch):
    import converters.text.tokenizers as mod

    path, _ = bpe
    tok = load_tokenizer(path)
    docs = [d["text"] for d in pile_documents(30, seed=11, mean_words=30)]
    ref = tok.tokenizer.encode_batch(docs, add_special_tokens=False)
    monkeypatch.setattr(mod, "_SUB_BATCH_CHARS", sub_batch)
    ids, lens = tok.encode_batch(docs)
    assert lens.tolist() == [len(e.ids) for e in ref]
    assert ids.tolist() == [i for e in ref for i in e.ids]


@pytest.mark.parametrize("vocab,short", [(300, False), (50_257, True)])
def test_train_says_when_the_corpus_cannot_fill_the_vocabulary(tmp_path, caplog, vocab, short):
    import logging

    src = write_pile_jsonl(tmp_path / "d.jsonl", 40, seed=2, mean_words=30)
    with caplog.at_level(logging.WARNING, logger="converters.text.tokenizers"):
        info = train_bpe([src], vocab, str(tmp_path / "t.json"))
    warnings = [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING]
    if not short:
        assert info.vocab_size == vocab and warnings == []
        return
    assert info.vocab_size < vocab
    assert len(warnings) == 1 and f"fills only {info.vocab_size:,} of the {vocab:,} tokens" in warnings[0]


def test_cli_train_warns_in_one_line(tmp_path):
    import os
    import subprocess
    import sys

    src = write_pile_jsonl(tmp_path / "d.jsonl", 40, seed=2, mean_words=30)
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    r = subprocess.run([sys.executable, "-m", "converters.cli", "tokenizer", "train", str(src), "--vocab-size",
                        "50257", "--out", str(tmp_path / "t.json")], capture_output=True, text=True, timeout=300,
                       env={**os.environ, "PYTHONPATH": root})
    assert r.returncode == 0, r.stderr
    lines = [ln for ln in r.stderr.splitlines() if "50,257" in ln]
    assert len(lines) == 1 and "fills only" in lines[0], r.stderr
