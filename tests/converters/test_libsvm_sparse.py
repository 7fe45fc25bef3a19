"""The sparse LibSVM parser (``--sparse``, ``--multilabel``, ``--keep-qid``): tables of good and bad lines (the
compiled kernel against the Python reference), array growth, and differential tests against scikit-learn's
``load_svmlight_file`` on random lines."""
import io

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from converters.libsvm.block import convert_block, parse_block, serialize_parsed
from converters.libsvm.kernel import POW10
from converters.libsvm.options import ParseOptions
from converters.libsvm.reasons import REASONS
from converters.libsvm.reference import LineError, parse_sparse_line
from converters.libsvm.sparse import SparseBlock, row_stats
from converters.libsvm.sparse_kernel import (
    DONE,
    FALLBACK,
    LABELS_FULL,
    NNZ_FULL,
    ROWS_FULL,
    parse_sparse_kernel,
)


def bits(a):
    return np.asarray(a, dtype=np.float32).view(np.uint32).tolist()


def rows(r: SparseBlock):
    """Per row: (labels, qid, ids, values-bits)."""
    out = []
    for i in range(r.n):
        a, b = r.row_splits[i], r.row_splits[i + 1]
        labels = (r.label[r.label_splits[i]:r.label_splits[i + 1]] if r.label_splits is not None
                  else r.label[i:i + 1])
        out.append((bits(labels), None if r.qid is None else int(r.qid[i]), r.ids[a:b].tolist(), bits(r.values[a:b])))
    return out


def opts(**kw) -> ParseOptions:
    return ParseOptions(None, kw.get("index_base", 1), False, False, kw.get("allow_nonfinite", False),
                        kw.get("max_index"), True, kw.get("multilabel", False), kw.get("keep_qid", False))


# -- good lines -------------------------------------------------------------------------------------------

GOOD = [
    # text, options, (labels, qid, ids (zero-based), values)
    (b"1 1:0.5 7:1", {}, ([1.0], None, [0, 6], [0.5, 1.0])),
    (b"-1", {}, ([-1.0], None, [], [])),                                        # label only: an empty row
    (b"2.5 3:0 4:-0 9:0.0", {}, ([2.5], None, [2, 3, 8], [0.0, -0.0, 0.0])),     # explicit zeros kept
    (b"  +1\t2:3   5:1e-3  \r", {}, ([1.0], None, [1, 4], [3.0, 1e-3])),         # tabs, spaces, CR
    (b"1 qid:7 2:1", {}, ([1.0], None, [1], [1.0])),                             # qid ignored ...
    (b"1 qid:x 2:1", {}, ([1.0], None, [1], [1.0])),                             # ... not even parsed
    (b"1 qid:7 2:1", {"keep_qid": True}, ([1.0], 7, [1], [1.0])),                # ... or kept
    (b"1 qid:-3", {"keep_qid": True}, ([1.0], -3, [], [])),
    (b"1 qid:+0012", {"keep_qid": True}, ([1.0], 12, [], [])),
    (b"1 qid:1_000 1:1", {"keep_qid": True}, ([1.0], 1000, [0], [1.0])),         # Python int syntax
    (b"1 qid:9223372036854775807", {"keep_qid": True}, ([1.0], 2**63 - 1, [], [])),
    (b"1 qid:-9223372036854775808", {"keep_qid": True}, ([1.0], -2**63, [], [])),
    (b"3,1,2 4:1", {"multilabel": True}, ([1.0, 2.0, 3.0], None, [3], [1.0])),   # sorted ascending
    (b"1,0 2:2.5", {"multilabel": True}, ([0.0, 1.0], None, [1], [2.5])),
    (b"2,2 1:1", {"multilabel": True}, ([2.0, 2.0], None, [0], [1.0])),          # repeats kept
    (b"1e-50,-1e-50", {"multilabel": True}, ([-0.0, 0.0], None, [], [])),       # sorted as float64
    (b"-1e-50,1e-50", {"multilabel": True}, ([-0.0, 0.0], None, [], [])),
    (b" 2:3.5 11:26", {"multilabel": True}, ([], None, [1, 10], [3.5, 26.0])),  # no label at all
    (b"qid:4 2:1", {"multilabel": True, "keep_qid": True}, ([], 4, [1], [1.0])),
    (b"7 qid:4", {"multilabel": True, "keep_qid": True}, ([7.0], 4, [], [])),
    (b"1 0:1 200000:2", {"index_base": 0}, ([1.0], None, [0, 200000], [1.0, 2.0])),
    (b"1 1:1_000.5 2:.5 3:5. 4:1E+2", {}, ([1.0], None, [0, 1, 2, 3], [1000.5, 0.5, 5.0, 100.0])),
    (b"1 1:0.1234567890123456789 2:16777217", {},
     ([1.0], None, [0, 1], [float(np.float32(0.1234567890123456789)), 16777216.0])),
    (b"1 1:1 # 2:2 \xff", {}, ([1.0], None, [0], [1.0])),                        # comment (any bytes)
    (b"1 5:1", {"max_index": 5}, ([1.0], None, [4], [1.0])),
    (b"nan 1:inf", {"allow_nonfinite": True}, ([float("nan")], None, [0], [float("inf")])),
]


