"""The id policies (``idpolicy``): which one the options choose, what each asks of the job (the pre-pass, the
manifest's entries and options), their checks, and a block's ids under ``--hash-buckets``."""
from __future__ import annotations

import numpy as np
import pytest

from converters.tabular.encode import hash_bins
from converters.tabular.idpolicy import HashBins, Hashing, VocabFrom, Vocabulary, id_policy
from converters.tabular.options import TabularOptions
from converters.tabular.rows import Rows


@pytest.mark.parametrize("min_count, vocab_from, hash_buckets, policy", [
    (1, None, None, Vocabulary(1)),
    (3, None, None, Vocabulary(3)),
    (1, "s3://b/train", None, VocabFrom("s3://b/train")),
    (1, None, 1000, Hashing(1000)),
    (1, None, np.int64(7), Hashing(7)),
])
def test_the_options_choose_one_policy(min_count, vocab_from, hash_buckets, policy):
    assert id_policy(min_count, vocab_from, hash_buckets, 13, 26) == policy
    opts = TabularOptions(min_count=min_count, vocab_from=vocab_from, hash_buckets=hash_buckets)
    assert opts.ids == policy


@pytest.mark.parametrize("min_count, vocab_from, hash_buckets, words", [
    (1, "set", 10, "hash_buckets and vocab_from exclude each other"),
    (2, None, 10, "min_count applies to vocabularies, not to hash_buckets"),
    (2, "set", None, "min_count applies to counted vocabularies, not to vocab_from"),
    (1, None, 0, "hash_buckets must be an integer in [1, 354745078340568299], got 0"),
    (1, None, 1 << 62, f"hash_buckets must be an integer in [1, 354745078340568299], got {1 << 62}"),
])
def test_contradicting_options_are_one_line_naming_them(min_count, vocab_from, hash_buckets, words):
    for make in (lambda: id_policy(min_count, vocab_from, hash_buckets, 13, 26),
                 lambda: TabularOptions(min_count=min_count, vocab_from=vocab_from, hash_buckets=hash_buckets)):
        with pytest.raises(ValueError) as exc:
            make()
        assert words in str(exc.value)


@pytest.mark.parametrize("make, words", [
    (lambda: Vocabulary(0), "min_count must be a positive integer, got 0"),
    (lambda: Vocabulary(1.5), "min_count must be a positive integer, got 1.5"),
    (lambda: Hashing(0), "hash_buckets must be a positive integer, got 0"),
    (lambda: Hashing("8"), "hash_buckets must be a positive integer, got '8'"),
    (lambda: VocabFrom(""), "vocab_from must be a set's location, got ''"),
    (lambda: VocabFrom(3), "vocab_from must be a set's location, got 3"),
])
def test_a_bad_policy_field_is_named_with_its_value(make, words):
    with pytest.raises(ValueError) as exc:
        make()
    assert str(exc.value) == words


@pytest.mark.parametrize("policy, numeric, prepass", [
    (Vocabulary(1), "log1p", True),
    (Vocabulary(2), "minmax", True),
    (VocabFrom("set"), "log1p", False),  # the set's vocabularies and min-max
    (VocabFrom("set"), "minmax", False),
    (Hashing(9), "log1p", False),
    (Hashing(9), "minmax", True),       # min/max fitted on these inputs
])
def test_the_pre_pass_runs_when_the_policy_or_minmax_needs_it(policy, numeric, prepass):
    assert policy.needs_prepass(numeric) is prepass


@pytest.mark.parametrize("policy, doc", [
    (Vocabulary(2), {"min_count": 2, "vocab_from": None, "hash_buckets": None}),
    (VocabFrom("s3://b/sets/train/"), {"min_count": 1, "vocab_from": "train", "hash_buckets": None}),
    (Hashing(64), {"min_count": 1, "vocab_from": None, "hash_buckets": 64}),
])
def test_the_manifest_options_name_the_policy(policy, doc):
    assert policy.to_json() == doc


FILE = ("C1", ".tmp-vocab-C1.txt", 120, "ab" * 32, 40)


@pytest.mark.parametrize("policy, file, entry", [
    (Vocabulary(1), FILE, {"column": "C1", "table_size": 31, "vocab": "vocab/C1.txt", "vocab_size": 30,
                           "bytes": 120, "sha256": "ab" * 32, "distinct": 40}),
    (VocabFrom("set"), FILE[:4] + (-1,), {"column": "C1", "table_size": 31, "vocab": "vocab/C1.txt",
                                          "vocab_size": 30, "bytes": 120, "sha256": "ab" * 32}),
    (Hashing(31), None, {"column": "C1", "table_size": 31}),
])
def test_each_columns_manifest_entry(policy, file, entry):
    assert policy.entry("C1", 31, file) == entry


@pytest.mark.parametrize("dtype, offset", [(np.uint32, 0), (np.int64, 13), (np.int64, (1 << 40) + 5)])
def test_hash_bins_put_a_columns_bins_plus_its_offset(dtype, offset):
    values = np.array([b"", b"a", b"68fd1e64", b"a-longer-value"], "S14")
    rows = Rows(np.arange(1, 5), np.zeros(4), np.zeros((4, 0)), np.zeros((4, 0), bool), cats=[values, values])
    out = np.zeros((4, 2), dtype)
    HashBins(97).put(rows, 1, out, 0, offset)
    assert out[:, 0].tolist() == (hash_bins(values, 97) + offset).tolist() and not out[:, 1].any()
    assert Hashing(97).column_ids(None, ["C1", "C2"], None, None) == [HashBins(97)] * 2
