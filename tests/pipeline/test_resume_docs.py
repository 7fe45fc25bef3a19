"""The resume examples of docs/pipeline.md run as written (in a directory holding ``shards/``), each twice: a
first run, then a resumed one that continues where the first stopped; and the Keras callback's own rules."""
from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from pipeline_data import write_indexed_set

from pipeline import InputStateCallback, PipelineSpec, build_dataset, fit_calls, input_state, restore_input_state

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


SEEN: list[list[int]] = []     # the records (ids[:, 0] = record index) of each step the model trained on
KILL_AT: list[int | None] = [None]  # a run stops (an error inside the step, as a kill) after this many steps


def _recorder():
    """A registered layer that records the batch each training step sees (``load_model`` brings it back)."""
    import keras
    import tensorflow as tf

    @keras.saving.register_keras_serializable("tfpipe_test_resume_docs")
    class Record(keras.layers.Layer):
        def call(self, ids):
            def record(first):
                if KILL_AT[0] is not None and len(SEEN) >= KILL_AT[0]:
                    raise RuntimeError("killed")
                SEEN.append([int(x) for x in first.numpy()])
            tf.py_function(record, [ids[:, 0]], [])
            return ids

    return Record


def _model():
    import tensorflow as tf

    ids = tf.keras.Input(shape=(3,), dtype=tf.int64, name="ids")
    values = tf.keras.Input(shape=(3,), dtype=tf.float32, name="values")
    emb = tf.keras.layers.Embedding(input_dim=N + 3, output_dim=2)(_recorder()()(ids))
    x = tf.keras.layers.Flatten()(tf.keras.layers.Multiply()([emb, tf.keras.layers.Reshape((3, 1))(values)]))
    model = tf.keras.Model({"ids": ids, "values": values}, tf.keras.layers.Dense(1)(x))
    model.compile(optimizer="sgd", loss="mse")
    return model


def _spec(**kw):
    return PipelineSpec.from_manifest("shards/", 64, shuffle_buffer=200, seed=42, resumable=True, **kw)


def _three_runs(block: str, where: str, names: dict) -> tuple[list, list, list]:
    """The block run uninterrupted, then from scratch killed after step 90, then resumed: the steps each saw."""
    import shutil

    runs = []
    for kill in (None, 90, None):
        if len(runs) < 2:                   # the resumed run starts from the killed run's checkpoint directory
            shutil.rmtree(where, ignore_errors=True)
        SEEN.clear()
        KILL_AT[0] = kill
        try:
            exec(block, {k: make() for k, make in names.items()})
        except Exception as exc:            # the kill: an error inside a training step (any wrapper TF adds)
            if kill is None or "killed" not in str(exc):
                raise
        finally:
            KILL_AT[0] = None
        runs.append(list(SEEN))
    return runs[0], runs[1], runs[2]


def test_the_docs_have_the_three_examples():
    blocks = _blocks()
    assert len(blocks) == 3 and "InputStateCallback" in blocks[1] and "CheckpointManager" in blocks[2]


def test_first_example(here):
    exec(_blocks()[0], {})


def test_keras_fit_example_resumes_mid_epoch_exactly(here, recwarn):
    """save_freq=25 with 30-step epochs: the run killed at step 90 resumes from the state of step 75 and trains
    steps 76..120, the uninterrupted run's batches; and no ``fit`` of the recipe warns that Keras ignores
    ``shuffle=True`` (``fit_calls`` passes ``shuffle=False``)."""
    full, killed, resumed = _three_runs(_blocks()[1], "ckpt", {"make_model": lambda: _model})
    assert not [str(w.message) for w in recwarn if "shuffle=True" in str(w.message)]
    assert len(full) == 120 and len(killed) == 90
    assert len(resumed) == 45 and killed[:75] + resumed == full
    assert full == batches_of_ids(build_dataset(_spec(epochs=None)).take(120))
    assert restore_input_state("ckpt/") == input_state(_spec(epochs=None), 100)   # saved at 25, 50 of the rest


