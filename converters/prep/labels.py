"""A label's identity, written once for every writer and planner that routes, counts or samples by label:
float32 labels -> uint32 ids (``label_bits``; -0.0 counted as 0.0, so equal labels have equal ids), an id back
to its label (``bits_label``) and the label as it is written in part names and manifests (``label_name``)."""
from __future__ import annotations

import numpy as np

__all__ = ["label_bits", "bits_label", "label_name"]


def label_bits(labels) -> np.ndarray:
    """float32 labels -> uint32 identities (-0.0 counted as 0.0)."""
    return (np.asarray(labels, dtype=np.float32) + np.float32(0.0)).view(np.uint32)


def bits_label(bits: int) -> float:
    """The label whose identity is ``bits``."""
    return float(np.uint32(bits).view(np.float32))


def label_name(label: float) -> str:
    """A label as it is written in names and manifests: ``0``, ``1``, ``-1``, ``2.5``."""
    return np.format_float_positional(np.float32(label) + np.float32(0.0), trim="-")  # -0.0 is 0
