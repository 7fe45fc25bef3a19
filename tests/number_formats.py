"""Shared by the LibSVM tests: numbers written in the many ways real files write them."""
from __future__ import annotations

import numpy as np


def number_text(rng, v: float) -> str:
    """``v`` in one of eleven formats, chosen by ``rng`` (all valid Python floats: repr, %g, 17 digits,
    exponents, fixed point, signs, '5.'-like shapes, explicit zeros, integers)."""
    v = float(v)
    k = rng.integers(11)
    if k == 0:
        return repr(v)
    if k == 1:
        return "%g" % v
    if k == 2:
        return "%.17g" % v
    if k == 3:
        return "%.3e" % v
    if k == 4:
        return "%.10f" % v
    if k == 5:
        return "%.9G" % v
    if k == 6:
        return repr(float(np.float32(v)))
    if k == 7:
        return "%+.4f" % v
    if k == 8:
        return ("%.6f" % v).rstrip("0")               # '5.' and '.5'-like shapes
    if k == 9:
        return "0" if rng.random() < 0.5 else "-0.0"  # explicit zeros
    return "%d" % round(v)
