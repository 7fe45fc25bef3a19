"""Input state of a resumable File-mode pipeline: a few integers that say where the input stands.

:func:`resume_choice` decides which graph a spec builds (the build, ``describe`` and ``tfpipe pipeline explain``
share it): ``resumable=None`` (the default) builds the resumable order for a seeded, shuffled File-mode spec on
one rank that :func:`resume_refusal` does not refuse, ``True`` demands it, ``False`` opts out.

In the resumable order the records of epoch ``e`` come in one *global* order that is a pure function of
(manifest, seed, epoch) (``pipeline.resume.resumable`` builds it); every step takes ``batch_size × num_shards``
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

from ..plan.rankplan import plan_fingerprint
from ..spec.options import ResumeError

__all__ = ["ResumeError", "STATE_FORMAT", "MAX_STATE_BYTES", "MAX_COUNT", "RESUME_LIMITS", "check_resumable",
           "resume_refusal", "resume_choice",
           "fingerprint", "plan_fingerprint", "global_batch", "epoch_records", "steps_for", "order_epoch_steps", "input_state",
           "resume_position", "advance", "locate"]

STATE_FORMAT = "tfpipe.input_state/1"
MAX_STATE_BYTES = 1024
MAX_COUNT = 1 << 62          # epochs, positions, steps and ranks a state may hold: below int64's end, as tf.data counts
_SCALARS = (str, int, float, bool, type(None))   # every value of a state is one of these
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
    "a read on a tf.data service's workers (service=...): restart a service run at an epoch boundary",
)


def resume_refusal(spec) -> str | None:
    """Why ``spec`` cannot build the resumable order (one line), or None when it can; ``spec.resumable`` aside."""
    if spec.offload.service is not None:
        return ("it reads on a tf.data service's workers (service=...), which hand files to whichever worker asks "
                "next: no position names the records consumed")
    if spec.mode != "file":
        return ("Pipe mode cannot resume mid-epoch: SageMaker restarts each channel's FIFO from its first record; "
                "restart at an epoch boundary with first_epoch=E, or use File mode")
    if spec.cache not in ("auto", "none"):
        return (f"cache={spec.cache!r} would freeze one order, and the resumable order reads each epoch's files in "
                f"its own seeded order; use cache='auto' or 'none' (the OS page cache keeps recently read shards)")
    if spec.shuffle_buffer and spec.seed is None:
        return ("shuffle_buffer > 0 needs a seed to resume: the order must be a pure function of (seed, epoch, "
                "position)")
    if spec.resuming.resume_refusal:
        return spec.resuming.resume_refusal
    if len(spec.file_records) != len(spec.files):
        return (f"it needs the record count of every file (file_records): got {len(spec.file_records)} counts for "
                f"{len(spec.files)} files; use PipelineSpec.from_manifest")
    if spec.file_sha256 and len(spec.file_sha256) != len(spec.files):
        return (f"file_sha256 gives {len(spec.file_sha256)} digests for {len(spec.files)} files: one per file, or "
                f"none; use PipelineSpec.from_manifest")
    if spec.steps is None and spec.num_shards > 1 and epoch_records(spec) < global_batch(spec):
        return (f"an epoch of {epoch_records(spec)} records is less than one global batch ({spec.batch_size} x "
                f"{spec.num_shards} ranks)")
    if spec.resuming.plan_fingerprint and spec.steps is not None and order_epoch_steps(spec) < spec.steps:
        return (f"this rank's {sum(spec.file_records)} records make {order_epoch_steps(spec)} steps per epoch, "
                f"fewer than the plan's {spec.steps}: a plan with remainder='pad' repeats a rank's records to fill "
                f"its steps, which the resumable order does not; plan with remainder='drop'")
    return None


def resume_choice(spec) -> tuple[bool, str]:
    """(whether ``build_dataset(spec)`` builds the resumable order, why) — the one decision the build, ``describe``
    and ``tfpipe pipeline explain`` share (pure). ``resumable=None``: when possible, i.e. a seeded, shuffled
    File-mode spec that :func:`resume_refusal` does not refuse; ``True``: always, a spec that cannot is a
    :class:`ResumeError` (one line); ``False``: never."""
    asked = spec.resumable
    if asked is False:
        return False, "resumable=False (asked for)"
    why = resume_refusal(spec)
    if asked is True:
        if why is not None:
            raise ResumeError(f"resumable=True: {why}")
        return True, "resumable=True (asked for)"
    if why is not None:
        return False, why
    if not spec.shuffle_buffer:
        return False, ("no shuffle (shuffle_buffer=0): the unshuffled read keeps its tuned strategy (resumable=True "
                       "reads the files in manifest order, resumable)")
    if spec.num_shards > 1:
        return False, (f"{spec.num_shards} ranks share one order here (num_shards): each rank would run the delay "
                       f"order over every record, which costs more than its shuffle of its own share (0.86x the "
                       f"default graph's records per CPU-second for rank 0 of 2: tfpipe bench resume --ranks 2); "
                       f"resumable=True to resume anyway, or per-rank file lists (a plan) resume at no such cost")
    rows = " (a columnar set: the order runs over its decoded rows)" if spec.layout is not None else ""
    return True, f"seeded File-mode set{rows} (resumable=None: when possible; resumable=False opts out)"


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


def global_batch(spec) -> int:
    """Records one step takes from the global order: ``batch_size`` per rank × ranks."""
    return spec.batch_size * spec.num_shards


def epoch_records(spec) -> int:
    """Records of an epoch's global order that steps use at most (all, or ``steps`` global batches)."""
    if spec.part_weights:   # a balanced group's endless sampled stream: as many records as the group per rank,
        group = spec.records if spec.records is not None else sum(spec.file_records)   # (as without resumable)
        per_rank = group // spec.num_shards                                            # in whole batches
        steps = spec.steps if spec.steps is not None else (
            per_rank // spec.batch_size if spec.drop_remainder else -(-per_rank // spec.batch_size))
        return steps * global_batch(spec)
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
    most = epoch * -(-sum(spec.file_records) // b) + pos // b     # a step takes a batch or more of the order
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
    world = _int(state, "world_size", least=1)
    if spec.part_weights and world != spec.num_shards:
        raise ResumeError(f"input state is from {world} rank(s) and this spec has {spec.num_shards}: a balanced "
                          f"group's epoch is whole global batches, so its positions hold for one world size only")
    _check_counts(spec, epoch, pos, steps)
    return epoch, pos


def locate(counts: list[int], start: int) -> tuple[int, int]:
    """(file, record in it) of record ``start`` of the concatenation of files of ``counts`` records (the last
    file when ``start`` is at or past the end)."""
    j, k = 0, start
    while j < len(counts) - 1 and k >= counts[j]:
        k -= counts[j]
        j += 1
    return j, k
