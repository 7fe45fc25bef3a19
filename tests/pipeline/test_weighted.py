"""pipeline.graph.weighted: a group of per-label shard sets read balanced at read time (sample_from_datasets), or whole
without weights; epoch semantics, determinism, describe, and the refusals."""
from __future__ import annotations

import os

import numpy as np
import pytest

from converters.libsvm.convert import convert_libsvm
from converters.prep.options import PrepOptions
from pipeline import PipelineSpec, build_dataset, describe

ZEROS, ONES = 6_000, 2_000


@pytest.fixture(scope="module")
def group(tmp_path_factory):
    d = tmp_path_factory.mktemp("weighted")
    rng = np.random.default_rng(0)
    vals = rng.integers(1, 1_000_000, size=(ZEROS + ONES, 2))
    (d / "in.libsvm").write_bytes(b"".join(b"%d 1:%d 2:%d\n" % (int(i >= ZEROS), a, b)
                                          for i, (a, b) in enumerate(vals)))
    convert_libsvm(d / "in.libsvm", d / "g", field_size=2, shard_size=60_000,
                   prep=PrepOptions(split_by_label=True))
    convert_libsvm(d / "in.libsvm", d / "plain", field_size=2)
    return d


def labels(ds) -> np.ndarray:
    return np.concatenate([label.numpy() for _, label in ds])


def test_label_weights_balance_at_read_time(group):
    spec = PipelineSpec.from_manifest(group / "g", 500, label_weights={0: 0.5, 1: 0.5}, seed=3)
    got = labels(build_dataset(spec))
    assert len(got) == ZEROS + ONES                                  # one epoch: as many records as the group
    first = got[:10_000] if len(got) >= 10_000 else got
    assert abs(first.mean() - 0.5) <= 0.03
    again = labels(build_dataset(spec))
    assert np.array_equal(got, again)                                # seeded: the same draw
    skewed = labels(build_dataset(spec.with_(part_weights=((spec.part_weights[0][0], 0.9),
                                                           (spec.part_weights[1][0], 0.1)))))
    assert abs(skewed.mean() - 0.1) <= 0.03


def test_ten_thousand_records_half_ones(group):
    spec = PipelineSpec.from_manifest(group / "g", 1000, label_weights={"0": 1, "1": 1}, seed=7, epochs=2)
    got = labels(build_dataset(spec))
    assert len(got) == 2 * (ZEROS + ONES) and abs(got[:10_000].mean() - 0.5) <= 0.03


def test_without_weights_the_group_reads_as_one_set(group):
    spec = PipelineSpec.from_manifest(group / "g", 512)
    assert not spec.part_weights and spec.records == ZEROS + ONES
    got = labels(build_dataset(spec))
    assert sorted(got.tolist()) == [0.0] * ZEROS + [1.0] * ONES


def test_epochs_steps_and_describe(group):
    spec = PipelineSpec.from_manifest(group / "g", 300, label_weights={0: 1, 1: 3}, seed=1, drop_remainder=True)
    batches = list(build_dataset(spec))
    assert len(batches) == (ZEROS + ONES) // 300 and all(len(b[1]) == 300 for b in batches)
    text = describe(spec)
    for needle in ("sample", "weights=[0.25, 0.75]", "repeat", "an epoch holds as many records as the group"):
        assert needle in text


@pytest.mark.parametrize("weights, where, match", [
    ({0: 1, 1: 1}, "plain", "needs a group of per-label shard sets"),
    ({0: 1}, "g", "no weight for 1"),
    ({0: 1, 1: 1, 5: 1}, "g", "no part for 5"),
    ({0: 0, 1: 0}, "g", "at least one part a weight > 0"),
    ({0: -1, 1: 1}, "g", "numbers >= 0"),
    ({"x": 1}, "g", "keys must be labels"),
    ({0: float("inf"), 1: 1}, "g", "finite numbers >= 0, got inf for label 0"),
    ({0: 1, 1: float("nan")}, "g", "finite numbers >= 0, got nan for label 1"),
])
def test_refusals(group, weights, where, match):
    from converters.util.errors import TfpipeError

    with pytest.raises((ValueError, TfpipeError), match=match):
        PipelineSpec.from_manifest(group / where, 64, label_weights=weights)


def test_huge_finite_weights_are_normalized_without_overflow(group):
    spec = PipelineSpec.from_manifest(group / "g", 64, label_weights={0: 1e308, 1: 3e307})
    assert [round(w, 6) for _, w in spec.part_weights] == [round(1 / 1.3, 6), round(0.3 / 1.3, 6)]


def test_zero_weight_leaves_a_part_out(group):
    spec = PipelineSpec.from_manifest(group / "g", 500, label_weights={0: 0, 1: 1}, seed=2)
    assert set(labels(build_dataset(spec)).tolist()) == {1.0}


def test_a_remote_group_is_copied_into_copy_dir(group, s3, tmp_path):
    """A balanced group in S3 is copied whole (not streamed) into ``copy_dir``, the stream cache's directory
    option being another one (``stream_cache_dir``)."""
    import warnings

    for path in sorted((group / "g").rglob("*")):
        if path.is_file():
            s3.client.put_object(Bucket=s3.bucket, Key=f"g/{path.relative_to(group / 'g')}", Body=path.read_bytes())
    with warnings.catch_warnings(record=True) as said:
        warnings.simplefilter("always")
        spec = PipelineSpec.from_manifest(f"{s3.url}/g", 500, label_weights={0: 1, 1: 1}, seed=3,
                                          copy_dir=str(tmp_path / "copy"))
    assert spec.stream is None and spec.files
    assert all(f.startswith(str(tmp_path / "copy") + "/") and os.path.isfile(f) for f in spec.files)
    assert [str(w.message) for w in said if w.category is DeprecationWarning] == []
    assert len(labels(build_dataset(spec))) == ZEROS + ONES
