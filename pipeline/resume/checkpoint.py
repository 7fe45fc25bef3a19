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

from .state import MAX_STATE_BYTES, input_state

__all__ = ["STATE_FILE", "save_input_state", "restore_input_state", "InputStateCallback"]

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


