"""Large arrays from forked worker processes to the main process through slots of memory they share.

A scratch file in ``/dev/shm`` (``util.shmbytes``) costs fresh pages every time: the kernel allocates and zeroes
each page a worker writes, the main process maps them and they are freed when it is done (measured on the
LibSVM workers: about 0.5 CPU-s for the 640 MB of records of a 750 MB conversion). A ring of slots made once in
the main process before its workers are forked (an anonymous shared mapping) is reused task after task: a
worker copies a result's arrays into the slot its task was given, the main process reads them there (or
copies them out) when it receives the result, and the pages stay.

Whose slot is whose: a task is given slot ``n % slots`` (``n``: the task's number in submit order, one count
per ring), and ``slots`` is one more than the tasks that may be in flight at once. The main process receives
results in submit order and is done with each (read, or copied out) before it submits the next task, so when
task ``n`` is submitted task ``n - slots`` was received and used: nothing else writes or reads that slot. An
array that does not fit in what is left of its slot, a small one, or a worker with no ring (not forked from the
main process) is sent as ``util.shmbytes`` sends it.

* ``SlotRing(slots, slot_bytes)`` in the main process, before the workers are forked; ``next_slot()`` per task;
* ``slot_space(ring_id, slot)`` in a worker: the slot's bytes, where a task may build its largest result
  (``out_buffer``) so that ``ring_put`` leaves it in place instead of copying it;
* ``ring_put(ring_id, slot, arrays)`` in a worker: the arrays, those it placed as ``RingArray``;
* ``ring_take(value, copy)`` in the main process: the array ``value`` stands for (a copy, or a view of the slot
  valid until the task that reuses it is submitted), anything else as it is.
"""
from __future__ import annotations

import itertools
import mmap
from dataclasses import dataclass

import numpy as np

from .shmbytes import worth_sharing

__all__ = ["RingArray", "SlotRing", "out_buffer", "ring_put", "ring_take", "slot_space", "ALIGN"]

ALIGN = 64                  # each array starts on a cache line
_ids = itertools.count(1)
_RINGS: dict[int, "SlotRing"] = {}   # this process's rings (a forked worker has its parent's)


@dataclass(frozen=True)
class RingArray:
    """An array a worker left in ring ``ring`` at byte ``offset``: its bytes in C order, of ``dtype`` and
    ``shape``."""

    ring: int
    offset: int
    dtype: str
    shape: tuple[int, ...]

    def __post_init__(self):
        if int(self.offset) < 0 or any(int(n) < 0 for n in self.shape):
            raise ValueError(f"offset and shape must not be negative, got {self.offset!r}, {self.shape!r}")
        np.dtype(self.dtype)    # a bad dtype is a TypeError naming it

    @property
    def count(self) -> int:
        return int(np.prod(self.shape, dtype=np.int64))


class SlotRing:
    """``slots`` slots of ``slot_bytes`` bytes in an anonymous shared mapping (pages made on first use, kept
    until ``close``), seen by the processes forked after it is made."""

    def __init__(self, slots: int, slot_bytes: int):
        for name, v in (("slots", slots), ("slot_bytes", slot_bytes)):
            if not isinstance(v, int) or isinstance(v, bool) or v < 1:
                raise ValueError(f"{name} must be an int >= 1, got {v!r}")
        self.slots, self.slot_bytes = slots, slot_bytes
        self._mm = mmap.mmap(-1, slots * slot_bytes, flags=mmap.MAP_SHARED | mmap.MAP_ANONYMOUS)
        base = np.frombuffer(self._mm, np.uint8, count=1)
        self.address = int(base.ctypes.data)  # where the mapping starts in this process (and in its forks)
        del base
        self._next = itertools.count()
        self.id = next(_ids)
        _RINGS[self.id] = self

    def next_slot(self) -> int:
        """The slot of the next task submitted (in the main process, in submit order)."""
        return next(self._next) % self.slots

    def close(self) -> None:
        """Forget the ring; its memory goes now, or with the last view of it (``ring_take(copy=False)``) that
        something still holds (an exception's traceback, say)."""
        _RINGS.pop(self.id, None)
        try:
            self._mm.close()
        except BufferError:  # views still exported: the mapping is freed when they are
            pass


def _ring(ring_id: int | None, slot: int | None) -> SlotRing | None:
    """This process's ring ``ring_id`` when a slot of it is named, else None."""
    return _RINGS.get(ring_id) if ring_id is not None and slot is not None else None


def slot_space(ring_id: int | None, slot: int | None) -> np.ndarray | None:
    """The bytes of slot ``slot`` of ring ``ring_id`` (writable), or None where this process has no such ring."""
    ring = _ring(ring_id, slot)
    if ring is None:
        return None
    return np.frombuffer(ring._mm, np.uint8, count=ring.slot_bytes, offset=slot * ring.slot_bytes)


def out_buffer(space: np.ndarray | None, nbytes: int) -> np.ndarray:
    """``nbytes`` bytes to build a result in: the start of ``space`` (``slot_space``) if it holds them, else new
    memory."""
    if space is not None and space.nbytes >= nbytes:
        return space[:nbytes]
    return np.empty(nbytes, np.uint8)


def ring_put(ring_id: int | None, slot: int | None, arrays: list) -> list:
    """``arrays`` with each one worth sharing (``shmbytes.worth_sharing``) placed in slot ``slot`` of ring
    ``ring_id`` and replaced by its ``RingArray``: one built there (``out_buffer``) stays where it is, the
    others are copied after it if they fit; the rest, and all of them where this process has no such ring, as
    they are."""
    ring = _ring(ring_id, slot)
    if ring is None:
        return list(arrays)
    pos, end = slot * ring.slot_bytes, (slot + 1) * ring.slot_bytes
    inside = {}  # index -> offset of the arrays already in the slot
    for i, a in enumerate(arrays):
        if isinstance(a, np.ndarray) and a.flags.c_contiguous:
            at = int(a.ctypes.data) - ring.address
            if pos <= at and at + a.nbytes <= end:
                inside[i] = at
    pos = max([pos] + [at + arrays[i].nbytes for i, at in inside.items()])
    out = []
    for i, a in enumerate(arrays):
        if i in inside:
            out.append(RingArray(ring.id, inside[i], a.dtype.str, tuple(int(n) for n in a.shape)))
            continue
        if worth_sharing(a):
            start = -(-pos // ALIGN) * ALIGN
            if start + a.nbytes <= end:
                ring._mm[start:start + a.nbytes] = memoryview(np.ascontiguousarray(a)).cast("B")
                out.append(RingArray(ring.id, start, a.dtype.str, tuple(int(n) for n in a.shape)))
                pos = start + a.nbytes
                continue
        out.append(a)
    return out


def ring_take(value, copy: bool = True):
    """The array a ``RingArray`` stands for, copied out of its slot (which the next task may then reuse), or
    with ``copy=False`` the slot's bytes themselves (read-only; to be used before the task that reuses the slot
    is submitted); anything else as it is."""
    if not isinstance(value, RingArray):
        return value
    ring = _RINGS.get(value.ring)
    if ring is None:
        raise RuntimeError(f"no shared ring {value.ring} in this process: its worker's result cannot be read")
    view = np.frombuffer(ring._mm, np.dtype(value.dtype), count=value.count,
                         offset=value.offset).reshape(value.shape)
    if copy:
        return view.copy()
    view.flags.writeable = False
    return view
