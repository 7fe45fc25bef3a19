"""The column kernel: a small TensorFlow op (``column_cut.cc``, beside this module) that cuts one column out of
a chunk of columnar blocks, widens it to the schema's dtype and, for a shuffled read, puts its rows in the
permuted order, in one pass (``pipeline.graph.blockcheck`` uses it; without it the decode is
``substr`` → ``decode_raw`` → ``gather`` → ``cast``, four copies, with the same result).

It is compiled the first time a process needs it (about 10 s with ``c++`` and TensorFlow's headers, which every
TensorFlow wheel carries) into a cache directory, keyed by the source, TensorFlow's version and build flags and
the compiler, and loaded from there by every later process: a file lock lets one process compile while the
others wait, and the library is written under a temporary name and renamed. Where it cannot be built or loaded
(no compiler, a big-endian host, a failed compile) the read uses TensorFlow's own ops and a warning says why,
once per process; a failed compile is not tried again by later processes (``tfpipe pipeline kernel`` tries).

- ``TFPIPE_KERNEL=0``: never use it (TensorFlow's ops only).
- ``TFPIPE_KERNEL_DIR``: the cache directory (default ``$TFPIPE_CACHE/kernels``, else
  ``~/.cache/tfpipe/kernels``): point it at a directory baked into an image to compile once at build time
  (``tfpipe pipeline kernel``).
- ``CXX``: the compiler (default ``c++``, else ``g++``).
"""
from __future__ import annotations

import contextlib
import hashlib
import logging
import os
import shutil
import subprocess
import tempfile
from dataclasses import dataclass
from typing import Any

__all__ = ["KERNEL_FN", "KERNEL_ENV", "DIR_ENV", "SOURCE", "COMPILE_TIMEOUT_S", "KernelState", "kernel_dir",
           "kernel_state", "column_cut", "build_kernel", "reset"]

log = logging.getLogger(__name__)

KERNEL_ENV = "TFPIPE_KERNEL"
# what ``explain`` names as the decode's function (the plan is pure: it does not build the kernel to see)
KERNEL_FN = "tfpipe column kernel (tf.io.decode_raw + cast where it is off)"
DIR_ENV = "TFPIPE_KERNEL_DIR"
SOURCE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "column_cut.cc")
COMPILE_TIMEOUT_S = 300


@dataclass(frozen=True)
class KernelState:
    """Whether this process reads with the column kernel: ``path`` the library loaded, or ``why`` not."""
    path: str | None
    why: str
    compiled: bool = False       # this process compiled it (else it was found in the cache, or not built)

    @property
    def on(self) -> bool:
        return self.path is not None


_STATE: KernelState | None = None
_LIB: Any = None


def kernel_dir() -> str:
    """The cache directory of compiled kernels: ``$TFPIPE_KERNEL_DIR``, else ``kernels`` in tfpipe's cache
    (``$TFPIPE_CACHE``, else ``~/.cache/tfpipe``)."""
    own = os.environ.get(DIR_ENV)
    if own:
        return os.path.abspath(own)
    base = os.environ.get("TFPIPE_CACHE") or os.path.join(os.path.expanduser("~"), ".cache", "tfpipe")
    return os.path.join(base, "kernels")


def _compiler() -> str | None:
    own = os.environ.get("CXX")
    if own:
        return shutil.which(own) or (own if os.path.isfile(own) else None)
    return shutil.which("c++") or shutil.which("g++")


def _compiler_version(cxx: str) -> str:
    try:
        done = subprocess.run([cxx, "--version"], capture_output=True, text=True, timeout=60)
    except (OSError, subprocess.SubprocessError) as e:
        return f"unknown ({e})"
    return done.stdout.splitlines()[0] if done.stdout else f"exit {done.returncode}"


def _flags() -> tuple[list[str], list[str]]:
    import tensorflow as tf

    return list(tf.sysconfig.get_compile_flags()), list(tf.sysconfig.get_link_flags())


def _library_path(cxx: str) -> str:
    """Where the library for this source, TensorFlow and compiler lives (the name changes with any of them)."""
    import tensorflow as tf

    cflags, lflags = _flags()
    h = hashlib.sha256()
    with open(SOURCE, "rb") as f:
        h.update(f.read())
    for part in (tf.__version__, tf.sysconfig.get_lib(), " ".join(cflags), " ".join(lflags), cxx,
                 _compiler_version(cxx)):
        h.update(b"\0" + part.encode())
    return os.path.join(kernel_dir(), f"column_cut-{h.hexdigest()[:20]}.so")


