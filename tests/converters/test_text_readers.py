"""converters.text.readers: streaming readers (jsonl/.gz/.zst/parquet/txt), bad input table, accounting."""
from __future__ import annotations

import gzip
import json

import pytest
import zstandard

from converters.shardset.manifest import InputStats
from converters.text.readers import DocReadOptions, format_of, iter_documents
from converters.util.errors import InputError, TfpipeError


def _read(path, **kw):
    stats = InputStats(str(path))
    batches = list(iter_documents(str(path), DocReadOptions(**kw), stats))
    docs = [(t, s, ln) for b in batches for t, s, ln in zip(b.texts, b.subsets, b.lines)]
    assert stats.records_read == stats.records_written + stats.records_skipped  # accounting invariant
    assert stats.records_written == len(docs)
    return docs, stats, batches


def _zst_frames(*parts: bytes) -> bytes:
    c = zstandard.ZstdCompressor()
    return b"".join(c.compress(p) for p in parts)


GOOD = b'{"text": "first"}\n'
# name, file suffix, content, (reason, line) on raise, texts kept with skip
BAD_INPUT = [
    ("invalid_json", ".jsonl", GOOD + b'{"text": oops}\n' + GOOD, ("invalid_json", 2), ["first", "first"]),
    ("truncated_last_line", ".jsonl", GOOD + b'{"text": "cut', ("truncated_line", 2), ["first"]),
    ("missing_text", ".jsonl", b'{"body": "x"}\n' + GOOD, ("missing_text", 1), ["first"]),
    ("null_text", ".jsonl", b'{"text": null}\n' + GOOD, ("missing_text", 1), ["first"]),
    ("non_string_text", ".jsonl", GOOD + b'{"text": 42}\n', ("text_not_string", 2), ["first"]),
    ("list_text", ".jsonl", GOOD + b'{"text": ["a"]}\n', ("text_not_string", 2), ["first"]),
    ("not_an_object", ".jsonl", b'[1, 2]\n' + GOOD, ("not_an_object", 1), ["first"]),
    ("lone_surrogate", ".jsonl", GOOD + b'{"text": "a\\ud800b"}\n', ("lone_surrogate", 2), ["first"]),
    ("lone_low_surrogate", ".jsonl", b'{"text": "\\udc00"}\n' + GOOD, ("lone_surrogate", 1), ["first"]),
    ("invalid_utf8", ".jsonl", GOOD + b'{"text": "\xff\xfe"}\n' + GOOD, ("invalid_utf8", 2), ["first", "first"]),
    ("bom_not_at_start", ".jsonl", GOOD + b'\xef\xbb\xbf{"text": "x"}\n', ("invalid_json", 2), ["first"]),
    ("truncated_zst", ".jsonl.zst", _zst_frames(GOOD * 3, GOOD * 50)[:-7], ("truncated_file", None),
     ["first"] * 3),
    ("gzip_named_zst", ".jsonl.zst", gzip.compress(GOOD), ("unreadable_file", None), []),
    ("plain_named_zst", ".jsonl.zst", GOOD, ("unreadable_file", None), []),
    ("plain_named_gz", ".jsonl.gz", GOOD, ("unreadable_file", None), []),
    ("truncated_gz", ".jsonl.gz", gzip.compress(GOOD * 200)[:-20], ("truncated_file", None), None),
]


@pytest.mark.parametrize("name, suffix, content, expect, kept", BAD_INPUT, ids=[c[0] for c in BAD_INPUT])
def test_bad_input_raises_with_file_and_line(tmp_path, name, suffix, content, expect, kept):
    path = tmp_path / f"in{suffix}"
    path.write_bytes(content)
    with pytest.raises(InputError) as ei:
        _read(path)
    reason, line = expect
    assert str(path) in str(ei.value)
    assert ei.value.path == str(path)
    if line is not None:
        assert ei.value.line == line
        assert f"{path}:{line}:" in str(ei.value)
        assert ei.value.reason == reason
    else:
        assert ei.value.offset is not None


