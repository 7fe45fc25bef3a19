"""Keep TensorFlow's start-up C++ log lines (``I0000 ... oneDNN custom operations are on``, "All log messages
before absl::InitializeLog() ...") off the terminal of a CLI command.

Those lines are written to file descriptor 2 by native code while ``import tensorflow`` runs, before
``TF_CPP_MIN_LOG_LEVEL`` takes effect, so no environment variable silences them. ``quiet_tensorflow_import()``
installs a one-shot import hook: the first ``import tensorflow`` (whichever command does it, whenever) runs
with fd 2 captured; afterwards the captured text is written back without the INFO/WARNING log lines, so a real
error still reaches the user. The CLI installs it unless ``-v`` is given; library users are not affected.
"""
from __future__ import annotations

import importlib.abc
import importlib.machinery
import os
import re
import sys
import tempfile

__all__ = ["quiet_tensorflow_import", "drop_tf_noise"]

_ABSL_NOTICE = "WARNING: All log messages before absl::InitializeLog() is called are written to STDERR"
# an absl log record: severity + MMDD, time (seconds unbounded before absl is initialized), thread, file:line]
_RECORD = re.compile(r"^([IWEF])\d{4} \d\d:\d\d:\d+\.\d+ +\d+ [^ ]+:\d+\] ")


def drop_tf_noise(text: str) -> str:
    """``text`` without TensorFlow's start-up INFO/WARNING log records (a record's continuation lines
    included) and absl's notice about them; ERROR/FATAL records and anything else are kept."""
    kept, dropping = [], False
    for line in text.splitlines(keepends=True):
        m = _RECORD.match(line)
        if m:
            dropping = m.group(1) in "IW"
        elif line.rstrip("\n") == _ABSL_NOTICE:
            dropping = True
            continue
        if not dropping:
            kept.append(line)
    return "".join(kept)


class _QuietLoader(importlib.abc.Loader):
    def __init__(self, loader):
        self._loader = loader

    def create_module(self, spec):
        return self._loader.create_module(spec)

    def exec_module(self, module) -> None:
        sys.stderr.flush()
        saved = os.dup(2)
        with tempfile.TemporaryFile() as captured:
            os.dup2(captured.fileno(), 2)
            try:
                self._loader.exec_module(module)
            finally:
                sys.stderr.flush()
                os.dup2(saved, 2)
                os.close(saved)
                captured.seek(0)
                rest = drop_tf_noise(captured.read().decode("utf-8", "replace"))
                if rest:
                    sys.stderr.write(rest)
                    sys.stderr.flush()

    def __getattr__(self, name):  # anything else (resource readers, is_package, ...) from the real loader
        return getattr(self._loader, name)


class _QuietTensorFlowFinder(importlib.abc.MetaPathFinder):
    def find_spec(self, fullname, path, target=None):
        if fullname != "tensorflow":
            return None
        spec = importlib.machinery.PathFinder.find_spec(fullname, path)
        if spec is not None and spec.loader is not None:
            spec.loader = _QuietLoader(spec.loader)
        return spec


def quiet_tensorflow_import() -> None:
    """Install the hook (once; a no-op when TensorFlow is already imported)."""
    if "tensorflow" in sys.modules or any(isinstance(f, _QuietTensorFlowFinder) for f in sys.meta_path):
        return
    sys.meta_path.insert(0, _QuietTensorFlowFinder())