@contextlib.contextmanager
def _locked(path: str):
    import fcntl

    with open(path + ".lock", "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)


def _compile(cxx: str, out: str) -> None:
    """Compile the kernel to ``out`` (a temporary name in its directory, fsynced, then renamed)."""
    cflags, lflags = _flags()
    fd, tmp = tempfile.mkstemp(prefix=".column_cut-", suffix=".so", dir=os.path.dirname(out))
    os.close(fd)
    try:
        cmd = [cxx, "-shared", "-fPIC", "-O3", "-w", SOURCE, "-o", tmp, *cflags, *lflags]
        done = subprocess.run(cmd, capture_output=True, text=True, timeout=COMPILE_TIMEOUT_S)
        if done.returncode != 0:
            tail = " ".join((done.stderr or done.stdout).strip().splitlines()[-3:]) or "no output"
            raise RuntimeError(f"{os.path.basename(cxx)} exited {done.returncode}: {tail[:400]}")
        with open(tmp, "rb") as f:
            os.fsync(f.fileno())
        os.replace(tmp, out)
    finally:
        with contextlib.suppress(FileNotFoundError):
            os.remove(tmp)


def build_kernel(retry: bool = False) -> KernelState:
    """Find or compile the kernel library and load it (no warning: the state says why not). A compile that failed
    is remembered beside the library's name (``.failed``, its reason) and not tried again by later processes,
    unless ``retry`` (``tfpipe pipeline kernel``)."""
    import tensorflow as tf

    global _LIB
    if os.environ.get(KERNEL_ENV, "1").strip().lower() in ("0", "off", "false", "no"):
        return KernelState(None, f"{KERNEL_ENV}={os.environ[KERNEL_ENV]}")
    if not os.path.isfile(SOURCE):
        return KernelState(None, f"its source {SOURCE} is missing")
    cxx = _compiler()
    path = None
    try:
        if cxx is None:
            raise RuntimeError("no C++ compiler (c++, g++ or $CXX) on PATH")
        path = _library_path(cxx)
        failed = path + ".failed"
        compiled = False
        if not os.path.isfile(path):
            os.makedirs(os.path.dirname(path), exist_ok=True)
            with _locked(path):
                if os.path.isfile(failed) and not retry:
                    with open(failed) as f:
                        raise RuntimeError(f"{f.read().strip()} (an earlier compile; `tfpipe pipeline kernel` "
                                           "tries again)")
                if not os.path.isfile(path):
                    log.info("compiling tfpipe's column kernel (once per TensorFlow and compiler) to %s", path)
                    try:
                        _compile(cxx, path)
                    except (OSError, RuntimeError, subprocess.SubprocessError) as e:
                        with contextlib.suppress(OSError), open(failed, "w") as f:
                            f.write(f"{type(e).__name__}: {e}\n")
                        raise
                    compiled = True
                with contextlib.suppress(FileNotFoundError):
                    os.remove(failed)
        _LIB = tf.load_op_library(path)
        return KernelState(path, "loaded", compiled)
    except (ImportError, OSError, RuntimeError, subprocess.SubprocessError, tf.errors.OpError) as e:
        return KernelState(None, f"{type(e).__name__}: {e}" + (f" ({path})" if path else ""))


def kernel_state() -> KernelState:
    """This process's kernel (built or loaded on the first call; a warning once if it cannot be)."""
    global _STATE
    if _STATE is None:
        _STATE = build_kernel()
        if not _STATE.on and not _STATE.why.startswith(KERNEL_ENV):
            log.warning("tfpipe's column kernel is off, columnar reads use TensorFlow's ops (same rows, more "
                        "CPU): %s; %s chooses its cache directory, %s=0 silences this", _STATE.why, DIR_ENV,
                        KERNEL_ENV)
    return _STATE


def column_cut():
    """The ``TfpipeColumnCut`` op function, or None where the kernel is off (:func:`kernel_state`)."""
    return _LIB.tfpipe_column_cut if kernel_state().on else None


def reset() -> None:
    """Forget this process's kernel state (the next use decides again; a loaded library stays loaded)."""
    global _STATE
    _STATE = None