@pytest.mark.parametrize("name, suffix, content, expect, kept", BAD_INPUT, ids=[c[0] for c in BAD_INPUT])
def test_bad_input_skip_counts_by_reason(tmp_path, name, suffix, content, expect, kept):
    path = tmp_path / f"in{suffix}"
    path.write_bytes(content)
    docs, stats, _ = _read(path, on_error="skip")
    reason, _ = expect
    assert stats.skipped == {reason: 1}
    assert stats.examples and reason in stats.examples[0] and str(path) in stats.examples[0]
    if kept is not None:
        assert [d[0] for d in docs] == kept


@pytest.mark.parametrize("content, texts, lines, blank, skipped", [
    # blank lines (incl. whitespace-only and CRLF) are not records
    (b'\n{"text": "a"}\n   \n\r\n{"text": "b"}\n\n', ["a", "b"], [2, 5], 4, {}),
    # UTF-8 BOM at the start of the file is ignored
    (b'\xef\xbb\xbf{"text": "a"}\n', ["a"], [1], 0, {}),
    # empty text is skipped and counted, never an error
    (b'{"text": ""}\n{"text": "a"}\n', ["a"], [2], 0, {"empty_text": 1}),
    # CRLF line endings, no final newline, valid surrogate pair, raw U+2028 inside a string
    (b'{"text": "a"}\r\n{"text": "\\ud83d\\ude00 \xe2\x80\xa8x"}', ["a", "\U0001F600 \u2028x"], [1, 2], 0, {}),
    # other keys and non-dict meta are fine
    (b'{"text": "a", "meta": 5, "id": 1}\n', ["a"], [1], 0, {}),
])
def test_jsonl_edge_cases_accepted(tmp_path, content, texts, lines, blank, skipped):
    path = tmp_path / "in.jsonl"
    path.write_bytes(content)
    docs, stats, _ = _read(path)  # on_error="raise": none of these is an error
    assert [d[0] for d in docs] == texts
    assert [d[2] for d in docs] == lines
    assert stats.blank_lines == blank
    assert stats.skipped == skipped


def _pile_lines(n, start=0):
    subsets = ["ArXiv", "GitHub", "Pile-CC"]
    return "".join(json.dumps({"text": f"doc {i} é", "meta": {"pile_set_name": subsets[i % 3]}}) + "\n"
                   for i in range(start, start + n)).encode("utf-8")


@pytest.mark.parametrize("suffix", [".jsonl", ".jsonl.gz", ".jsonl.zst", ".ndjson.zst"])
def test_compressed_multiframe_read_to_the_end(tmp_path, suffix):
    path = tmp_path / f"in{suffix}"
    if suffix.endswith(".gz"):
        path.write_bytes(gzip.compress(_pile_lines(40)[:100]) + gzip.compress(_pile_lines(40)[100:]))
    elif suffix.endswith(".zst"):
        path.write_bytes(_zst_frames(_pile_lines(10), _pile_lines(10, 10), _pile_lines(20, 20)))
    else:
        path.write_bytes(_pile_lines(40))
    docs, stats, _ = _read(path)
    assert [d[0] for d in docs] == [f"doc {i} é" for i in range(40)]
    assert [d[2] for d in docs] == list(range(1, 41))
    assert docs[1][1] == "GitHub"


def test_small_batches_keep_order(tmp_path):
    path = tmp_path / "in.jsonl"
    path.write_bytes(_pile_lines(100))
    docs, _, batches = _read(path, batch_chars=50)
    assert len(batches) > 10
    assert [d[0] for d in docs] == [f"doc {i} é" for i in range(100)]
    assert sum(b.nbytes for b in batches) == path.stat().st_size


