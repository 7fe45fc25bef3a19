"""The input state beside a model checkpoint: ``input_state.json`` in ``ModelCheckpoint``'s or
``tf.train.CheckpointManager``'s directory, written atomically, read back with one call.

``InputStateCallback(spec, directory)`` counts the training steps Keras ``fit`` runs and writes the input
state whenever the model is checkpointed (each epoch end, or every ``save_freq`` batches, as
``ModelCheckpoint(save_freq=...)``); ``restore_input_state(directory)`` returns it (``None`` on a first run),
ready for ``build_dataset(spec, resume=state)``. ``fit_calls(spec, state, epochs=E, steps_per_epoch=S)`` gives
the ``model.fit`` arguments that train exactly the uninterrupted run's remaining steps, also from a state
saved in the middle of a Keras epoch (its rest first, as a short epoch of its own). Custom loops call
``save_input_state(directory, input_state(spec, step, start=state))`` after ``manager.save()``.
"""
from __future__ import annotations

import json
import os
from typing import Any

from converters.util.fs import write_atomic
from converters.util.safe_json import read_bounded_json

from .state import MAX_STATE_BYTES, input_state, resume_position

__all__ = ["STATE_FILE", "save_input_state", "restore_input_state", "InputStateCallback", "fit_calls"]

STATE_FILE = "input_state.json"


def _path(directory: str | os.PathLike) -> str:
    return os.path.join(os.fspath(directory), STATE_FILE)


def save_input_state(directory: str | os.PathLike, state: dict[str, Any]) -> str:
    """Write ``state`` to ``directory/input_state.json`` atomically (temp name, fsync, rename); its path."""
    os.makedirs(os.fspath(directory), exist_ok=True)
    path = _path(directory)
    write_atomic(path, (json.dumps(state, sort_keys=True) + "\n").encode())
    return path


def restore_input_state(directory: str | os.PathLike) -> dict[str, Any] | None:
    """The input state saved in ``directory`` (``None`` when there is none yet), read as carefully as a
    manifest: a regular file, at most 2 KiB, shallow JSON. ``build_dataset(spec, resume=...)`` checks it."""
    path = _path(directory)
    if not os.path.lexists(path):
        return None
    return read_bounded_json(path, max_bytes=2 * MAX_STATE_BYTES, max_depth=4)


_CLASS: list[type] = []


def _callback_class() -> type:
    if _CLASS:
        return _CLASS[0]
    import keras

    class _InputStateCallback(keras.callbacks.Callback):
        """Writes the input state beside the model checkpoints (see :func:`InputStateCallback`)."""

        def __init__(self, spec, directory, start=None, save_freq="epoch"):
            super().__init__()
            if save_freq != "epoch" and (not isinstance(save_freq, int) or isinstance(save_freq, bool)
                                         or save_freq < 1):
                raise ValueError(f"save_freq must be 'epoch' or a positive number of batches, got {save_freq!r}")
            self.spec, self.directory, self.start, self.save_freq = spec, directory, start, save_freq
            self.base, self.in_epoch, self.saved = 0, 0, 0
            input_state(spec, 0, start=start)   # refuses a spec or a start state that cannot resume, now

        @property
        def steps(self) -> int:
            """Steps trained in this run: whole epochs plus the current one's batches (Keras numbers a
            batch from 0 in each epoch, and with ``steps_per_execution`` reports only every k-th)."""
            return self.base + self.in_epoch

        def state(self) -> dict[str, Any]:
            return input_state(self.spec, self.steps, start=self.start)

        def on_train_batch_end(self, batch, logs=None):
            self.in_epoch = batch + 1
            if self.save_freq != "epoch" and self.steps // self.save_freq > self.saved // self.save_freq:
                self.saved = self.steps
                save_input_state(self.directory, self.state())

        def on_epoch_end(self, epoch, logs=None):
            self.base, self.in_epoch = self.base + self.in_epoch, 0
            if self.save_freq == "epoch":
                save_input_state(self.directory, self.state())

    _CLASS.append(_InputStateCallback)
    return _InputStateCallback


def InputStateCallback(spec, directory: str | os.PathLike, *, start: dict | None = None,  # noqa: N802
                       save_freq: str | int = "epoch"):
    """A Keras callback writing ``input_state(spec, steps, start=start)`` to ``directory/input_state.json``
    at each epoch end (or every ``save_freq`` batches): put it after ``ModelCheckpoint`` with the same
    ``save_freq``, so the two files describe the same step. ``start``: the state this run resumed from."""
    return _callback_class()(spec, directory, start, save_freq)


def _count(name: str, value: Any, least: int) -> int:
    if not isinstance(value, int) or isinstance(value, bool) or value < least:
        raise ValueError(f"{name} must be an integer >= {least}, got {value!r}")
    return value


def fit_calls(spec, state: dict | None, *, epochs: int, steps_per_epoch: int) -> list[dict[str, Any]]:
    """The ``model.fit(**call, callbacks=...)`` calls that train Keras epochs ``0 .. epochs - 1`` of
    ``steps_per_epoch`` steps each, going on from ``state`` (``None``: a first run) — exactly the steps and
    batches the uninterrupted run has left, whatever step the state was saved at.

    Each call is ``{"x": dataset, "epochs", "initial_epoch", "steps_per_epoch"}``. A state saved at an epoch
    end (or none) makes one call. A state saved ``k`` steps into Keras epoch ``e`` (``save_freq`` not a multiple
    of ``steps_per_epoch``) makes two: epoch ``e``'s other ``steps_per_epoch - k`` steps as a short epoch of its
    own, then epochs ``e + 1 ..`` from the state after it; so epoch ends (and what runs there: epoch-end
    checkpoints, schedules, logs) fall on the uninterrupted run's steps. ``initial_epoch = steps //
    steps_per_epoch`` alone would train the partial epoch again on new batches. No call once all steps are
    done. Give every call the same callbacks: ``InputStateCallback`` and ``ModelCheckpoint`` count steps
    across calls. Use ``epochs=None`` in the spec, so the data outlasts any number of Keras epochs."""
    from .build import build_dataset

    _count("epochs", epochs, 0)
    _count("steps_per_epoch", steps_per_epoch, 1)
    done = 0
    if state is not None:
        resume_position(spec, state)        # refuses a state of another set, seed, ... before any call
        done = state["steps"]
    epoch, into = divmod(done, steps_per_epoch)
    calls: list[dict[str, Any]] = []
    if epoch >= epochs:
        return calls
    if into:
        rest = steps_per_epoch - into
        calls.append({"x": build_dataset(spec, resume=state), "epochs": epoch + 1, "initial_epoch": epoch,
                      "steps_per_epoch": rest})
        state, epoch = input_state(spec, rest, start=state), epoch + 1
    if epoch < epochs:
        calls.append({"x": build_dataset(spec, resume=state), "epochs": epochs, "initial_epoch": epoch,
                      "steps_per_epoch": steps_per_epoch})
    return calls
