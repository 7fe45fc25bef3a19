"""Pipe mode: read SageMaker's per-epoch FIFOs ``{pipe_dir}/{channel}_{epoch}`` sequentially, once.

TensorFlow's file readers use positioned reads (``pread``), so ``tf.data.TFRecordDataset`` pointed at a FIFO
fails with "Illegal seek". This reader consumes the stream itself: large sequential reads, TFRecord framing
and both CRC32Cs checked in bulk by the compiled scan kernel of ``converters.tfrecord``, and each chunk handed
to tf.data as one string plus record offsets and lengths; ``tf.strings.substr`` cuts the records out
vectorized, so no Python work happens per record.

Guards: a FIFO that does not appear, or that no writer opens, within ``timeout`` seconds raises
``TfpipeError`` (no hang); an exclusive ``flock`` on a lock file keyed by the channel's path refuses a second
reader of the same channel on this host (two readers of one FIFO would split one byte stream).
"""
from __future__ import annotations

import errno
import fcntl
import hashlib
import logging
import os
import select
import shutil
import signal
import stat
import subprocess
import tempfile
import threading
import time
import zlib
from contextlib import contextmanager
from typing import Iterator

import numpy as np

from converters.util.errors import IntegrityError, TfpipeError

__all__ = ["simulate_channel", "fifo_path", "channel_lock", "wait_for_fifo", "iter_chunks", "pipe_records_dataset",
           "sagemaker_pipe_dataset", "DEFAULT_CHUNK_BYTES"]

log = logging.getLogger(__name__)

DEFAULT_CHUNK_BYTES = 4 << 20   # 4 MiB per scan / per element handed to tf.data
_PIPE_SIZE = 1 << 20            # ask the kernel for 1 MiB pipe buffers (fewer syscalls); best effort
_F_SETPIPE_SZ = getattr(fcntl, "F_SETPIPE_SZ", 1031)
_POLL_STEP = 0.05


def fifo_path(pipe_dir: str, channel: str, epoch: int) -> str:
    """SageMaker's FIFO for ``channel`` in ``epoch``: ``{pipe_dir}/{channel}_{epoch}``."""
    return os.path.join(pipe_dir, f"{channel}_{int(epoch)}")


def _lock_path(pipe_dir: str, channel: str) -> str:
    key = hashlib.sha256(os.path.join(os.path.realpath(pipe_dir), channel).encode()).hexdigest()[:16]
    return os.path.join(tempfile.gettempdir(), f"tfpipe-pipe-{channel}-{key}.lock")


@contextmanager
def channel_lock(pipe_dir: str, channel: str) -> Iterator[str]:
    """Hold an exclusive lock on ``channel`` for this host; raise TfpipeError if another reader holds it."""
    path = _lock_path(pipe_dir, channel)
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o666)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError as exc:
            if exc.errno in (errno.EWOULDBLOCK, errno.EAGAIN, errno.EACCES):
                raise TfpipeError(
                    f"Pipe mode: channel {channel!r} in {pipe_dir} is already being read by another reader on "
                    f"this host (lock {path}); two readers of one FIFO split one byte stream and hang — give "
                    f"every worker on a host its own channel") from None
            raise
        yield path
    finally:
        os.close(fd)  # closing releases the flock


def wait_for_fifo(path: str, timeout: float) -> int:
    """Wait until ``path`` exists and a writer has opened it; return a blocking read descriptor.

    Raises TfpipeError after ``timeout`` seconds instead of hanging. A regular file is accepted too
    (handy for local runs).
    """
    deadline = time.monotonic() + timeout
    while not os.path.exists(path):
        if time.monotonic() >= deadline:
            raise TfpipeError(f"Pipe mode: FIFO {path} did not appear within {timeout:g} s (is the channel "
                              f"configured with TrainingInputMode=Pipe, and is the channel name right?)")
        time.sleep(_POLL_STEP)
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
    try:
        if stat.S_ISFIFO(os.fstat(fd).st_mode):
            try:
                fcntl.fcntl(fd, _F_SETPIPE_SZ, _PIPE_SIZE)
            except OSError:
                pass
            poller = select.poll()
            poller.register(fd, select.POLLIN | select.POLLHUP)
            remaining = max(0.0, deadline - time.monotonic())
            # Linux reports neither POLLIN nor POLLHUP on a FIFO no writer has opened yet
            if not poller.poll(int(remaining * 1000)):
                raise TfpipeError(f"Pipe mode: no writer opened FIFO {path} within {timeout:g} s")
        flags = fcntl.fcntl(fd, fcntl.F_GETFL)
        fcntl.fcntl(fd, fcntl.F_SETFL, flags & ~os.O_NONBLOCK)
        return fd
    except BaseException:
        os.close(fd)
        raise


def _raw_chunks(fd: int, chunk_bytes: int, compression: str | None, name: str) -> Iterator[bytes]:
    """Sequential reads of about ``chunk_bytes`` (decompressed when GZIP; multi-member streams too)."""
    f = open(fd, "rb", buffering=0, closefd=False)
    dec = zlib.decompressobj(wbits=31) if compression == "gzip" else None
    fed = False
    while True:
        buf = bytearray(chunk_bytes)
        mv = memoryview(buf)
        pos = 0
        while pos < chunk_bytes:
            n = f.readinto(mv[pos:])
            if not n:
                break
            pos += n
        del mv
        if pos < chunk_bytes:
            del buf[pos:]
        if dec is None:
            if not pos:
                return
            yield bytes(buf)
            continue
        if not pos:
            if fed and not dec.eof:
                raise IntegrityError(f"{name}: truncated GZIP stream")
            return
        out = []
        data = bytes(buf)
        while data:
            try:
                out.append(dec.decompress(data))
            except zlib.error as exc:
                raise IntegrityError(f"{name}: corrupt GZIP stream ({exc})") from None
            fed = True
            if dec.eof:
                data = dec.unused_data
                dec, fed = zlib.decompressobj(wbits=31), False
            else:
                data = b""
        joined = b"".join(out)
        if joined:
            yield joined