@pytest.mark.parametrize("include, exclude, expect", [
    (None, None, 30),
    (["ArXiv"], None, 10),
    (["ArXiv", "GitHub"], None, 20),
    (None, ["ArXiv"], 20),
    (["ArXiv", "GitHub"], ["GitHub"], 10),
    (["Nope"], None, 0),
])
def test_subset_filter(tmp_path, include, exclude, expect):
    path = tmp_path / "in.jsonl"
    path.write_bytes(_pile_lines(30) + b'{"text": "no meta"}\n')
    docs, stats, _ = _read(path, include_subsets=include, exclude_subsets=exclude)
    no_meta = 1 if include is None else 0
    assert len(docs) == expect + no_meta
    assert stats.skipped.get("subset_filtered", 0) == 31 - expect - no_meta
    if include:
        assert {d[1] for d in docs} <= set(include)
    if no_meta:
        assert docs[-1][1] == ""


def test_text_key(tmp_path):
    path = tmp_path / "in.jsonl"
    path.write_bytes(b'{"content": "a", "text": "no"}\n')
    docs, _, _ = _read(path, text_key="content")
    assert [d[0] for d in docs] == ["a"]


# -- parquet -------------------------------------------------------------------------------------------

def _parquet(path, table, row_group_size=4):
    import pyarrow.parquet as pq

    pq.write_table(table, str(path), row_group_size=row_group_size)


def test_parquet_row_groups_and_meta(tmp_path):
    import pyarrow as pa

    texts = [f"t{i}" for i in range(10)]
    texts[3] = None
    texts[5] = ""
    meta = [{"pile_set_name": "ArXiv" if i % 2 else "GitHub"} for i in range(10)]
    path = tmp_path / "in.parquet"
    _parquet(path, pa.table({"text": texts, "meta": meta}))
    with pytest.raises(InputError, match=r"in.parquet:4: .*missing_text"):
        _read(path)
    docs, stats, _ = _read(path, on_error="skip", include_subsets=["ArXiv"])
    assert [d[0] for d in docs] == ["t1", "t7", "t9"]
    assert [d[2] for d in docs] == [2, 8, 10]
    assert stats.skipped == {"missing_text": 1, "empty_text": 1, "subset_filtered": 5}


def test_parquet_meta_as_json_string(tmp_path):
    import pyarrow as pa

    path = tmp_path / "in.parquet"
    _parquet(path, pa.table({"text": ["a", "b"], "meta": ['{"pile_set_name": "ArXiv"}', "not json"]}))
    docs, _, _ = _read(path)
    assert [(d[0], d[1]) for d in docs] == [("a", "ArXiv"), ("b", "")]


def test_parquet_bad_columns(tmp_path):
    import pyarrow as pa

    path = tmp_path / "in.parquet"
    _parquet(path, pa.table({"body": ["a", "b", "c"]}))
    with pytest.raises(InputError, match="no column 'text'"):
        _read(path)
    _, stats, _ = _read(path, on_error="skip")
    assert stats.skipped == {"missing_text": 3}
    path2 = tmp_path / "num.parquet"
    _parquet(path2, pa.table({"text": [1, 2]}))
    with pytest.raises(InputError, match=r"num.parquet:1: .*not string"):
        _read(path2)
    _, stats, _ = _read(path2, on_error="skip")
    assert stats.skipped == {"text_not_string": 2}
    path3 = tmp_path / "junk.parquet"
    path3.write_bytes(b"this is not parquet at all")
    with pytest.raises(InputError, match="not a readable parquet file"):
        _read(path3)
    _, stats, _ = _read(path3, on_error="skip")
    assert stats.skipped == {"unreadable_file": 1}


# -- txt -----------------------------------------------------------------------------------------------

TXT = b"\xef\xbb\xbfPara one\r\nline two\n\n\n  \nPara two\nend"


def test_txt_block_mode(tmp_path):
    path = tmp_path / "in.txt"
    path.write_bytes(TXT)
    docs, stats, _ = _read(path)
    assert [(d[0], d[2]) for d in docs] == [("Para one\nline two", 1), ("Para two\nend", 6)]
    assert stats.blank_lines == 3


