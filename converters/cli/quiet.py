"""TensorFlow's start in a CLI process: without its start-up log lines, and without Keras.

**Quiet.** TensorFlow's start-up C++ log lines (``I0000 ... oneDNN custom operations are on``, "All log
messages before absl::InitializeLog() ...") are written to file descriptor 2 by native code while ``import
tensorflow`` runs, before ``TF_CPP_MIN_LOG_LEVEL`` takes effect, so no environment variable silences them.
``quiet_tensorflow_import()`` makes the first ``import tensorflow`` (whichever command does it, whenever) run
with fd 2 captured; afterwards the captured text is written back without the INFO/WARNING log lines, so a real
error still reaches the user. The CLI asks for it unless ``-v`` is given.

**Without Keras.** ``tensorflow/__init__.py`` ends by importing Keras (``keras.src.optimizers``, which loads
all of Keras and, where scikit-learn is installed, scikit-learn for Keras's wrappers): about a third of the
import's CPU time, which no tfpipe command needs to read or write data. ``lean_tensorflow_import()`` makes that
one import, issued by TensorFlow's own module body, fail as TensorFlow allows (it catches the ImportError);
``tf.keras`` and ``import keras`` later load Keras as usual, so a command that trains a model
(``bench threads``) gets it when it first uses it. The CLI always asks for it.

Library users are not affected: both apply only after the CLI asked for them, and only to the first import.
"""
from __future__ import annotations

import importlib.abc
import importlib.machinery
import os
import re
import sys
import tempfile

from ..util.importer import importer_frame

__all__ = ["quiet_tensorflow_import", "lean_tensorflow_import", "drop_tf_noise"]

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


class _TensorFlowLoader(importlib.abc.Loader):
    """TensorFlow's own loader, its module body run as the finder's settings say."""

    def __init__(self, loader, quiet: bool, lean: bool):
        self._loader = loader
        self._quiet = quiet
        self._lean = lean

    def create_module(self, spec):
        return self._loader.create_module(spec)

    def exec_module(self, module) -> None:
        deferral = _KerasDeferral() if self._lean else None
        if deferral is not None:
            sys.meta_path.insert(0, deferral)
        try:
            if self._quiet:
                self._exec_quietly(module)
            else:
                self._loader.exec_module(module)
        finally:
            if deferral is not None:
                sys.meta_path.remove(deferral)

    def _exec_quietly(self, module) -> None:
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


_KERAS = ("keras", "tf_keras")


class _KerasDeferral(importlib.abc.MetaPathFinder):
    """Refuses an import of Keras issued directly by TensorFlow's module body (``importlib.import_module``
    there); a lookup without import (``importlib.util.find_spec``, which TensorFlow uses for its module
    paths) and an import by any other module go on as usual."""

    def find_spec(self, fullname, path, target=None):
        if fullname.partition(".")[0] in _KERAS and _issued_by_tensorflow_body(sys._getframe(1)):
            raise ImportError(f"{fullname} is loaded when first used (tfpipe CLI)", name=fullname)
        return None


def _issued_by_tensorflow_body(frame) -> bool:
    """The first frame above the import machinery is ``tensorflow/__init__.py``'s module body."""
    frame = importer_frame(frame)
    return (frame is not None and frame.f_code.co_name == "<module>"
            and frame.f_globals.get("__name__") == "tensorflow")


class _TensorFlowFinder(importlib.abc.MetaPathFinder):
    def __init__(self):
        self.quiet = False
        self.lean = False

    def find_spec(self, fullname, path, target=None):
        if fullname != "tensorflow":
            return None
        spec = importlib.machinery.PathFinder.find_spec(fullname, path)
        if spec is not None and spec.loader is not None:
            spec.loader = _TensorFlowLoader(spec.loader, self.quiet, self.lean)
        return spec


def _finder() -> _TensorFlowFinder | None:
    """The hook (installed once); None when TensorFlow is already imported."""
    if "tensorflow" in sys.modules:
        return None
    for f in sys.meta_path:
        if isinstance(f, _TensorFlowFinder):
            return f
    f = _TensorFlowFinder()
    sys.meta_path.insert(0, f)
    return f


def quiet_tensorflow_import() -> None:
    """The first ``import tensorflow`` without its start-up log lines (a no-op once it is imported)."""
    f = _finder()
    if f is not None:
        f.quiet = True


def lean_tensorflow_import() -> None:
    """The first ``import tensorflow`` without its eager Keras import (a no-op once it is imported)."""
    f = _finder()
    if f is not None:
        f.lean = True