def iter_chunks(fd: int, *, name: str, compression: str | None = None, chunk_bytes: int = DEFAULT_CHUNK_BYTES,
                num_shards: int = 1, shard_index: int = 0) -> Iterator[tuple[bytes, np.ndarray, np.ndarray]]:
    """Yield ``(data, starts, lengths)`` per chunk of the TFRecord stream on ``fd``: the records are
    ``data[starts[k]:starts[k] + lengths[k]]``, CRC-checked; with ``num_shards > 1`` only the records whose
    index in the stream is ``shard_index`` modulo ``num_shards`` (the same records as ``shard(n, i)``).
    Raises IntegrityError naming ``name`` and the byte offset on damage or truncation."""
    from converters.tfrecord.reader import iter_record_chunks

    index = 0
    for chunk in iter_record_chunks(_raw_chunks(fd, chunk_bytes, compression, name), name=name):
        starts, lengths = chunk.starts, chunk.lengths
        count = starts.shape[0]
        if num_shards > 1:
            keep = (np.arange(index, index + count) % num_shards) == shard_index
            starts, lengths = starts[keep], lengths[keep]
        index += count
        if starts.shape[0]:
            data = chunk.data
            yield (data[:chunk.end] if chunk.end < len(data) else data), starts, lengths


class _EpochReader:
    """The generator behind one epoch's ``from_generator``: lock, wait, read, release."""

    def __init__(self, spec, chunk_bytes: int):
        self.spec = spec
        self.chunk_bytes = chunk_bytes

    def __call__(self, epoch):
        spec = self.spec
        path = fifo_path(spec.pipe_dir, spec.channel, int(epoch))
        with channel_lock(spec.pipe_dir, spec.channel):
            fd = wait_for_fifo(path, spec.pipe_timeout)
            try:
                log.info("pipe mode: reading %s", path)
                yield from iter_chunks(fd, name=path, compression=spec.compression, chunk_bytes=self.chunk_bytes,
                                       num_shards=spec.num_shards, shard_index=spec.shard_index)
            finally:
                os.close(fd)


def pipe_records_dataset(spec, epoch, *, chunk_bytes: int = DEFAULT_CHUNK_BYTES):
    """One epoch of ``spec``'s channel as a tf.data dataset of string vectors (one element per chunk).

    ``epoch`` may be a Python int or a scalar int64 tensor (inside ``flat_map``)."""
    import tensorflow as tf

    sig = (tf.TensorSpec([], tf.string), tf.TensorSpec([None], tf.int64), tf.TensorSpec([None], tf.int64))
    ds = tf.data.Dataset.from_generator(_EpochReader(spec, chunk_bytes), args=(epoch,), output_signature=sig)
    return ds.map(lambda data, starts, lengths: tf.strings.substr(data, starts, lengths))


def sagemaker_pipe_dataset(spec):
    """``sagemaker_tensorflow.PipeModeDataset`` for the channel (records, one per element)."""
    try:
        from sagemaker_tensorflow import PipeModeDataset  # type: ignore[import-not-found]
    except ImportError as exc:
        raise TfpipeError("use_sagemaker_pipe=True but sagemaker_tensorflow is not importable "
                          f"({exc}); drop the option to use tfpipe's own FIFO reader") from None
    return PipeModeDataset(channel=spec.channel, record_format="TFRecord", pipe_dir=spec.pipe_dir)


def simulate_channel(pipe_dir: str, channel: str, files: list[str], *, epochs: int = 1, first_epoch: int = 0,
                     block: int = 1 << 20, unlink: bool = True, use_cat: bool = True) -> threading.Thread:
    """Play SageMaker locally: a daemon thread that, for each epoch, creates the FIFO
    ``{pipe_dir}/{channel}_{epoch}``, streams ``files`` into it (blocking until a reader opens it), closes it
    and removes it. The bytes are copied by a ``cat`` process when available (``use_cat``), so the writer
    shares no interpreter lock with the reader, as with SageMaker's own writer. Returns the started thread; its
    ``error`` attribute holds an exception if one occurred."""
    os.makedirs(pipe_dir, exist_ok=True)
    cat = shutil.which("cat") if use_cat else None

    def run():
        try:
            for e in range(first_epoch, first_epoch + epochs):
                path = fifo_path(pipe_dir, channel, e)
                os.mkfifo(path)
                try:
                    with open(path, "wb", buffering=0) as out:   # blocks until a reader opens the FIFO
                        if cat:   # a separate process, like SageMaker's own writer: no GIL shared with the reader
                            rc = subprocess.run([cat, "--", *files], stdout=out, stderr=subprocess.PIPE).returncode
                            if rc not in (0, -signal.SIGPIPE):
                                raise OSError(f"cat exited with {rc} while feeding {path}")
                        else:
                            for name in files:
                                with open(name, "rb") as src:
                                    while True:
                                        data = src.read(block)
                                        if not data:
                                            break
                                        out.write(data)
                finally:
                    if unlink:
                        os.unlink(path)
        except BaseException as exc:  # reported to whoever joins the thread
            t.error = exc

    t = threading.Thread(target=run, name=f"simulate-channel-{channel}", daemon=True)
    t.error = None
    t.start()
    return t