def test_txt_file_mode(tmp_path):
    path = tmp_path / "in.txt.gz"
    path.write_bytes(gzip.compress(TXT))
    docs, _, _ = _read(path, txt_mode="file")
    assert [d[0] for d in docs] == [TXT[3:].decode()]
    bad = tmp_path / "bad.txt"
    bad.write_bytes(b"ok \xff")
    with pytest.raises(InputError, match="invalid UTF-8"):
        _read(bad, txt_mode="file")
    empty = tmp_path / "empty.txt"
    empty.write_bytes(b"")
    docs, stats, _ = _read(empty, txt_mode="file")
    assert docs == [] and stats.skipped == {"empty_text": 1}


def test_txt_invalid_utf8_line(tmp_path):
    path = tmp_path / "in.txt"
    path.write_bytes(b"good\n\nbad \xff line\n\nlast\n")
    with pytest.raises(InputError, match=r"in.txt:3: invalid UTF-8"):
        _read(path)
    docs, stats, _ = _read(path, on_error="skip")
    assert [d[0] for d in docs] == ["good", "last"]
    assert stats.skipped == {"invalid_utf8": 1}


# -- formats and options ---------------------------------------------------------------------------------

@pytest.mark.parametrize("name, fmt", [
    ("a.jsonl", "jsonl"), ("a.jsonl.zst", "jsonl"), ("a.ndjson.gz", "jsonl"), ("a.json.bz2", "jsonl"),
    ("a.parquet", "parquet"), ("a.txt", "txt"), ("a.txt.zst", "txt"),
])
def test_format_of(name, fmt):
    assert format_of(name) == fmt


@pytest.mark.parametrize("name, match", [
    ("a.csv", "unknown input format"), ("a.parquet.gz", "compressed internally"), ("a.zst", "unknown input"),
])
def test_format_of_errors(name, match):
    with pytest.raises(TfpipeError, match=match):
        format_of(name)


@pytest.mark.parametrize("kwargs, match", [
    ({"text_key": ""}, "text_key must be a non-empty string"),
    ({"on_error": "ignore"}, "on_error must be 'raise' or 'skip', got 'ignore'"),
    ({"txt_mode": "line"}, "txt_mode must be 'block' or 'file', got 'line'"),
    ({"batch_chars": 0}, "batch_chars must be positive, got 0"),
    ({"include_subsets": "ArXiv"}, "must be a collection of subset names"),
])
def test_read_options_validation(kwargs, match):
    with pytest.raises(ValueError, match=match):
        DocReadOptions(**kwargs)


# -- properties ------------------------------------------------------------------------------------------

from hypothesis import given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402


@settings(max_examples=60, deadline=None)
@given(texts=st.lists(st.text(max_size=30), max_size=30), ascii_=st.booleans(), crlf=st.booleans(),
       batch=st.integers(1, 64), suffix=st.sampled_from([".jsonl", ".jsonl.zst", ".jsonl.gz"]))
def test_jsonl_reader_is_lossless(tmp_path_factory, texts, ascii_, crlf, batch, suffix):
    """Any Unicode text written as jsonl (escaped or raw UTF-8, LF or CRLF, any compression) reads back exactly,
    in order, with line numbers; empty texts are counted as skipped."""
    nl = "\r\n" if crlf else "\n"
    data = "".join(json.dumps({"text": t}, ensure_ascii=ascii_) + nl for t in texts).encode("utf-8")
    path = tmp_path_factory.mktemp("p") / f"in{suffix}"
    if suffix.endswith(".zst"):
        data = _zst_frames(data[: len(data) // 2], data[len(data) // 2:]) if data else b""
    elif suffix.endswith(".gz"):
        data = gzip.compress(data)
    if not data:  # an empty .zst has no frame at all; nothing to test
        return
    path.write_bytes(data)
    docs, stats, _ = _read(path, batch_chars=batch)
    assert [d[0] for d in docs] == [t for t in texts if t]
    assert [d[2] for d in docs] == [i + 1 for i, t in enumerate(texts) if t]
    assert stats.skipped == ({"empty_text": texts.count("")} if "" in texts else {})
