"""Tokenizers for the text converter, in a registry: the built-in byte-level tokenizer (offline default)
and any Hugging Face ``tokenizer.json``; plus ``train_bpe`` for a byte-level BPE trained on local input.

Every tokenizer encodes a batch of documents into ``(ids, lengths)``: one flat integer array of all the
documents' ids, in order, and each document's id count. End-of-document ids are *not* included; the packer
appends them. Nothing here touches the network.
"""
from __future__ import annotations

import itertools
import logging
import os
from dataclasses import dataclass
from typing import Iterable, Sequence

import numpy as np

from ..util.digest import file_digest
from ..util.errors import OutputError, OutputExistsError, TfpipeError
from ..util.fs import file_kind
from ..util.outfile import check_output, write_output

__all__ = ["TokenizerInfo", "ByteTokenizer", "HFTokenizer", "load_tokenizer", "train_bpe", "BUILTIN",
           "EOD_CANDIDATES", "DEFAULT_EOD_TOKEN"]

log = logging.getLogger(__name__)

DEFAULT_EOD_TOKEN = "<|endoftext|>"
# tried in order when a tokenizer.json is loaded without an explicit end-of-document token
_SUB_BATCH_CHARS = 1 << 18
EOD_CANDIDATES = (DEFAULT_EOD_TOKEN, "</s>", "<eos>", "<|end_of_text|>", "[SEP]")


@dataclass(frozen=True)
class TokenizerInfo:
    """A tokenizer's fingerprint, recorded in the manifest."""

    name: str
    vocab_size: int
    eod_id: int
    sha256: str | None = None  # of the tokenizer file; None for built-ins
    path: str | None = None

    def __post_init__(self):
        if self.vocab_size <= 0:
            raise ValueError(f"vocab_size must be positive, got {self.vocab_size}")
        if not 0 <= self.eod_id < self.vocab_size:
            raise ValueError(f"eod_id {self.eod_id} outside the vocabulary [0, {self.vocab_size})")

    def to_json(self) -> dict:
        return {"name": self.name, "vocab_size": self.vocab_size, "eod_id": self.eod_id, "sha256": self.sha256}


class ByteTokenizer:
    """UTF-8 bytes as ids 0-255, end-of-document id 256 (vocabulary 257). Lossless and needs nothing."""

    name = "byte"
    vocab_size = 257
    eod_id = 256

    @property
    def info(self) -> TokenizerInfo:
        return TokenizerInfo(self.name, self.vocab_size, self.eod_id)

    def encode_batch(self, texts: Sequence[str]) -> tuple[np.ndarray, np.ndarray]:
        """``(ids uint8, lengths int64)``. Texts must be valid Unicode (no lone surrogates)."""
        encoded = [t.encode("utf-8") for t in texts]
        lengths = np.fromiter(map(len, encoded), dtype=np.int64, count=len(encoded))
        ids = np.frombuffer(b"".join(encoded), dtype=np.uint8)
        return ids, lengths

    @staticmethod
    def decode(ids: Iterable[int]) -> str:
        """Inverse of ``encode`` for one document's ids (EOD and padding already removed)."""
        return bytes(np.asarray(list(ids) if not isinstance(ids, np.ndarray) else ids, dtype=np.uint8)).decode("utf-8")


class HFTokenizer:
    """A Hugging Face ``tokenizer.json`` run by the ``tokenizers`` library (batch encoding in Rust, which
    releases the GIL and parallelizes over the batch). Special tokens of the tokenizer's post-processor
    (e.g. BERT's [CLS]/[SEP]) are not added: documents are separated by the end-of-document id only."""

    def __init__(self, path: str, *, eod_token: str | None = None):
        try:
            from tokenizers import Tokenizer
        except ImportError as exc:  # pragma: no cover - tokenizers is an optional extra
            raise TfpipeError("a tokenizer.json needs the 'tokenizers' package: pip install tfpipe[text]") from exc
        self.path = str(path)
        if not os.path.isfile(self.path):
            raise TfpipeError(f"tokenizer {self.path!r}: no such file (use 'byte' or a tokenizer.json path)")
        try:
            self._tok = Tokenizer.from_file(self.path)
        except Exception as exc:  # the Rust side raises a plain Exception on bad JSON
            raise TfpipeError(f"tokenizer {self.path!r} cannot be loaded: {exc}") from exc
        self.vocab_size = int(self._tok.get_vocab_size(with_added_tokens=True))
        candidates = (eod_token,) if eod_token is not None else EOD_CANDIDATES
        eod = None
        for c in candidates:
            eod = self._tok.token_to_id(c)
            if eod is not None:
                self.eod_token = c
                break
        if eod is None:
            raise TfpipeError(
                f"tokenizer {self.path!r} has no end-of-document token "
                f"{'%r' % eod_token if eod_token else 'among ' + ', '.join(EOD_CANDIDATES)}: "
                "pass one it has with --eod-token")
        self.eod_id = int(eod)
        self.name = f"hf:{os.path.basename(self.path)}"
        self._sha = file_digest(self.path)[1]
        self._fast = hasattr(self._tok, "encode_batch_fast")

    @property
    def info(self) -> TokenizerInfo:
        return TokenizerInfo(self.name, self.vocab_size, self.eod_id, self._sha, self.path)

    @property
    def tokenizer(self):
        """The underlying ``tokenizers.Tokenizer``."""
        return self._tok

    def encode_batch(self, texts: Sequence[str]) -> tuple[np.ndarray, np.ndarray]:
        """``(ids int32, lengths int64)`` from one ``encode_batch`` call (no offsets computed)."""
        texts = list(texts)
        enc = self._tok.encode_batch_fast if self._fast else self._tok.encode_batch
        idl: list[list[int]] = []
        # sub-batches of ~256 Ki characters: the Encoding objects (~80 bytes per token) of only one are alive
        start, size = 0, 0
        for i, t in enumerate(texts):
            size += len(t)
            if size >= _SUB_BATCH_CHARS or i == len(texts) - 1:
                idl.extend(e.ids for e in enc(texts[start:i + 1], add_special_tokens=False))
                start, size = i + 1, 0
        lengths = np.fromiter(map(len, idl), dtype=np.int64, count=len(idl))
        ids = np.fromiter(itertools.chain.from_iterable(idl), dtype=np.int32, count=int(lengths.sum()))
        return ids, lengths

    def decode(self, ids: Iterable[int]) -> str:
        return self._tok.decode([int(i) for i in ids], skip_special_tokens=False)


