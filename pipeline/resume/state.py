"""Input state of a resumable File-mode pipeline: a few integers that say where the input stands.

:func:`pipeline.plan.graphplan.resume_choice` decides whether a spec builds the resumable order (it and the
order's step arithmetic are re-exported here); :func:`check_resumable` refuses a spec that does not.

In the resumable order the records of epoch ``e`` come in one *global* order that is a pure function of
(manifest, seed, epoch) (``pipeline.graph.resumable`` builds it); every step takes ``batch_size × num_shards``
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

from converters.util.checks import as_int
from sharding.epochs import epoch_batches

from ..plan.graphplan import epoch_records, global_batch, order_epoch_steps, resume_choice, resume_refusal, steps_for
from ..plan.rankplan import plan_fingerprint
from ..spec.options import ResumeError
from .windoworder import within_files

__all__ = ["ResumeError", "STATE_FORMAT", "MAX_STATE_BYTES", "MAX_COUNT", "RESUME_LIMITS", "check_resumable",
           "resume_refusal", "resume_choice",
           "fingerprint", "plan_fingerprint", "global_batch", "epoch_records", "steps_for", "order_epoch_steps", "input_state",
           "resume_position", "advance"]

STATE_FORMAT = "tfpipe.input_state/1"
MAX_STATE_BYTES = 1024
MAX_COUNT = 1 << 62          # epochs, positions, steps and ranks a state may hold: below int64's end, as tf.data counts
_SCALARS = (str, int, float, bool, type(None))   # every value of a state is one of these
_KEYS = ("format", "fingerprint", "seed", "shuffle_buffer", "batch_size", "drop_remainder", "records", "epoch",
         "position", "world_size", "steps", "plan", "order")
WINDOW_ORDER = "window"   # a state's "order": a shuffled columnar set's rows come in the window order
FILE_WINDOW_ORDER = "window-within-files"   # ... in windows within files (windoworder.within_files)

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
    "a read on a tf.data service's workers (service=...): restart a service run at an epoch boundary",
)


def check_resumable(spec) -> None:
    """Raise :class:`ResumeError` (one line) unless ``spec`` builds the resumable order."""
    builds, why = resume_choice(spec)
    if not builds:
        raise ResumeError(f"an input state needs a spec that builds the resumable order, and this one does not: "
                          f"{why}; build the uninterrupted run with it too")


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


def _order(spec) -> str | None:
    """The row order a state's position counts in, where it is not the records' resumable order: a shuffled
    columnar set reads the window order (``pipeline.resume.windoworder``), its windows across files or within
    them (two orders: a position in one is not a position in the other)."""
    if spec.layout is None or spec.shuffle_buffer <= 0:
        return None
    return FILE_WINDOW_ORDER if within_files(spec) else WINDOW_ORDER


def advance(spec, steps: int, start: tuple[int, int] = (0, 0)) -> tuple[int, int]:
    """(epoch, position) after ``steps`` more steps of ``spec`` from ``start`` (pure)."""
    steps = as_int(steps, "steps", minimum=0, maximum=MAX_COUNT - 1, must="an integer from 0 to 2^62 - 1")
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
             "drop_remainder": bool(spec.drop_remainder), "records": _records(spec), "epoch": epoch,
             "position": pos, "world_size": spec.num_shards, "steps": done}
    if spec.resuming.plan_fingerprint:
        state["plan"] = spec.resuming.plan_fingerprint
    if _order(spec):
        state["order"] = _order(spec)
    return state


def _int(state: dict, key: str, least: int = 0) -> int:
    v = state.get(key)
    if not isinstance(v, int) or isinstance(v, bool) or not least <= v < MAX_COUNT:
        raise ResumeError(f"input state: {key} must be an integer from {least} to 2^62 - 1, got {v!r}")
    return v


def _check_counts(spec, epoch: int, pos: int, steps: int) -> None:
    """Refuse (one line: field, value, what was expected) a state whose epoch, position and steps no run of
    ``spec`` can reach: a position between batches would shift every batch after it."""
    b = spec.batch_size
    if spec.epochs is not None and (epoch > spec.epochs or (epoch == spec.epochs and pos)):
        raise ResumeError(f"input state: epoch {epoch} (position {pos}) is past this spec's end (epochs="
                          f"{spec.epochs}: at most epoch {spec.epochs} at position 0)")
    if pos % b:
        raise ResumeError(f"input state: position {pos} is not a multiple of batch_size {b} (every step takes "
                          f"whole batches: expected {pos - pos % b} or {pos - pos % b + b})")
    if pos > epoch_records(spec):
        raise ResumeError(f"input state position {pos} is past the epoch's {epoch_records(spec)} records")
    least = epoch + (1 if pos else 0)           # every epoch takes a step or more, and so does a position in one
    most = epoch * epoch_batches(sum(spec.file_records), b, False) + pos // b     # a step takes a batch or more of the order
    if not least <= steps <= most:
        raise ResumeError(f"input state: steps {steps} cannot reach epoch {epoch} at position {pos} with "
                          f"batch_size {b} (expected {least} to {most} steps)")


def resume_position(spec, state: Any) -> tuple[int, int]:
    """(epoch, position) of ``state`` after checking it belongs to ``spec`` and is one a run of it can reach;
    a mismatch is one line naming the field, its value and what was expected."""
    check_resumable(spec)
    if not isinstance(state, dict) or state.get("format") != STATE_FORMAT:
        got = state.get("format") if isinstance(state, dict) else type(state).__name__
        raise ResumeError(f"not a tfpipe input state (format {got!r}, expected {STATE_FORMAT!r})")
    unknown = sorted(repr(k)[:40] for k in state if k not in _KEYS)
    if unknown:
        raise ResumeError(f"input state has unknown keys [{', '.join(unknown[:5])}{', ...' if len(unknown) > 5 else ''}]")
    nested = [k for k, v in state.items() if not isinstance(v, _SCALARS)]
    if nested:  # checked before anything walks it: a deeply nested value never reaches a recursive encoder
        raise ResumeError(f"input state: {nested[0]} holds a {type(state[nested[0]]).__name__}, not a number or a "
                          "string: not one tfpipe wrote")
    try:
        size = len(json.dumps(state))
    except (ValueError, TypeError, OverflowError) as exc:   # an integer of more digits than Python converts
        raise ResumeError(f"input state cannot be written as JSON ({str(exc).split(';')[0]}): not one tfpipe "
                          "wrote") from None
    if size > MAX_STATE_BYTES:
        raise ResumeError(f"input state is {size} bytes of JSON, more than {MAX_STATE_BYTES}: not one tfpipe wrote")
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
    epoch, pos, steps = _int(state, "epoch"), _int(state, "position"), _int(state, "steps")
    if state.get("order") != _order(spec) and (pos or state.get("order") is not None):   # epochs begin alike
        saved, reads = (state.get("order") or "the records'", _order(spec) or "the records'")
        raise ResumeError(f"input state counts its position in {saved} order and this spec reads {reads} order "
                          f"(a shuffled columnar set reads the window order, its windows within files where the "
                          f"files are large enough): resume it at an epoch boundary "
                          f"(first_epoch={epoch + 1}), or with the tfpipe that saved it")
    world = _int(state, "world_size", least=1)
    if spec.part_weights and world != spec.num_shards:
        raise ResumeError(f"input state is from {world} rank(s) and this spec has {spec.num_shards}: a balanced "
                          f"group's epoch is whole global batches, so its positions hold for one world size only")
    _check_counts(spec, epoch, pos, steps)
    return epoch, pos