@pytest.mark.parametrize("text,kw,expected", GOOD)
@pytest.mark.parametrize("ending", [b"\n", b"\r\n", b""])
def test_good_lines(text, kw, expected, ending):
    r = parse_block(b"# head\n" + text + ending, sparse=True, **kw)
    labels, qid, ids, values = expected
    assert r.n == 1 and r.skipped == {} and r.blank == 1, (r.skipped, r.bad)
    assert rows(r) == [(bits(labels), qid, ids, bits(values))]
    ref = parse_sparse_line(text, opts(**kw))  # the Python reference agrees
    assert (bits(ref[0]), ref[1], ref[2], bits(ref[3])) == rows(r)[0]


# -- bad lines ----------------------------------------------------------------------------------------------

BAD = [
    (b"abc 1:1", {}, "bad_label"),
    (b"1,2 1:1", {}, "bad_label"),                          # a label list needs --multilabel
    (b"1, 1:1", {"multilabel": True}, "bad_label"),
    (b",1 1:1", {"multilabel": True}, "bad_label"),
    (b"1,x 1:1", {"multilabel": True}, "bad_label"),
    (b"1,nan 1:1", {"multilabel": True}, "nonfinite"),
    (b"1 abc", {}, "bad_token"),
    (b"1 :4", {}, "missing_index"),
    (b"1 3:", {}, "missing_value"),
    (b"1 3:x", {}, "bad_value"),
    (b"1 3:4:5", {}, "bad_value"),
    (b"1 x:3", {}, "bad_index"),
    (b"1 99999999999999999999:1", {}, "bad_index"),
    (b"1 -3:1", {}, "negative_index"),
    (b"1 0:1", {}, "index_zero"),
    (b"1 2:1 1:1", {}, "unsorted_index"),
    (b"1 2:1 2:1", {}, "duplicate_index"),
    (b"1 5:1", {"max_index": 4}, "index_too_large"),
    (b"1 1:1e39", {}, "nonfinite"),
    (b"inf 1:1", {}, "nonfinite"),
    (b"1 1:1\x00", {}, "nul_byte"),
    (b"1 1:\xc3\xa9", {}, "non_ascii"),
    (b"1 qid:\xff 1:1", {"keep_qid": True}, "non_ascii"),
    (b"1 qid:x 1:1", {"keep_qid": True}, "bad_qid"),
    (b"1 qid: 1:1", {"keep_qid": True}, "bad_qid"),
    (b"1 qid:1.5", {"keep_qid": True}, "bad_qid"),
    (b"1 qid:9223372036854775808", {"keep_qid": True}, "bad_qid"),
    (b"1 qid:1:2", {"keep_qid": True}, "bad_qid"),
    (b"1 1:1", {"keep_qid": True}, "missing_qid"),
    (b"1", {"keep_qid": True}, "missing_qid"),
    (b"1 1:1 qid:3", {"keep_qid": True}, "missing_qid"),    # qid must come first
    (b"1 abc", {"keep_qid": True}, "missing_qid"),          # the qid check comes before the pairs
    (b"1 1:1 qid:3", {}, "bad_index"),
]


