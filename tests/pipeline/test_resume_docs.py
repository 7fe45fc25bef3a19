"""The resume examples of docs/pipeline.md run as written (in a directory holding ``shards/``), each twice: a
first run, then a resumed one that continues where the first stopped; and the Keras callback's own rules."""
from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from pipeline_data import batches_of, write_indexed_set

from pipeline import InputStateCallback, PipelineSpec, build_dataset, input_state, restore_input_state

DOC = Path(__file__).resolve().parents[2] / "docs" / "pipeline.md"
N = 2000


def _blocks() -> list[str]:
    text = DOC.read_text()
    section = text[text.index("## Resuming a stopped run"):text.index("## Pipe mode")]
    return re.findall(r"```python\n(.*?)```", section, re.S)


@pytest.fixture()
def here(tmp_path, monkeypatch):
    write_indexed_set(tmp_path / "shards", N, shard_bytes=8 << 10)
    monkeypatch.chdir(tmp_path)
    return tmp_path


def _model():
    import tensorflow as tf

    ids = tf.keras.Input(shape=(3,), dtype=tf.int64, name="ids")
    values = tf.keras.Input(shape=(3,), dtype=tf.float32, name="values")
    emb = tf.keras.layers.Embedding(input_dim=N + 3, output_dim=2)(ids)
    x = tf.keras.layers.Flatten()(tf.keras.layers.Multiply()([emb, tf.keras.layers.Reshape((3, 1))(values)]))
    model = tf.keras.Model({"ids": ids, "values": values}, tf.keras.layers.Dense(1)(x))
    model.compile(optimizer="sgd", loss="mse")
    return model


def _spec(**kw):
    return PipelineSpec.from_manifest("shards/", 64, shuffle_buffer=200, seed=42, resumable=True, **kw)


def test_the_docs_have_the_three_examples():
    blocks = _blocks()
    assert len(blocks) == 3 and "InputStateCallback" in blocks[1] and "CheckpointManager" in blocks[2]


def test_first_example(here):
    exec(_blocks()[0], {})


def test_keras_fit_example_saves_and_resumes(here):
    block = _blocks()[1]
    exec(block, {"model": _model()})
    state = json.loads((here / "ckpt" / "input_state.json").read_text())
    assert state == input_state(_spec(epochs=None), 30)
    exec(block.replace("epochs=3,", "epochs=5,"), {"model": _model()})    # the restarted run trains 2 more epochs
    assert restore_input_state("ckpt/") == input_state(_spec(epochs=None), 50)


def test_custom_loop_example_resumes_exactly(here):
    seen: list[list[int]] = []

    def train_step(features, label):
        seen.append([int(x) for x in label.numpy()])

    block = _blocks()[2]
    for _ in range(2):   # a first run of 20 steps, then a restarted one that goes on
        exec(block, {"model": _model(), "train_step": train_step})
    assert restore_input_state("ckpt-loop/") == input_state(_spec(epochs=None), 40)
    assert seen == batches_of(build_dataset(_spec(epochs=None)).take(40))


def test_callback_every_n_batches_and_bad_save_freq(here):
    spec = _spec(epochs=None)
    model = _model()
    model.fit(build_dataset(spec), epochs=1, steps_per_epoch=7, verbose=0,
              callbacks=[InputStateCallback(spec, "cb/", save_freq=3)])
    assert restore_input_state("cb/") == input_state(spec, 6)
    with pytest.raises(ValueError, match="save_freq"):
        InputStateCallback(spec, "cb/", save_freq=0)
    assert restore_input_state(here / "nothing-here") is None


def test_callback_refuses_an_unresumable_spec(here):
    from pipeline import ResumeError

    with pytest.raises(ResumeError, match="resumable=True"):
        InputStateCallback(_spec().with_(resumable=False), "cb/")


def test_callback_counts_steps_with_steps_per_execution(here):
    spec = _spec(epochs=None)
    model = _model()
    model.compile(optimizer="sgd", loss="mse", steps_per_execution=3)
    model.fit(build_dataset(spec), epochs=2, steps_per_epoch=6, verbose=0,
              callbacks=[InputStateCallback(spec, "spe/")])
    assert restore_input_state("spe/") == input_state(spec, 12)
