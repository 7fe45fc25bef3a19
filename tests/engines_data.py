"""Shared by the engine tests: small inputs (LibSVM files of very different sizes, text in several formats, bad
lines) and the check that two shard sets are the same bytes with equal manifests."""
from __future__ import annotations

import bz2
import gzip
import json
import os

import zstandard

from converters.libsvm.synthetic import criteo_lines
from converters.shardset.manifest import MANIFEST_NAME
from converters.shardset.reader import read_manifest
from converters.text.synthetic import pile_documents, write_pile_jsonl


def libsvm_files(d, sizes=(5, 1500, 6000), *, seed: int = 0) -> list[str]:
    """Plain LibSVM files of ``sizes`` lines (39 fields), named a.libsvm, b.libsvm, ..."""
    os.makedirs(d, exist_ok=True)
    out = []
    for k, n in enumerate(sizes):
        p = os.path.join(str(d), f"{chr(97 + k)}.libsvm")
        with open(p, "wb") as f:
            f.write(criteo_lines(n, seed=seed + k))
        out.append(p)
    return out


def compressed_libsvm_files(d, *, seed: int = 10) -> list[str]:
    """The same kind of data as .gz, .zst and .bz2 files (+ one plain file between them)."""
    os.makedirs(d, exist_ok=True)
    data = [criteo_lines(n, seed=seed + k) for k, n in enumerate((700, 40, 1200, 900))]
    paths = [os.path.join(str(d), n) for n in ("a.libsvm.gz", "b.libsvm", "c.libsvm.zst", "d.libsvm.bz2")]
    with gzip.open(paths[0], "wb") as f:
        f.write(data[0])
    with open(paths[1], "wb") as f:
        f.write(data[1])
    with open(paths[2], "wb") as f:
        c = zstandard.ZstdCompressor()
        f.write(c.compress(data[2][:50_000]) + c.compress(data[2][50_000:]))  # two frames
    with open(paths[3], "wb") as f:
        f.write(bz2.compress(data[3]))
    return paths


def spoil(path: str, lines: dict[int, bytes]) -> None:
    """Replace 1-based line numbers of a plain file with other content (bad lines, blank lines)."""
    with open(path, "rb") as f:
        content = f.read().split(b"\n")
    for no, text in lines.items():
        content[no - 1] = text
    with open(path, "wb") as f:
        f.write(b"\n".join(content))


def text_files(d, *, seed: int = 0) -> list[str]:
    """jsonl (plain, multi-frame .zst, .gz) of very different sizes, a .txt and a .parquet file."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    os.makedirs(d, exist_ok=True)
    d = str(d)
    paths = [write_pile_jsonl(os.path.join(d, "a.jsonl"), 3, seed=seed, mean_words=40),
             write_pile_jsonl(os.path.join(d, "b.jsonl.zst"), 120, seed=seed + 1, mean_words=60, frame_docs=30),
             write_pile_jsonl(os.path.join(d, "c.jsonl.gz"), 40, seed=seed + 2, mean_words=20)]
    docs = [x["text"] for x in pile_documents(6, seed=seed + 3, mean_words=30)]
    txt = os.path.join(d, "d.txt")
    with open(txt, "w", encoding="utf-8") as f:
        f.write("\n\n".join(t.replace("\n\n", "\n") for t in docs) + "\n")
    pq_path = os.path.join(d, "e.parquet")
    rows = list(pile_documents(30, seed=seed + 4, mean_words=30))
    pq.write_table(pa.table({"text": [r["text"] for r in rows], "meta": [r["meta"] for r in rows]}), pq_path,
                   row_group_size=7)
    return paths + [txt, pq_path]


def bad_jsonl(path: str) -> str:
    """A jsonl file with an invalid line (4), a line without text (7) and an empty text (9)."""
    lines = [json.dumps(d) for d in pile_documents(12, seed=7, mean_words=20)]
    lines[3] = '{"text": "unterminated'
    lines[6] = json.dumps({"meta": {"pile_set_name": "Enron Emails"}})
    lines[8] = json.dumps({"text": ""})
    with open(path, "w", encoding="utf-8") as f:
        f.write("\n".join(lines) + "\n")
    return path


def tree(path) -> list[str]:
    """Every file under ``path`` (a group's part directories included), relative, sorted."""
    return sorted(os.path.relpath(os.path.join(d, n), path) for d, _, names in os.walk(path) for n in names)


def assert_same_output(a, b) -> None:
    """Same file names (in part directories too), byte-identical files, equal manifests (and identical
    ``index.json`` bytes)."""
    a, b = str(a), str(b)
    names = tree(a)
    assert names == tree(b), (names, tree(b))
    assert MANIFEST_NAME in names
    for n in names:
        with open(os.path.join(a, n), "rb") as fa, open(os.path.join(b, n), "rb") as fb:
            assert fa.read() == fb.read(), f"{n} differs"
    assert read_manifest(a) == read_manifest(b)
