"""Input state of a resumable File-mode pipeline: a few integers that say where the input stands.

With ``resumable=True`` the records of epoch ``e`` come in one *global* order that is a pure function of
(manifest, seed, epoch) (``pipeline.resume.resumable`` builds it); every step takes ``batch_size × num_shards``
records of it, rank ``i`` the ``i``-th ``batch_size`` of them. So the position after ``steps`` steps is
(epoch, records of that epoch's order consumed), whatever the number of ranks, and
:func:`input_state` turns it into a small JSON-able dict; :func:`resume_position` checks a state against a
spec (another shard set, seed, shuffle buffer or batch size is refused with one line saying which) and gives
the position back. Seeds are explicit; per-epoch seeds derive from (seed, epoch). Pure: no TensorFlow here.
"""
from __future__ import annotations

import hashlib
import json
import os
from typing import Any

from converters.util.errors import TfpipeError

__all__ = ["ResumeError", "STATE_FORMAT", "MAX_STATE_BYTES", "check_resumable", "fingerprint", "global_batch",
           "epoch_records", "steps_for", "order_epoch_steps", "input_state", "resume_position", "advance"]

STATE_FORMAT = "tfpipe.input_state/1"
MAX_STATE_BYTES = 1024
_KEYS = ("format", "fingerprint", "seed", "shuffle_buffer", "batch_size", "drop_remainder", "records", "epoch",
         "position", "world_size", "steps")


class ResumeError(TfpipeError, ValueError):
    """A spec that cannot be resumed, or an input state that does not belong to this spec."""


def check_resumable(spec) -> None:
    """Raise :class:`ResumeError` (one line) unless ``spec`` builds the resumable order."""
    if not spec.resumable:
        raise ResumeError("input state needs a spec with resumable=True (the order a state points into); "
                          "build the uninterrupted run with it too")
    if spec.mode != "file":
        raise ResumeError("Pipe mode cannot resume mid-epoch: SageMaker restarts each channel's FIFO from its "
                          "first record; restart at an epoch boundary with first_epoch=E, or use File mode")
    if spec.part_weights:
        raise ResumeError("resumable=True does not apply to label_weights (the sampled stream has no positions)")
    if spec.shuffle_buffer and spec.seed is None:
        raise ResumeError("resumable=True with shuffle_buffer > 0 needs a seed: the order must be a pure "
                          "function of (seed, epoch, position)")
    if len(spec.file_records) != len(spec.files):
        raise ResumeError(f"resumable=True needs the record count of every file (file_records): got "
                          f"{len(spec.file_records)} counts for {len(spec.files)} files; use "
                          f"PipelineSpec.from_manifest")
    if spec.steps is None and spec.num_shards > 1 and epoch_records(spec) < global_batch(spec):
        raise ResumeError(f"an epoch of {epoch_records(spec)} records is less than one global batch "
                          f"({spec.batch_size} x {spec.num_shards} ranks)")


def fingerprint(spec) -> str:
    """The data fingerprint a state is checked against: the manifest's sha256, else a hash of the file names
    and their record counts."""
    if spec.manifest_sha256:
        return str(spec.manifest_sha256)
    doc = [[os.path.basename(f), n] for f, n in zip(spec.files, spec.file_records)]
    return "files:" + hashlib.sha256(json.dumps(doc).encode()).hexdigest()[:32]


def global_batch(spec) -> int:
    """Records one step takes from the global order: ``batch_size`` per rank × ranks."""
    return spec.batch_size * spec.num_shards


def epoch_records(spec) -> int:
    """Records of an epoch's global order that steps use at most (all, or ``steps`` global batches)."""
    total = sum(spec.file_records)
    return total if spec.steps is None else min(total, spec.steps * global_batch(spec))