BUILTIN = {"byte": ByteTokenizer}


def load_tokenizer(spec: str, *, eod_token: str | None = None):
    """``"byte"`` (built-in) or a path to a Hugging Face ``tokenizer.json``."""
    spec = str(spec)
    if spec in BUILTIN:
        if eod_token is not None:
            raise ValueError(f"eod_token {eod_token!r} applies to a tokenizer.json, not the built-in {spec!r}")
        return BUILTIN[spec]()
    if spec.endswith(".json") or os.path.sep in spec or os.path.exists(spec):
        return HFTokenizer(spec, eod_token=eod_token)
    raise TfpipeError(f"unknown tokenizer {spec!r}: use one of {', '.join(sorted(BUILTIN))} or a path to a "
                      "tokenizer.json")


def train_bpe(inputs: Sequence[str], vocab_size: int, out: str, *, text_key: str = "text",
              max_chars: int | None = None, min_frequency: int = 2, eod_token: str = DEFAULT_EOD_TOKEN,
              on_error: str = "skip", txt_mode: str = "block", overwrite: bool = False,
              progress: bool = False) -> TokenizerInfo:
    """Train a byte-level BPE (GPT-2 style: byte-level pre-tokenizer and decoder, all 256 bytes in the
    initial alphabet, so any text encodes and decodes exactly) on the documents of ``inputs`` (same readers
    and formats as the converter; bad records are skipped and logged), stopping after ``max_chars``
    characters of text if given. ``eod_token`` is added as a special token. Writes ``out`` atomically and
    returns its fingerprint. ``progress``: the tokenizers library's own progress bar on stderr."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    from ..shardset.manifest import InputStats
    from ..sources import expand_inputs
    from .readers import INPUT_SUFFIXES, DocReadOptions, iter_documents

    if vocab_size < 257 + 1:
        raise ValueError(f"vocab_size must be at least 258 (256 bytes + special token + merges), got {vocab_size}")
    out = str(out)
    if os.path.exists(out) and not overwrite:
        raise OutputExistsError(f"{out} exists: pass --overwrite to replace it")
    check_output(out)
    if os.path.exists(out) and not os.path.isfile(out):  # read back after writing: a file, refused before training
        raise OutputError(f"{out}: is {file_kind(os.stat(out).st_mode)}; the tokenizer is read back, give a file")
    files = expand_inputs(inputs, suffixes=INPUT_SUFFIXES)
    opts = DocReadOptions(text_key=text_key, on_error=on_error, txt_mode=txt_mode)
    seen = {"chars": 0, "docs": 0}
    all_stats: list[InputStats] = []

    def batches():
        for path in files:
            stats = InputStats(path)
            all_stats.append(stats)
            for batch in iter_documents(path, opts, stats):
                texts = batch.texts
                if max_chars is not None:
                    room = max_chars - seen["chars"]
                    take = 0
                    while take < len(texts) and room > 0:
                        room -= len(texts[take])
                        take += 1
                    texts = texts[:take]
                seen["chars"] += sum(map(len, texts))
                seen["docs"] += len(texts)
                if texts:
                    yield texts
                if max_chars is not None and seen["chars"] >= max_chars:
                    return

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=vocab_size, min_frequency=min_frequency, special_tokens=[eod_token],
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=bool(progress))
    tok.train_from_iterator(batches(), trainer)
    skipped: dict[str, int] = {}
    for st in all_stats:
        for k, v in st.skipped.items():
            skipped[k] = skipped.get(k, 0) + v
    if skipped:
        log.warning("tokenizer training skipped records: %s", ", ".join(f"{k} {v}" for k, v in sorted(skipped.items())))
    if seen["docs"] == 0:
        raise TfpipeError(f"no documents to train on in {', '.join(files)}")
    got = tok.get_vocab_size()
    if got < vocab_size:  # the trainer stops when no pair is left that occurs min_frequency times
        log.warning("the corpus fills only %s of the %s tokens asked for (vocab_size): %s documents, %s characters "
                    "hold no more pairs seen at least %d times; train on more text or lower min_frequency",
                    f"{got:,}", f"{vocab_size:,}", f"{seen['docs']:,}", f"{seen['chars']:,}", min_frequency)
    write_output(out, tok.to_str(pretty=True).encode("utf-8"), streams=False)  # read back below
    log.info("trained BPE with %d tokens on %d documents (%d chars) -> %s", tok.get_vocab_size(), seen["docs"],
             seen["chars"], out)
    return HFTokenizer(out, eod_token=eod_token).info
