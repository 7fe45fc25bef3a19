"""What a fault-tolerant dispatcher's journal says it has done: the tasks it has created.

A dispatcher started with a work directory (``fault_tolerant_mode``) appends every change of its state to
``WORK_DIR/tf_data_dispatcher_journal/journal_N`` (one file per start) as TFRecord frames of TensorFlow's
``Update`` message, and syncs each one before it acts on it. A ``create_task`` update (field 3 of ``Update``, the
same since the journal's first version; checked against TensorFlow 2.21) is written when a job's iteration gives a
worker a task. Unlike a
worker's task count, which a look may miss when a short job's task comes and goes between two looks, the journal
keeps every task: ``service auto`` reads it on the dispatcher's host so that its stop rule cannot miss a job."""
from __future__ import annotations

import logging
import os
import struct

from converters.util.errors import ServiceError

from .probe import fields

__all__ = ["JournalTasks", "JOURNAL_DIR", "CREATE_TASK"]

log = logging.getLogger(__name__)

JOURNAL_DIR = "tf_data_dispatcher_journal"
CREATE_TASK = 3          # Update.create_task
_HEADER = 12             # uint64 length, uint32 masked CRC of the length
_FOOTER = 4              # uint32 masked CRC of the data
_MAX_UPDATE = 1 << 26    # bytes: no update is near this; a longer frame means the file is not a journal


class JournalTasks:
    """Counts the ``create_task`` updates in the journal under ``work_dir``. Those already there when it is made
    are its baseline; ``new()`` returns how many were appended since the last call (or since it was made). Only
    whole frames count: a frame still being written is read at a later call. Reads each file from where the last
    call stopped, so a long journal (one update per split handed out) costs one pass in all."""

    def __init__(self, work_dir: str):
        self.directory = os.path.join(work_dir, JOURNAL_DIR)
        self._offsets: dict[str, int] = {}
        self.created = 0
        self._counted = 0
        self._read()
        self._counted = self.created

    def new(self) -> int:
        """Tasks created since the last call."""
        self._read()
        added, self._counted = self.created - self._counted, self.created
        return added

    def _read(self) -> None:
        try:
            names = sorted(n for n in os.listdir(self.directory) if n.startswith("journal"))
        except FileNotFoundError:
            return   # nothing journaled yet
        except OSError as exc:
            log.debug("cannot list %s: %s", self.directory, exc.strerror)
            return
        for name in names:
            path = os.path.join(self.directory, name)
            offset = self._offsets.get(path, 0)
            if offset < 0:
                continue   # not read as a journal: given up
            try:
                with open(path, "rb") as f:
                    f.seek(offset)
                    buf = f.read()
            except OSError as exc:
                log.debug("cannot read %s: %s", path, exc.strerror)
                continue
            used, tasks = _count_tasks(buf, path, offset)
            self._offsets[path] = offset + used if used >= 0 else -1
            self.created += tasks


def _count_tasks(buf: bytes, path: str, offset: int) -> tuple[int, int]:
    """(bytes of whole frames at the start of ``buf``, or -1 when a frame cannot be a journal's; ``create_task``
    updates among them)."""
    i = tasks = 0
    while len(buf) - i >= _HEADER:
        (n,) = struct.unpack_from("<Q", buf, i)
        if n > _MAX_UPDATE:
            log.debug("%s at byte %d: a frame of %d bytes: not read as a journal", path, offset + i, n)
            return -1, tasks
        end = i + _HEADER + n + _FOOTER
        if end > len(buf):
            break
        try:
            if any(number == CREATE_TASK and wire == 2 for number, wire, _ in fields(buf[i + _HEADER:end - _FOOTER])):
                tasks += 1
        except ServiceError as exc:   # not TensorFlow's journal as this module knows it: skip the frame
            log.debug("%s at byte %d: %s", path, offset + i, exc)
        i = end
    return i, tasks
