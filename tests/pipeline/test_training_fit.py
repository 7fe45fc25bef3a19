"""The Keras ``fit`` recipes of docs/pipeline.md run without Keras's "``shuffle=True`` ignored" warning: the
quick start as written, and ``fit_calls`` (its calls pass ``shuffle=False``); the same ``fit`` without it warns,
so the check can fail."""
from __future__ import annotations

import re
import warnings
from pathlib import Path

import pytest
from pipeline_data import write_indexed_set

DOC = Path(__file__).resolve().parents[2] / "docs" / "pipeline.md"
N = 600


def _quick_start() -> str:
    text = DOC.read_text()
    section = text[text.index("## Quick start: Keras `fit`"):]
    block = re.search(r"```python\n(.*?)```", section, re.S).group(1)
    assert "shuffle=False" in block
    return block.replace("epochs=10", "epochs=1")


def _model():
    import keras

    ids = keras.Input(shape=(3,), dtype="int64", name="ids")
    values = keras.Input(shape=(3,), dtype="float32", name="values")
    x = keras.layers.Concatenate()([keras.layers.Rescaling(1e-9)(keras.ops.cast(ids, "float32")), values])
    model = keras.Model({"ids": ids, "values": values}, keras.layers.Dense(1)(x))
    model.compile(optimizer="sgd", loss="mse")
    return model


def _shuffle_warnings(caught) -> list[str]:
    return [str(w.message) for w in caught if "shuffle=True" in str(w.message)]


@pytest.fixture()
def here(tmp_path, monkeypatch):
    write_indexed_set(tmp_path / "shards", N, shard_bytes=8 << 10)
    monkeypatch.chdir(tmp_path)
    return tmp_path


def test_quick_start_fit_gives_no_shuffle_warning(here):
    scope = {"model": _model()}
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        exec(_quick_start(), scope)
    assert _shuffle_warnings(caught) == []
    # the control: the same fit with Keras's default shuffle=True warns
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        scope["model"].fit(scope["train"], epochs=1, steps_per_epoch=2, verbose=0)
    assert len(_shuffle_warnings(caught)) == 1


def test_fit_calls_give_no_shuffle_warning(here):
    from pipeline import PipelineSpec, fit_calls, input_state

    spec = PipelineSpec.from_manifest("shards/", 64, shuffle_buffer=100, seed=7, epochs=None)
    model = _model()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        calls = fit_calls(spec, input_state(spec, 3), epochs=2, steps_per_epoch=4)
        assert len(calls) == 2
        for call in calls:
            model.fit(**call, verbose=0)
    assert _shuffle_warnings(caught) == []
