"""Keep TensorFlow's one INFO line about tfpipe's own read buffer off a library user's terminal.

A ``TFRecordDataset`` whose ``buffer_size`` is larger than TensorFlow's default (256 KiB) makes TensorFlow's
C++ side log, once per process, "The default buffer size is 262144, which is overridden by the user
specified `buffer_size` of ...". tfpipe always sets that buffer (``ReadConfig.buffer_size``, 8 MiB by
default), so the line says nothing to its users; the CLI hides it with ``TF_CPP_MIN_LOG_LEVEL=2``, but a
Python caller usually runs with INFO on. ``absorb_buffer_notice`` spends that one-time line: the first time a
large buffer is asked for, it reads an empty file through such a dataset with file descriptor 2 captured,
and writes back whatever else was captured. Nothing else is hidden, and later datasets log as they would.
"""
from __future__ import annotations

import os
import tempfile
import threading

__all__ = ["absorb_buffer_notice", "TF_DEFAULT_BUFFER"]

TF_DEFAULT_BUFFER = 256 << 10   # TFRecordDataset's default read buffer
_NOTICE = ("tf_record_dataset_op.cc", "which is overridden by the user specified `buffer_size`")
_lock = threading.Lock()
_done = [False]


def absorb_buffer_notice(buffer_size: int) -> None:
    """Before the first ``TFRecordDataset`` with ``buffer_size`` > 256 KiB is read: let TensorFlow log its
    one-time buffer notice into a capture and drop it (a no-op when INFO logs are off, outside eager mode,
    or once done)."""
    if _done[0] or buffer_size <= TF_DEFAULT_BUFFER or _info_off():
        return
    with _lock:
        if _done[0]:
            return
        import tensorflow as tf

        if not tf.executing_eagerly():
            return
        _done[0] = True
        with tempfile.TemporaryDirectory(prefix="tfpipe-") as d:
            empty = os.path.join(d, "empty.tfrecord")
            open(empty, "wb").close()
            captured = _read_with_fd2_captured(lambda: [None for _ in tf.data.TFRecordDataset([empty], "",
                                                                                                buffer_size)])
    kept = [ln for ln in captured.splitlines(keepends=True) if not all(s in ln for s in _NOTICE)]
    if kept:
        os.write(2, "".join(kept).encode("utf-8", "replace"))


def _info_off() -> bool:
    try:
        return int(os.environ.get("TF_CPP_MIN_LOG_LEVEL", "0")) >= 1
    except ValueError:
        return False


def _read_with_fd2_captured(fn) -> str:
    """Run ``fn()`` with file descriptor 2 pointing at a temporary file; what was written there."""
    import sys

    sys.stderr.flush()
    saved = os.dup(2)
    with tempfile.TemporaryFile() as tmp:
        try:
            os.dup2(tmp.fileno(), 2)
            fn()
        finally:
            os.dup2(saved, 2)
            os.close(saved)
        tmp.seek(0)
        return tmp.read().decode("utf-8", "replace")
