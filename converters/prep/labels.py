"""A record's label as preparation sees it (balance, split, shuffle's label mix), one rule on every engine.

Labels are float32. Two labels are the same label iff their *identities* (``label_bits``) are equal: the
float32 bit pattern, with -0.0 counted as 0.0 and every NaN (any sign or payload) as one label of its own,
named ``nan`` (its part is ``label=nan``; ``--balance nan=0.5`` names it). ±inf are labels ``inf`` and
``-inf``; a value too large for float32 is ±inf. Identities, not floats, are used as keys everywhere, since a
NaN float is never equal to itself.
"""
from __future__ import annotations

import numpy as np

__all__ = ["NAN_BITS", "label_bits", "bits_label", "bits_name", "label_name", "label_order"]

NAN_BITS = 0x7FC00000  # the one identity of every NaN label


def label_bits(labels) -> np.ndarray:
    """float32 labels -> uint32 identities (-0.0 counted as 0.0, every NaN as ``NAN_BITS``)."""
    with np.errstate(over="ignore", invalid="ignore"):
        values = np.asarray(labels, dtype=np.float32) + np.float32(0.0)
    bits = np.array(values, dtype=np.float32, copy=True).view(np.uint32)
    bits[np.isnan(values)] = np.uint32(NAN_BITS)
    return bits


def bits_label(bits: int) -> float:
    """The float value of an identity."""
    return float(np.uint32(bits).view(np.float32))


def label_name(label: float) -> str:
    """A label as it is written in names and manifests: ``0``, ``1``, ``-1``, ``2.5``, ``inf``, ``nan``."""
    with np.errstate(over="ignore"):
        value = np.float32(label) + np.float32(0.0)  # -0.0 is 0
    if np.isnan(value):
        return "nan"
    return np.format_float_positional(value, trim="-")


def bits_name(bits: int) -> str:
    return label_name(bits_label(bits))


def label_order(bits: int) -> tuple[int, float]:
    """Sort key of identities: by value, ``nan`` last (a total order, unlike the floats themselves)."""
    value = bits_label(bits)
    return (1, 0.0) if np.isnan(value) else (0, value)