def test_custom_loop_example_resumes_mid_epoch_exactly(here):
    def train_step(features, label):
        if KILL_AT[0] is not None and len(SEEN) >= KILL_AT[0]:
            raise RuntimeError("killed")
        SEEN.append([int(x) for x in features["ids"][:, 0].numpy()])

    full, killed, resumed = _three_runs(_blocks()[2], "ckpt-loop",
                                        {"model": _model, "train_step": lambda: train_step})
    assert len(full) == 120 and len(killed) == 90
    assert len(resumed) == 45 and killed[:75] + resumed == full
    assert full == batches_of_ids(build_dataset(_spec(epochs=None)).take(120))
    assert restore_input_state("ckpt-loop/") == input_state(_spec(epochs=None), 100)   # saved every 25 steps


def batches_of_ids(dataset) -> list[list[int]]:
    return [[int(x) for x in features["ids"][:, 0].numpy()] for features, _ in dataset]


@pytest.mark.parametrize("saved, calls", [
    (None, [(0, 4, 30)]),                   # a first run
    (90, [(3, 4, 30)]),                     # saved at an epoch end: one call
    (75, [(2, 3, 15), (3, 4, 30)]),         # mid-epoch: the rest of epoch 2, then epoch 3
    (25, [(0, 1, 5), (1, 4, 30)]),
    (119, [(3, 4, 1)]),                     # the last step of the last epoch left
    (120, []),                              # all done: no call
    (150, []),
])
def test_fit_calls_train_the_uninterrupted_runs_steps(here, saved, calls):
    spec = _spec(epochs=None)
    state = None if saved is None else input_state(spec, saved)
    got = fit_calls(spec, state, epochs=4, steps_per_epoch=30)
    assert [(c["initial_epoch"], c["epochs"], c["steps_per_epoch"]) for c in got] == calls
    assert all(c["shuffle"] is False for c in got)     # the spec shuffles: Keras's flag off, no warning
    assert sum(c["steps_per_epoch"] * (c["epochs"] - c["initial_epoch"]) for c in got) == max(0, 120 - (saved or 0))
    step = saved or 0                       # each call's data starts at the step the calls before it end
    for c in got:
        assert batches_of_ids(c["x"].take(1)) == batches_of_ids(build_dataset(spec).skip(step).take(1))
        step += c["steps_per_epoch"] * (c["epochs"] - c["initial_epoch"])


@pytest.mark.parametrize("kw, match", [
    ({"epochs": 4, "steps_per_epoch": 0}, "steps_per_epoch must be an integer >= 1, got 0"),
    ({"epochs": -1, "steps_per_epoch": 30}, "epochs must be an integer >= 0, got -1"),
    ({"epochs": 4, "steps_per_epoch": True}, "steps_per_epoch must be an integer >= 1, got True"),
])
def test_fit_calls_bad_arguments(here, kw, match):
    with pytest.raises(ValueError, match=re.escape(match)):
        fit_calls(_spec(epochs=None), None, **kw)


def test_fit_calls_refuses_a_state_of_another_run(here):
    from pipeline import ResumeError

    other = input_state(PipelineSpec.from_manifest("shards/", 64, shuffle_buffer=200, seed=43, resumable=True), 75)
    with pytest.raises(ResumeError, match="another seed"):
        fit_calls(_spec(epochs=None), other, epochs=4, steps_per_epoch=30)


def test_callback_every_n_batches_and_bad_save_freq(here):
    spec = _spec(epochs=None)
    model = _model()
    model.fit(build_dataset(spec), epochs=1, steps_per_epoch=7, verbose=0, shuffle=False,
              callbacks=[InputStateCallback(spec, "cb/", save_freq=3)])
    assert restore_input_state("cb/") == input_state(spec, 6)
    with pytest.raises(ValueError, match="save_freq"):
        InputStateCallback(spec, "cb/", save_freq=0)
    assert restore_input_state(here / "nothing-here") is None


def test_callback_refuses_an_unresumable_spec(here):
    from pipeline import ResumeError

    with pytest.raises(ResumeError, match="builds the resumable order, and this one does not: resumable=False"):
        InputStateCallback(_spec().with_(resumable=False), "cb/")


def test_callback_counts_steps_with_steps_per_execution(here):
    spec = _spec(epochs=None)
    model = _model()
    model.compile(optimizer="sgd", loss="mse", steps_per_execution=3)
    model.fit(build_dataset(spec), epochs=2, steps_per_epoch=6, verbose=0, shuffle=False,
              callbacks=[InputStateCallback(spec, "spe/")])
    assert restore_input_state("spe/") == input_state(spec, 12)
