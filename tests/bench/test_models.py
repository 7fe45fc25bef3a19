"""bench.core.models: one real train step of each small model runs and returns a finite loss."""
from __future__ import annotations

import math

import numpy as np
import pytest

from bench.core.measure import measure
from bench.core.models import (
    deepfm,
    deepfm_batch,
    keras_step,
    lm_batch,
    split_libsvm,
    split_lm,
    tiny_lm,
)

tf = pytest.importorskip("tensorflow")
HAS_GPU = bool(tf.config.list_physical_devices("GPU"))


def test_deepfm_train_step_on_pipeline_shaped_batch():
    model = deepfm(5, vocab=97, embed_dim=4, hidden=(8,))
    feats, label = deepfm_batch(16, 5)
    feats["extra"] = np.zeros(16)  # features the model does not take are dropped
    step = keras_step(model)
    loss = step((feats, label))
    assert math.isfinite(float(loss))
    r = measure([(feats, label)] * 4, step, steps=3, warmup=1)
    assert r.records == 48


def test_deepfm_learns_a_trivial_label():
    model = deepfm(3, vocab=31, embed_dim=4, hidden=(8,), learning_rate=0.05)
    feats, _ = deepfm_batch(64, 3, seed=1)
    label = (feats["ids"][:, 2] % 2).astype(np.float32)
    step = keras_step(model)
    first = float(step((feats, label)))
    for _ in range(30):
        last = float(step((feats, label)))
    assert last < first


def test_tiny_lm_train_step():
    model = tiny_lm(8, vocab=32, d_model=16, heads=2, layers_=1, ff=16)
    batch = lm_batch(4, 8, vocab=32)
    step = keras_step(model)
    loss = step(batch)
    assert math.isfinite(float(loss))
    assert 0 < float(loss) < 2 * math.log(32)


@pytest.mark.parametrize("batch, ok", [
    (({"ids": 1}, 2), True),
    ({"label": 2, "ids": 1}, True),
    ({"ids": 1}, False),
    ([1, 2, 3], False),
])
def test_split_libsvm(batch, ok):
    if ok:
        x, y = split_libsvm(batch)
        assert y == 2 and x == {"ids": 1}
    else:
        with pytest.raises(ValueError, match="cannot split"):
            split_libsvm(batch)


def test_split_lm_shifts_by_one():
    w = np.arange(10).reshape(2, 5)
    for batch in ({"input_ids": w}, ({"input_ids": w}, None), w):
        x, y = split_lm(batch)
        np.testing.assert_array_equal(x, w[:, :-1])
        np.testing.assert_array_equal(y, w[:, 1:])
    with pytest.raises(ValueError, match="input_ids"):
        split_lm({"other": w})


@pytest.mark.parametrize("kw, match", [({"field_size": 0}, "field_size"), ({"vocab": 1}, "vocab")])
def test_deepfm_validates(kw, match):
    with pytest.raises(ValueError, match=match):
        deepfm(**{"field_size": 3, **kw})


@pytest.mark.skipif(not HAS_GPU, reason="needs a GPU")
def test_deepfm_step_runs_on_gpu():
    model = deepfm(39)
    step = keras_step(model)
    feats, label = deepfm_batch(512, 39)
    r = measure([(feats, label)] * 12, step, steps=10, warmup=2)
    assert r.steps == 10
    assert any("GPU" in v.device for v in model.trainable_variables)
