"""A sharding plan's per-rank file lists as a resumable spec sees them: the plan's fingerprint, the same on
every rank, which an input state names so that it holds only under that plan (pure)."""
from __future__ import annotations

import hashlib
import json
import os

from ..spec.options import ResumeError

__all__ = ["plan_fingerprint"]


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
