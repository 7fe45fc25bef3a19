"""Synthetic Pile-like documents (no downloads): English-ish words from a seeded syllable generator, Zipf
word frequencies, sentences and paragraphs of varied length, and the Pile's 22 subset names.

Used by tests, the quickstart and ``tfpipe bench convert-text``.
"""
from __future__ import annotations

import functools
import json
import os

import numpy as np

__all__ = ["PILE_SUBSETS", "word_list", "pile_documents", "write_pile_jsonl"]

PILE_SUBSETS = (
    "Pile-CC", "PubMed Central", "ArXiv", "GitHub", "FreeLaw", "StackExchange", "USPTO Backgrounds",
    "PubMed Abstracts", "Gutenberg (PG-19)", "OpenWebText2", "Wikipedia (en)", "DM Mathematics",
    "Ubuntu IRC", "BookCorpus2", "EuroParl", "HackerNews", "YoutubeSubtitles", "PhilPapers",
    "NIH ExPorter", "Enron Emails", "Books3", "OpenSubtitles",
)

_ONSETS = ("", "b", "c", "d", "f", "g", "h", "j", "k", "l", "m", "n", "p", "r", "s", "t", "v", "w", "y",
           "br", "ch", "cl", "cr", "dr", "fl", "gr", "pl", "pr", "sh", "sl", "sp", "st", "str", "th", "tr")
_VOWELS = ("a", "e", "i", "o", "u", "ai", "ea", "ee", "ie", "oo", "ou", "y")
_CODAS = ("", "", "", "n", "r", "s", "t", "l", "m", "nd", "ng", "nt", "rd", "st", "ck", "ght", "tion")
_PUNCT = (".", ".", ".", ".", "?", "!", ";", ":")


@functools.lru_cache(maxsize=8)
def _words(n: int, seed: int) -> tuple[str, ...]:
    rng = np.random.default_rng(seed)
    words: list[str] = []
    seen: set[str] = set()
    while len(words) < n:
        m = 2 * (n - len(words)) + 16
        k = rng.choice(4, size=m, p=(0.35, 0.35, 0.2, 0.1)) + 1
        on = rng.integers(len(_ONSETS), size=(m, 4))
        vo = rng.integers(len(_VOWELS), size=(m, 4))
        co = rng.integers(len(_CODAS), size=(m, 4))
        for i in range(m):
            w = "".join(_ONSETS[on[i, j]] + _VOWELS[vo[i, j]] + _CODAS[co[i, j]] for j in range(k[i]))
            if w not in seen:
                seen.add(w)
                words.append(w)
                if len(words) == n:
                    break
    return tuple(words)


def word_list(n: int = 20_000, *, seed: int = 0) -> list[str]:
    """``n`` distinct pseudo-English words (1-4 syllables), most frequent first."""
    return list(_words(n, seed))


def pile_documents(n: int, *, seed: int = 0, mean_words: int = 300, unicode: bool = True):
    """Yield ``n`` dicts ``{"text": ..., "meta": {"pile_set_name": ...}}`` with varied length (log-normal
    around ``mean_words``), capitalized sentences, numbers, paragraphs and, if ``unicode``, a little
    non-ASCII text (accents, CJK, emoji) so multi-byte UTF-8 is exercised."""
    rng = np.random.default_rng(seed)
    words = np.array(word_list(seed=seed), dtype=object)
    ranks = np.arange(1, len(words) + 1)
    cdf = np.cumsum(1.0 / ranks ** 1.07)
    cdf /= cdf[-1]
    extras = ("café", "naïve", "Zürich", "日本語", "データ", "😀", "αβγ", "–", "“quoted”")
    subset_cdf = np.cumsum(np.linspace(2.0, 0.5, len(PILE_SUBSETS)))
    subset_cdf /= subset_cdf[-1]
    for _ in range(n):
        nw = max(1, int(rng.lognormal(np.log(mean_words), 0.8)))
        toks = list(words[np.minimum(np.searchsorted(cdf, rng.random(nw)), len(words) - 1)])
        pos = 0
        out: list[str] = []
        while pos < nw:
            sl = int(rng.integers(4, 25))
            sent = toks[pos:pos + sl]
            pos += sl
            sent[0] = sent[0].capitalize()
            if rng.random() < 0.15:
                sent.insert(int(rng.integers(len(sent) + 1)), str(int(rng.integers(0, 10_000))))
            if unicode and rng.random() < 0.05:
                sent.insert(int(rng.integers(len(sent) + 1)), extras[rng.integers(len(extras))])
            out.append(" ".join(sent) + _PUNCT[rng.integers(len(_PUNCT))])
            out.append("\n\n" if rng.random() < 0.12 else " ")
        text = "".join(out).rstrip()
        subset = PILE_SUBSETS[min(int(np.searchsorted(subset_cdf, rng.random())), len(PILE_SUBSETS) - 1)]
        yield {"text": text, "meta": {"pile_set_name": subset}}


def write_pile_jsonl(path: str | os.PathLike, n: int, *, seed: int = 0, mean_words: int = 300,
                     frame_docs: int = 1000) -> str:
    """Write ``n`` synthetic documents as jsonl; ``.zst`` (one zstd frame per ``frame_docs`` documents, as
    multi-frame as the Pile's own files) and ``.gz`` by extension. Returns the path."""
    path = str(path)
    lines = (json.dumps(d, ensure_ascii=False) + "\n" for d in pile_documents(n, seed=seed, mean_words=mean_words))
    if path.endswith(".zst"):
        import zstandard

        cctx = zstandard.ZstdCompressor(level=3)
        with open(path, "wb") as f:
            chunk: list[str] = []
            for line in lines:
                chunk.append(line)
                if len(chunk) == frame_docs:
                    f.write(cctx.compress("".join(chunk).encode("utf-8")))
                    chunk = []
            if chunk:
                f.write(cctx.compress("".join(chunk).encode("utf-8")))
    elif path.endswith(".gz"):
        import gzip

        with gzip.open(path, "wt", encoding="utf-8") as f:
            f.writelines(lines)
    else:
        with open(path, "w", encoding="utf-8") as f:
            f.writelines(lines)
    return path
