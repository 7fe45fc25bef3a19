"""converters.text.synthetic: seeded Pile-like documents and multi-frame jsonl.zst files."""
import json

import pytest
import zstandard

from converters.shardset.manifest import InputStats
from converters.text.readers import DocReadOptions, iter_documents
from converters.text.synthetic import (
    PILE_SUBSETS,
    pile_documents,
    word_list,
    write_pile_jsonl,
)


def test_word_list_distinct_and_seeded():
    w = word_list(500, seed=1)
    assert len(set(w)) == 500 and w == word_list(500, seed=1) and w != word_list(500, seed=2)
    assert all(x.isalpha() and x.islower() for x in w)


def test_documents_are_seeded_varied_and_pile_shaped():
    docs = list(pile_documents(200, seed=4, mean_words=50))
    assert docs == list(pile_documents(200, seed=4, mean_words=50))
    assert {d["meta"]["pile_set_name"] for d in docs} <= set(PILE_SUBSETS)
    assert len({d["meta"]["pile_set_name"] for d in docs}) > 10
    lens = [len(d["text"]) for d in docs]
    assert min(lens) > 0 and max(lens) > 4 * min(lens)
    assert any(not d["text"].isascii() for d in docs)
    assert any("\n\n" in d["text"] for d in docs)


@pytest.mark.parametrize("suffix", [".jsonl", ".jsonl.gz", ".jsonl.zst"])
def test_write_and_read_back(tmp_path, suffix):
    path = write_pile_jsonl(tmp_path / f"p{suffix}", 25, seed=2, mean_words=20, frame_docs=10)
    stats = InputStats(path)
    texts = [t for b in iter_documents(path, DocReadOptions(), stats) for t in b.texts]
    assert texts == [d["text"] for d in pile_documents(25, seed=2, mean_words=20)]
    if suffix == ".jsonl.zst":  # one frame per 10 documents: 3 frames
        data = open(path, "rb").read()
        assert data.count(b"\x28\xb5\x2f\xfd") >= 3
        out = zstandard.ZstdDecompressor().decompressobj().decompress(data)
        assert len(out.splitlines()) == 10  # a single-frame reader would stop here
        assert json.loads(out.splitlines()[0])["text"] == texts[0]
