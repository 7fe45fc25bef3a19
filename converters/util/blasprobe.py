"""numba's start in a CLI process without its BLAS probe.

The first kernel a process compiles or loads from numba's cache sets up numba's CPU target, which imports
``numba.np.arraymath``; that module's body probes for a BLAS by importing ``scipy.linalg.cython_blas``, and
where SciPy is installed (scikit-learn brings it; most ML environments have it) that loads ``scipy.linalg``:
about 0.3 s of CPU, a quarter of a small conversion's, for a flag that only picks between two equal ways of
computing numba's ``np.correlate`` / ``np.convolve``, which no tfpipe kernel uses. ``skip_numba_blas_probe()``
makes that one import, issued by the probe while ``numba.np.arraymath`` is first imported, fail as numba allows
(it catches the ImportError); a kernel that does use BLAS (``np.dot``, ``np.linalg``) still gets SciPy when it
is compiled, since those import it themselves, later. The CLI asks for it; library users are not affected.
"""
from __future__ import annotations

import importlib.abc
import sys

from .importer import importer_frame

__all__ = ["skip_numba_blas_probe"]


class _BlasProbeDeferral(importlib.abc.MetaPathFinder):
    """Refuses an import of SciPy issued by ``numba.np.linalg.ensure_blas`` called from
    ``numba.np.arraymath._check_blas`` (the probe in that module's body); any other import goes on as usual."""

    def find_spec(self, fullname, path, target=None):
        if fullname.partition(".")[0] == "scipy" and _issued_by_the_probe(sys._getframe(1)):
            raise ImportError(f"{fullname}: numba's BLAS probe is skipped (tfpipe CLI)", name=fullname)
        return None


def _issued_by_the_probe(frame) -> bool:
    """The first frame above the import machinery is ``ensure_blas`` and its caller ``_check_blas`` in
    ``numba.np.arraymath``."""
    frame = importer_frame(frame)
    if frame is None or frame.f_code.co_name != "ensure_blas" or frame.f_globals.get("__name__") != "numba.np.linalg":
        return False
    caller = frame.f_back
    return (caller is not None and caller.f_code.co_name == "_check_blas"
            and caller.f_globals.get("__name__") == "numba.np.arraymath")


def skip_numba_blas_probe() -> None:
    """numba's first set-up in this process without its BLAS probe (a no-op once ``numba.np.arraymath`` is
    imported, or when asked again)."""
    if "numba.np.arraymath" in sys.modules or any(isinstance(f, _BlasProbeDeferral) for f in sys.meta_path):
        return
    sys.meta_path.insert(0, _BlasProbeDeferral())
