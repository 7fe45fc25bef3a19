"""A read-only directory built once per test run and shared by every pytest-xdist worker of that run.

A module-scoped fixture is set up once per worker process: with ``-n 3`` an expensive input (a generated data
set, its converted shards) may be built three times. ``built_once`` builds it the first time any worker asks
(the others wait on a lock, then reuse it); without xdist it lives in the session's own temporary directory.
Tests must only read what it returns (copy it to change it)."""
from __future__ import annotations

import fcntl
import os
import shutil
from pathlib import Path
from typing import Callable


def built_once(tmp_path_factory, name: str, build: Callable[[Path], None]) -> Path:
    """``build(path)`` fills the new empty directory ``path`` once per test run; ``path`` is returned to every
    caller of the run (every xdist worker) afterwards. A build that raised is redone by the next caller."""
    root = tmp_path_factory.getbasetemp()
    if os.environ.get("PYTEST_XDIST_WORKER"):
        root = root.parent  # the run's temporary directory (workers use <run>/popen-gwN): shared by its workers
    path = root / f"shared-{name}"
    with open(root / f"shared-{name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # released when the file closes
        if not (path / ".built").exists():
            shutil.rmtree(path, ignore_errors=True)  # what a build that raised left
            path.mkdir()
            build(path)
            (path / ".built").touch()
    return path
