"""Which code issued an import: the first frame above Python's import machinery, for the CLI's import finders
that refuse one import issued by one module body (``cli.quiet``, ``util.blasprobe``)."""
from __future__ import annotations

import importlib

__all__ = ["importer_frame"]


def importer_frame(frame):
    """``frame`` or the first frame above it that is not the import machinery (frozen importlib, or
    ``importlib/__init__.py``'s ``import_module``); None past the top of the stack."""
    while frame is not None and (frame.f_code.co_filename.startswith("<frozen importlib")
                                 or frame.f_code.co_filename == importlib.__file__):
        frame = frame.f_back
    return frame
