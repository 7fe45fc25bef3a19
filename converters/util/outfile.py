"""One writer for every file a command writes at a path its user gives (``--json-out``, ``--markdown``, ``--png``,
``tokenizer train --out``), and the check of such a path before a long run starts.

What the path is decides how it is written, and the path keeps being what it was:

* a regular file, or no file yet: atomically (a temporary name in the same directory, fsync, rename);
* a symbolic link: through it — the link stays a link and its target gets the bytes (atomically, as above);
* a character device or a FIFO (``/dev/stdout``, ``/dev/null``, a named pipe a reader waits on): written to
  directly, never replaced by a regular file; so is any path resolved through ``/proc/*/fd`` or ``/dev/fd``
  (``/dev/stdout`` when stdout is a file: appended, the file is not replaced);
* a directory, a block device or a socket: refused with one line.

Every failure is one ``OutputError`` line naming the path the user gave (never a temporary name) and the
system's reason (``No space left on device`` for ``/dev/full``).
"""
from __future__ import annotations

import errno
import os
import stat

from .errors import OutputError
from .fs import file_kind, write_atomic

__all__ = ["check_output", "write_output"]

_MAX_LINKS = 40  # as the kernel's ELOOP limit


def _label(path: str, what: str | None) -> str:
    return f"{what} {path}" if what else path


def _reason(exc: OSError) -> str:
    return exc.strerror or str(exc)


def _through_fd_link(path: str) -> bool:
    """Whether ``path``'s chain of symbolic links passes an open file's name (``/proc/self/fd/1``,
    ``/dev/fd/3``): that file is someone's open stream, to be written to, not replaced."""
    for _ in range(_MAX_LINKS):
        if path.startswith(("/proc/", "/dev/fd/")):
            return True
        try:
            target = os.readlink(path)
        except OSError:
            return False
        path = os.path.join(os.path.dirname(path), target)
    return False


def _kind(path: str) -> os.stat_result | None:
    """``stat`` of what ``path`` names (links followed), None when nothing is there yet."""
    try:
        return os.stat(path)
    except FileNotFoundError:
        return None


def check_output(path: str, what: str | None = None) -> str:
    """Refuse, before any work, an output path that cannot take a file: its directory is missing or not a
    directory or not writable; it is a directory, a block device or a socket; it is a device or FIFO that
    cannot be opened for writing. Opens nothing (a FIFO without a reader would block). Returns ``path``;
    raises ``OutputError`` naming it."""
    label = _label(path, what)
    if not path:
        raise OutputError(f"{label}: an empty path")
    try:
        st = _kind(path)
    except OSError as exc:
        raise OutputError(f"{label}: {_reason(exc)}") from None
    if st is not None and (stat.S_ISCHR(st.st_mode) or stat.S_ISFIFO(st.st_mode)):
        if not os.access(path, os.W_OK):
            raise OutputError(f"{label}: {os.strerror(errno.EACCES)}")
        return path
    if st is not None and not stat.S_ISREG(st.st_mode):
        raise OutputError(f"{label}: is {file_kind(st.st_mode)}; give a file name")
    target = os.path.realpath(path)  # a link's target is what gets written
    directory = os.path.dirname(target)
    shown = os.path.dirname(target if os.path.islink(path) else path) or "."  # as the user would write it
    try:
        dst = os.stat(directory)
    except FileNotFoundError:
        raise OutputError(f"{label}: its directory {shown} does not exist") from None
    except OSError as exc:
        raise OutputError(f"{label}: its directory {shown}: {_reason(exc)}") from None
    if not stat.S_ISDIR(dst.st_mode):
        raise OutputError(f"{label}: {shown} is not a directory")
    if not os.access(directory, os.W_OK | os.X_OK):
        raise OutputError(f"{label}: its directory {shown} is not writable")
    return path


def _write_stream(path: str, data: bytes, label: str, append: bool) -> None:
    flags = os.O_WRONLY | getattr(os, "O_CLOEXEC", 0) | (os.O_APPEND if append else 0)
    try:
        fd = os.open(path, flags)  # no O_CREAT: what is there is written to; a FIFO waits for its reader
    except OSError as exc:
        raise OutputError(f"{label}: {_reason(exc)}") from None
    try:
        mode = os.fstat(fd).st_mode
        if not append and not (stat.S_ISCHR(mode) or stat.S_ISFIFO(mode)):
            raise OutputError(f"{label}: changed into {file_kind(mode)} while being opened; nothing written")
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view):]
    except OSError as exc:
        raise OutputError(f"{label}: {_reason(exc)}") from None
    finally:
        os.close(fd)


def write_output(path: str, data: bytes, *, what: str | None = None, streams: bool = True) -> None:
    """Write ``data`` to the user's ``path`` as its kind asks (see the module doc). ``what`` names the option
    in messages (``"--json-out"``). ``streams=False``: refuse a device or FIFO too (an output read back after
    writing). Raises ``OutputError`` naming ``path``."""
    path = os.fspath(path)
    label = _label(path, what)
    try:
        st = _kind(path)
    except OSError as exc:
        raise OutputError(f"{label}: {_reason(exc)}") from None
    stream = st is not None and (stat.S_ISCHR(st.st_mode) or stat.S_ISFIFO(st.st_mode))
    through_fd = st is not None and _through_fd_link(path)
    if (stream or through_fd) and not streams:
        raise OutputError(f"{label}: is {file_kind(st.st_mode)}; give a regular file")
    if stream or through_fd:
        _write_stream(path, data, label, append=through_fd and stat.S_ISREG(st.st_mode))
        return
    if st is not None and not stat.S_ISREG(st.st_mode):
        raise OutputError(f"{label}: is {file_kind(st.st_mode)}; give a file name")
    target = os.path.realpath(path)  # through links: the link stays, its target is replaced atomically
    try:  # a file that was there keeps its permissions (a private 0600 report stays private)
        write_atomic(target, data, tmp_prefix=f".{os.path.basename(target)[:64]}.tmp-",
                     mode=None if st is None else stat.S_IMODE(st.st_mode))
    except OSError as exc:
        raise OutputError(f"{label}: {_reason(exc)}") from None