@pytest.mark.parametrize("text,kw,reason", BAD)
@pytest.mark.parametrize("ending", [b"\n", b"\r\n", b""])
def test_bad_lines(text, kw, reason, ending):
    good = b"1 qid:1 1:1\n"
    r = parse_block(good + text + ending, sparse=True, first_line=10, **kw)
    assert r.n == 1 and r.skipped == {reason: 1}, (r.skipped, r.bad)
    assert [(b.line, b.reason) for b in r.bad] == [(11, reason)]
    assert r.bad[0].describe("f.txt").startswith(f"f.txt:11: {reason}: ")
    assert r.records_read == 2
    with pytest.raises(LineError) as e:
        parse_sparse_line(text, opts(**kw))
    assert e.value.reason == reason


def test_every_reason_but_pair_count_is_covered_by_the_table():
    assert {r for *_, r in BAD} == set(REASONS) - {"pair_count"}


def test_bad_lines_show_their_token():
    r = parse_block(b"1 1:1\n1 2:1 2:7\n1,x 1:1\n", sparse=True, multilabel=True, keep_qid=False)
    assert [(b.line, b.reason, b.token) for b in r.bad] == [(2, "duplicate_index", b"2:7"), (3, "bad_label", b"1,x")]
    r = parse_block(b"1 qid:1\n1 4:1\n", sparse=True, keep_qid=True)
    assert r.bad[0].message == "no qid:N on this line (--keep-qid needs one on every line)"


# -- arrays grow as needed ------------------------------------------------------------------------------------

def test_many_short_lines_grow_the_rows():
    text = b"1\n" * 70_000 + b"2,1 1:3\n" * 30_000
    r = parse_block(text, sparse=True, multilabel=True)
    assert r.n == 100_000 and r.row_splits[-1] == 30_000 and r.label.size == 130_000
    assert r.label[-2:].tolist() == [1.0, 2.0] and r.label_splits[70_000] == 70_000


def _kernel(text: bytes, rows: int, pairs: int, labels: int, multilabel=False, keep_qid=False):
    buf = np.frombuffer(text, np.uint8)
    state = np.array([0, 1, 0, 0, 0, 0, 0], np.int64)
    arrays = (np.zeros(labels, np.float32), np.zeros(labels), np.zeros(rows + 1, np.int64),
              np.zeros(rows if keep_qid else 0, np.int64), np.zeros(pairs, np.int64), np.zeros(pairs, np.float32),
              np.zeros(rows + 1, np.int64))
    status = parse_sparse_kernel(buf, state, 1, False, -1, multilabel, keep_qid, *arrays,
                                 np.zeros(len(REASONS), np.int64), np.zeros((4, 4), np.int64), POW10)
    return status, state


@pytest.mark.parametrize("text,rows,pairs,labels,multilabel,status,at", [
    (b"1 1:1\n2 1:1 2:2\n", 5, 2, 5, False, NNZ_FULL, 6),      # 2nd line does not fit: resume at its start
    (b"1 1:1\n2 1:1\n", 1, 5, 5, False, ROWS_FULL, 6),
    (b"1,2 1:1\n3,4,5\n", 5, 5, 4, True, LABELS_FULL, 8),
    (b"1 1:1\n1 1:1_0\n", 5, 5, 5, False, FALLBACK, 6),        # the Python reference decides that line
    (b"1 1:1\n2 1:1\n", 2, 2, 2, False, DONE, 12),
])
def test_kernel_stops_at_the_line_start_when_an_array_is_full(text, rows, pairs, labels, multilabel, status, at):
    got, state = _kernel(text, rows, pairs, labels, multilabel)
    assert got == status
    assert state[0] == at and state[2] == (1 if status != DONE else 2)


# -- serialization ------------------------------------------------------------------------------------------

@pytest.mark.parametrize("kw,keys", [({}, ("label", "ids", "values")),
                                     ({"keep_qid": True}, ("y", "i", "v", "q")),
                                     ({"multilabel": True, "keep_qid": True}, ("label", "ids", "values"))])