def steps_for(spec, remaining: int) -> int:
    """Steps (per rank) that ``remaining`` records of an epoch's order make: full global batches when sharded
    (every rank runs the same steps; the remainder is dropped) or with ``drop_remainder``, else
    ``ceil(remaining / batch_size)`` on a single rank."""
    if remaining <= 0:
        return 0
    if spec.num_shards > 1 or spec.drop_remainder:
        return remaining // global_batch(spec)
    return -(-remaining // spec.batch_size)


def order_epoch_steps(spec) -> int:
    """Steps in a whole epoch."""
    return steps_for(spec, epoch_records(spec))


def advance(spec, steps: int, start: tuple[int, int] = (0, 0)) -> tuple[int, int]:
    """(epoch, position) after ``steps`` more steps of ``spec`` from ``start`` (pure)."""
    if not isinstance(steps, int) or isinstance(steps, bool) or steps < 0:
        raise ValueError(f"steps must be an integer >= 0, got {steps!r}")
    epoch, pos = start
    first = steps_for(spec, epoch_records(spec) - pos)
    if steps < first:
        return epoch, pos + steps * global_batch(spec)
    steps -= first
    per_epoch = order_epoch_steps(spec)
    if per_epoch == 0:
        raise ResumeError(f"an epoch of {epoch_records(spec)} records makes no step of {global_batch(spec)}")
    return epoch + 1 + steps // per_epoch, (steps % per_epoch) * global_batch(spec)


def input_state(spec, steps: int, start: dict | None = None) -> dict[str, Any]:
    """The input position after ``steps`` global steps (every rank ran ``steps`` batches) as a small
    JSON-able dict; ``start``: the state this run was resumed from (steps are then counted from it)."""
    check_resumable(spec)
    begin = resume_position(spec, start) if start is not None else (0, 0)
    epoch, pos = advance(spec, steps, begin)
    done = (start or {}).get("steps", 0) + steps
    state = {"format": STATE_FORMAT, "fingerprint": fingerprint(spec), "seed": spec.seed,
             "shuffle_buffer": spec.shuffle_buffer, "batch_size": spec.batch_size,
             "drop_remainder": bool(spec.drop_remainder), "records": sum(spec.file_records), "epoch": epoch,
             "position": pos, "world_size": spec.num_shards, "steps": done}
    return state


def _int(state: dict, key: str) -> int:
    v = state.get(key)
    if not isinstance(v, int) or isinstance(v, bool) or v < 0:
        raise ResumeError(f"input state: {key} must be an integer >= 0, got {v!r}")
    return v


def resume_position(spec, state: Any) -> tuple[int, int]:
    """(epoch, position) of ``state`` after checking it belongs to ``spec``; a mismatch is one line naming it."""
    check_resumable(spec)
    if not isinstance(state, dict) or state.get("format") != STATE_FORMAT:
        got = state.get("format") if isinstance(state, dict) else type(state).__name__
        raise ResumeError(f"not a tfpipe input state (format {got!r}, expected {STATE_FORMAT!r})")
    size = len(json.dumps(state))
    if size > MAX_STATE_BYTES:
        raise ResumeError(f"input state is {size} bytes of JSON, more than {MAX_STATE_BYTES}: not one tfpipe wrote")
    unknown = sorted(set(state) - set(_KEYS))
    if unknown:
        raise ResumeError(f"input state has unknown keys {unknown}")
    if state.get("fingerprint") != fingerprint(spec):
        raise ResumeError(f"input state is from another shard set (fingerprint {str(state.get('fingerprint'))[:16]}"
                          f"... vs this set's {fingerprint(spec)[:16]}...)")
    for key, mine in (("seed", spec.seed), ("shuffle_buffer", spec.shuffle_buffer),
                      ("batch_size", spec.batch_size), ("drop_remainder", bool(spec.drop_remainder)),
                      ("records", sum(spec.file_records))):
        if state.get(key) != mine:
            raise ResumeError(f"input state is from another {key.replace('_', ' ')}: {state.get(key)!r}, this "
                              f"spec has {mine!r}")
    epoch, pos = _int(state, "epoch"), _int(state, "position")
    _int(state, "world_size"), _int(state, "steps")
    if pos > epoch_records(spec):
        raise ResumeError(f"input state position {pos} is past the epoch's {epoch_records(spec)} records")
    return epoch, pos
