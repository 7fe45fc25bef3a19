"""converters.prep.balance: exact per-label counts from a seeded keyed hash, bounded memory (radix selection
over a label file), the same records whatever the batching, another seed another sample."""
from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from converters.prep.balance import BalanceOptions, LabelCounts, label_name
from converters.util.errors import InputError


def kept_mask(labels, options, tmp_path, count_batches=3, keep_batches=5):
    counts = LabelCounts(options, str(tmp_path / "labels.bin"))
    for part in np.array_split(labels, count_batches):
        counts.add(part)
    th = counts.thresholds()
    assert not (tmp_path / "labels.bin").exists()
    parts = np.array_split(np.arange(len(labels)), keep_batches)
    return np.concatenate([th.keep(labels[p], int(p[0]) if len(p) else 0) for p in parts]), th


LABELS = np.r_[np.zeros(6000), np.ones(2000), np.full(7, 2.5)].astype(np.float32)


@pytest.mark.parametrize("spec, want", [
    ("equal", {0.0: 7, 1.0: 7, 2.5: 7}),
    ("0=0.5,1=1", {0.0: 3000, 1.0: 2000, 2.5: 7}),
    ("1=0.1", {0.0: 6000, 1.0: 200, 2.5: 7}),
    ("0=0,2.5=0.5", {0.0: 0, 1.0: 2000, 2.5: 4}),          # round(3.5) == 4 (round half to even)
])
def test_exact_counts(tmp_path, spec, want):
    mask, th = kept_mask(LABELS, BalanceOptions.parse(spec, seed=3), tmp_path)
    assert {float(x): int(mask[LABELS == x].sum()) for x in np.unique(LABELS)} == want
    assert th.report()["counts_out"] == {label_name(k): v for k, v in want.items()}


def test_same_sample_whatever_the_batching_and_another_for_another_seed(tmp_path):
    a, _ = kept_mask(LABELS, BalanceOptions("equal", seed=1), tmp_path, 1, 1)
    b, _ = kept_mask(LABELS, BalanceOptions("equal", seed=1), tmp_path, 9, 4)
    c, _ = kept_mask(LABELS, BalanceOptions("equal", seed=2), tmp_path)
    assert np.array_equal(a, b) and not np.array_equal(a, c)


@settings(max_examples=25, deadline=None)
@given(st.lists(st.sampled_from([0.0, 1.0, -1.0, 3.5]), min_size=1, max_size=300), st.integers(0, 5))
def test_property_equal_keeps_the_minimum_of_every_label(tmp_path_factory, labels, seed):
    labels = np.array(labels, np.float32)
    mask, _ = kept_mask(labels, BalanceOptions("equal", seed=seed), tmp_path_factory.mktemp("b"))
    counts = [int((labels == x).sum()) for x in np.unique(labels)]
    assert all(int(mask[labels == x].sum()) == min(counts) for x in np.unique(labels))


def test_a_rate_for_a_label_the_input_lacks_is_an_error(tmp_path):
    with pytest.raises(InputError, match="label.* 7.*labels: 0, 1, 2.5"):
        kept_mask(LABELS, BalanceOptions.parse("7=0.5", seed=0), tmp_path)


@pytest.mark.parametrize("text, match", [
    ("0=1.5", "in \\[0, 1\\]"), ("x=0.5", "LABEL=RATE"), ("0.5", "LABEL=RATE"), ("0=0.1,0=0.2", "twice"),
])
def test_bad_balance_options(text, match):
    with pytest.raises(ValueError, match=match):
        BalanceOptions.parse(text, seed=0)


@pytest.mark.parametrize("label, name", [(0.0, "0"), (1.0, "1"), (-1.0, "-1"), (2.5, "2.5"), (0.1, "0.1"),
                                         (-0.0, "0")])
def test_label_name(label, name):
    assert label_name(label) == name


ODD = np.array([np.nan, -np.nan, 0.0, -0.0, np.inf, -np.inf, 3e38, 1.0] * 50, np.float32)


@pytest.mark.parametrize("spec, want", [
    ("equal", {"-inf": 50, "0": 50, "1": 50, "300000000000000000000000000000000000000": 50, "inf": 50, "nan": 50}),
    ("nan=0.5,-0=0,inf=1", {"-inf": 50, "0": 0, "1": 50, "300000000000000000000000000000000000000": 50,
                            "inf": 50, "nan": 50}),
])
def test_nan_inf_and_negative_zero_are_labels_like_any_other(tmp_path, spec, want):
    """Every NaN is one label ``nan`` (listed last), -0.0 is 0, ±inf are labels: no KeyError, exact counts."""
    _, th = kept_mask(ODD, BalanceOptions.parse(spec, seed=1), tmp_path)
    report = th.report()
    assert report["counts_in"] == {"-inf": 50, "0": 100, "1": 50, "300000000000000000000000000000000000000": 50,
                                   "inf": 50, "nan": 100}
    assert list(report["counts_in"])[-1] == "nan"
    out = report["counts_out"]
    assert out == {**want, **({"0": 50, "nan": 50} if spec == "equal" else {"nan": 50})}