def test_serialized_examples_equal_protobuf(kw, keys):
    import tensorflow as tf

    text = b"1,3 qid:2 1:0.5 9:-2\n2 qid:2\n# c\n qid:5 4:0\n"
    if not kw.get("multilabel"):
        text = b"1 qid:2 1:0.5 9:-2\n2 qid:2\n# c\n0 qid:5 4:0\n"
    framed, lengths, parsed = convert_block(text, sparse=True, keys=keys, **kw)
    assert parsed.n == 3 and lengths.sum() == framed.size
    qk = (keys[3] if len(keys) > 3 else "qid")
    pos = 0
    for i, (labels, qid, ids, values) in enumerate(rows(parsed)):
        feats = {keys[0]: tf.train.Feature(float_list=tf.train.FloatList(value=np.array(labels, np.uint32)
                                                                          .view(np.float32))),
                 keys[1]: tf.train.Feature(int64_list=tf.train.Int64List(value=ids)),
                 keys[2]: tf.train.Feature(float_list=tf.train.FloatList(value=np.array(values, np.uint32)
                                                                          .view(np.float32)))}
        if qid is not None:
            feats[qk] = tf.train.Feature(int64_list=tf.train.Int64List(value=[qid]))
        want = tf.train.Example(features=tf.train.Features(feature=feats)).SerializeToString(deterministic=True)
        assert framed[pos + 12: pos + lengths[i] - 4].tobytes() == want
        pos += lengths[i]
    assert serialize_parsed(parse_block(b"\n", sparse=True))[0].size == 0


def test_row_stats():
    r = parse_block(b"1 3:1 9:2\n1\n1 2:1\n", sparse=True)
    assert row_stats(r) == {"rows": 3, "nonzeros": 3, "min_nonzeros": 0, "max_nonzeros": 2, "max_id": 8}
    assert row_stats(parse_block(b"1\n", sparse=True))["max_id"] == -1


@pytest.mark.parametrize("kw", [{"sparse": True, "field_size": 3}, {"sparse": True, "pad": True},
                                {"field_size": 3, "multilabel": True}, {"field_size": 3, "keep_qid": True},
                                {}])
def test_layout_options_are_validated(kw):
    with pytest.raises(ValueError):
        parse_block(b"1 1:1\n", **kw)


# -- differential test against scikit-learn ---------------------------------------------------------------------

FRAGMENTS = ["1", "0", "2", "9", "10", "-", "+", ".", "e", ":", " ", " ", "\t", "#", "nan", ",", ",", "qid:",
             "qid:1", "_", "x", "1e400", "00", "123456789012345678901", "3:", ":4", "1:1", " 5:0.5", " 7:-0"]


def _sklearn(line: bytes, zero_based: bool, multilabel: bool, query_id: bool):
    from sklearn.datasets import load_svmlight_file

    return load_svmlight_file(io.BytesIO(line + b"\n"), zero_based=zero_based, dtype=np.float64,
                              multilabel=multilabel, query_id=query_id, n_features=1 << 62)


@settings(max_examples=500, deadline=None)
@given(st.lists(st.sampled_from(FRAGMENTS), min_size=0, max_size=14), st.booleans(), st.booleans(),
       st.booleans())
def test_property_random_lines_agree_with_sklearn(frags, zero_based, multilabel, keep_qid):
    """A line is accepted iff scikit-learn accepts it, with the same labels, qid, ids and numbers (nan/inf
    allowed here, as that is our policy on top of sklearn's syntax). Deliberate differences: with keep_qid a
    line needs a qid (sklearn's query array would go out of step with the rows), and indices may use all of
    int64 (sklearn's are a C int)."""
    line = "".join(frags).encode("latin-1")
    r = parse_block(line + b"\n", sparse=True, index_base=0 if zero_based else 1, allow_nonfinite=True,
                    multilabel=multilabel, keep_qid=keep_qid)
    try:
        out = _sklearn(line, zero_based, multilabel, keep_qid)
    except OverflowError:
        big = r.n == 1 and r.ids.size and int(r.ids.max()) + (0 if zero_based else 1) >= 1 << 31
        assert big or (r.n == 0 and sum(r.skipped.values()) == 1), (line, r.skipped)
        return
    except ValueError:
        assert r.n == 0 and r.blank == 0 and sum(r.skipped.values()) == 1, (line, r.skipped)
        return
    X, y = out[0], out[1]
    if X.shape[0] == 0:
        assert r.blank == 1 and r.n == 0
        return
    if keep_qid and out[2].size == 0:
        assert r.skipped == {"missing_qid": 1}, (line, r.skipped)
        return
    assert r.n == 1, (line, r.skipped, r.bad)
    got = rows(r)[0]
    labels = sorted(y[0]) if multilabel else [y[0]]
    with np.errstate(over="ignore"):
        assert got[0] == bits(np.array(labels, np.float64).astype(np.float32))
        assert got[2] == X.indices.tolist()
        assert got[3] == bits(X.data.astype(np.float32))
    assert got[1] == (int(out[2][0]) if keep_qid else None)
