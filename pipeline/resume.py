"""Input state of a resumable File-mode pipeline: a few integers that say where the input stands.

With ``resumable=True`` the records of epoch ``e`` come in one *global* order that is a pure function of
(manifest, seed, epoch) (``pipeline.resumable`` builds it); every step takes ``batch_size × num_shards``
records of it, rank ``i`` the ``i``-th ``batch_size`` of them. So the position after ``steps`` steps is
(epoch, records of that epoch's order consumed), whatever the number of ranks, and
:func:`input_state` turns it into a small JSON-able dict; :func:`resume_position` checks a state against a
spec (another shard set, seed, shuffle buffer or batch size is refused with one line saying which) and gives
the position back. Seeds are explicit; per-epoch seeds derive from (seed, epoch). Pure: no TensorFlow here.

A sharding plan's per-rank file lists (``from_manifest(plan=p, rank=r)``) resume too: each rank's order is the
order of its own files, and the plan's equal steps make (epoch, position) the same on every rank, so rank 0's
state serves all; the state names the plan (:func:`plan_fingerprint`) and holds only under it.
:data:`RESUME_LIMITS` lists what cannot resume (``tfpipe pipeline explain --resumable`` prints it).
"""
from __future__ import annotations

import hashlib
import json
import os
from typing import Any

from converters.util.errors import TfpipeError

__all__ = ["ResumeError", "STATE_FORMAT", "MAX_STATE_BYTES", "RESUME_LIMITS", "check_resumable", "fingerprint",
           "plan_fingerprint", "global_batch", "epoch_records", "steps_for", "epoch_steps", "input_state",
           "resume_position", "advance"]

STATE_FORMAT = "tfpipe.input_state/1"
MAX_STATE_BYTES = 1024
_KEYS = ("format", "fingerprint", "seed", "shuffle_buffer", "batch_size", "drop_remainder", "records", "epoch",
         "position", "world_size", "steps", "plan")

# What cannot resume mid-epoch, each with its way out: `tfpipe pipeline explain --resumable` prints these, and
# docs/pipeline.md's Known limits lists them (a test keeps the three in step with the refusals).
RESUME_LIMITS = (
    "Pipe mode: resumes only at an epoch boundary (first_epoch=E); SageMaker restarts a channel's FIFO from its "
    "first record",
    "shuffle_buffer > 0 without a seed: the order must be a pure function of (seed, epoch, position)",
    "a spec without per-file record counts (file_records): build it with PipelineSpec.from_manifest",
    "several ranks and an epoch smaller than one global batch (batch_size x ranks)",
    "cache='memory' or 'file:...': each epoch reads its files in its own seeded order (use cache='auto' or "
    "'none'; the OS page cache keeps recently read shards)",
    "a plan's per-rank file lists given as one rank's entry: pass the whole plan (plan=p, rank=r)",
    "a plan whose ranks run different (or no) steps per epoch, or whose steps need more records than a rank's "
    "files hold (remainder='pad'): plan with remainder='drop'",
    "a state saved under another plan's per-rank file lists (another number of ranks): resume with the same "
    "plan, or use num_shards/shard_index (one global order) to change the number of ranks",
)


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
    if spec.resuming.plan_fingerprint and spec.steps is not None and epoch_steps(spec) < spec.steps:
        raise ResumeError(f"this rank's {sum(spec.file_records)} records make {epoch_steps(spec)} steps per epoch, "
                          f"fewer than the plan's {spec.steps}: a plan with remainder='pad' repeats a rank's records "
                          f"to fill its steps, which the resumable order does not; plan with remainder='drop'")


def plan_fingerprint(plan) -> str:
    """The fingerprint of a sharding plan whose ranks read their own file lists — every rank's (files, shard,
    steps), hashed: the same on every rank. Raises :class:`ResumeError` (one line) when the plan cannot say what a
    position is: one rank's entry (the other ranks' files unknown) or ranks with different or no steps."""
    ranks = getattr(plan, "ranks", None)
    if ranks is None:
        raise ResumeError("resumable=True with a plan's per-rank file lists needs the whole plan (plan=p, rank=r), "
                          "not one rank's entry: rank 0's state is checked against every rank's files")
    doc, steps = [], set()
    for r in ranks:
        files, shard = getattr(r, "files", None), getattr(r, "shard", None)
        steps.add(getattr(r, "steps", None))
        doc.append([None if files is None else [os.path.basename(str(f)) for f in files],
                    None if shard is None else [int(x) for x in shard], getattr(r, "steps", None)])
    if len(steps) != 1 or None in steps:
        raise ResumeError(f"resumable=True with a plan's per-rank file lists needs the same steps per epoch on every "
                          f"rank (a position is a step of every rank's epoch), got {sorted(map(str, steps))}")
    return "plan:" + hashlib.sha256(json.dumps(doc).encode()).hexdigest()[:32]


def _records(spec) -> int:
    """The record count a state holds: the set's (files) or, under a plan, the records every rank's epoch uses."""
    return epoch_records(spec) if spec.resuming.plan_fingerprint else sum(spec.file_records)


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


def epoch_steps(spec) -> int:
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
    per_epoch = epoch_steps(spec)
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
             "drop_remainder": bool(spec.drop_remainder), "records": _records(spec), "epoch": epoch,
             "position": pos, "world_size": spec.num_shards, "steps": done}
    if spec.resuming.plan_fingerprint:
        state["plan"] = spec.resuming.plan_fingerprint
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
    mine = spec.resuming.plan_fingerprint
    if state.get("plan") != mine:
        raise ResumeError(f"input state is from another sharding plan ({state.get('plan') or 'no plan'} vs this "
                          f"spec's {mine or 'no plan'}): per-rank file lists resume only under the plan they were "
                          f"saved with; to change the number of ranks use num_shards/shard_index (one global order)")
    for key, mine in (("seed", spec.seed), ("shuffle_buffer", spec.shuffle_buffer),
                      ("batch_size", spec.batch_size), ("drop_remainder", bool(spec.drop_remainder)),
                      ("records", _records(spec))):
        if state.get(key) != mine:
            raise ResumeError(f"input state is from another {key.replace('_', ' ')}: {state.get(key)!r}, this "
                              f"spec has {mine!r}")
    epoch, pos = _int(state, "epoch"), _int(state, "position")
    _int(state, "world_size"), _int(state, "steps")
    if pos > epoch_records(spec):
        raise ResumeError(f"input state position {pos} is past the epoch's {epoch_records(spec)} records")
    return epoch, pos
