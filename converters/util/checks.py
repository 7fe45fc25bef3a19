"""One validator for the numbers the API takes: counts (any integral type: ``int``, ``np.int64``, ...) and reals
(any real number: ``float``, ``np.float32``, an ``int``), never ``bool``. A checked value comes back as a plain
Python ``int`` or ``float``, so a spec that stores it stays hashable, comparable and JSON-serializable.

``as_int(v, "batch_size", minimum=1)`` returns ``512`` for ``np.int64(512)`` and raises ``ValueError("batch_size
must be a positive integer, got ...")`` for ``True``, ``2.5`` or ``0``; ``set_int(self, "batch_size", ...)`` does the
same to a field of a frozen dataclass in ``__post_init__``."""
from __future__ import annotations

import math
import numbers
import operator
from typing import Any

__all__ = ["is_integral", "is_real", "as_int", "as_real", "set_int", "set_real"]


def is_integral(v: Any) -> bool:
    """True for Python and NumPy integers (anything ``numbers.Integral``), False for ``bool`` (and NumPy's)."""
    return isinstance(v, numbers.Integral) and not isinstance(v, bool) and type(v).__name__ != "bool_"


def is_real(v: Any) -> bool:
    """True for Python and NumPy real numbers (``numbers.Real``: floats and integers), False for ``bool``."""
    return isinstance(v, numbers.Real) and not isinstance(v, bool) and type(v).__name__ != "bool_"


def _describe(minimum, maximum, kind: str) -> str:
    if minimum == 1 and maximum is None:
        return f"a positive {kind}"
    if minimum == 0 and maximum is None:
        return f"a non-negative {kind}"
    if minimum is not None and maximum is not None:
        return f"{'an' if kind == 'integer' else 'a'} {kind} in [{minimum}, {maximum}]"
    if minimum is not None:
        return f"{'an' if kind == 'integer' else 'a'} {kind} >= {minimum}"
    if maximum is not None:
        return f"{'an' if kind == 'integer' else 'a'} {kind} <= {maximum}"
    return f"{'an' if kind == 'integer' else 'a'} {kind}"


def as_int(v: Any, name: str, *, minimum: int | None = None, maximum: int | None = None, none: bool = False,
           must: str | None = None) -> int | None:
    """``v`` as a plain ``int``, checked: integral (not ``bool``), within ``[minimum, maximum]``; ``None`` passes
    when ``none``. The error reads ``{name} must be {must}, got {v!r}`` (``must`` defaults to a description of the
    bounds, e.g. "a positive integer")."""
    if v is None and none:
        return None
    if is_integral(v):
        n = operator.index(v)
        if (minimum is None or n >= minimum) and (maximum is None or n <= maximum):
            return n
    what = must or _describe(minimum, maximum, "integer") + (" or None" if none else "")
    raise ValueError(f"{name} must be {what}, got {v!r}")


def as_real(v: Any, name: str, *, minimum: float | None = None, maximum: float | None = None,
            above: float | None = None, none: bool = False, finite: bool = True, must: str | None = None
            ) -> float | None:
    """``v`` as a plain ``float``, checked: a real number (not ``bool``), finite unless ``finite=False``, within
    ``[minimum, maximum]`` and ``> above``; ``None`` passes when ``none``."""
    if v is None and none:
        return None
    if is_real(v):
        x = float(v)
        if (not math.isnan(x) and (not finite or math.isfinite(x)) and (minimum is None or x >= minimum)
                and (maximum is None or x <= maximum) and (above is None or x > above)):
            return x
    what = must or (f"a number > {above}" if above is not None else _describe(minimum, maximum, "number"))
    raise ValueError(f"{name} must be {what}{' or None' if none and not must else ''}, got {v!r}")


def set_int(obj: Any, field: str, *, name: str | None = None, **check) -> None:
    """Check the field ``field`` of a (frozen) dataclass with ``as_int`` (the error names it ``name``, default
    ``field``) and store it back as a plain ``int``."""
    object.__setattr__(obj, field, as_int(getattr(obj, field), name or field, **check))


def set_real(obj: Any, field: str, *, name: str | None = None, **check) -> None:
    """Check the field ``field`` of a (frozen) dataclass with ``as_real`` and store it back as a plain ``float``."""
    object.__setattr__(obj, field, as_real(getattr(obj, field), name or field, **check))
