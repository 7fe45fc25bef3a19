"""Shared by the record-offset tests: TFRecord files made fast (framed by numpy/numba, no TensorFlow), their
records identifiable (each payload starts with its record number)."""
from __future__ import annotations

import numpy as np

from converters.tfrecord.crc import frame_payloads


def write_payloads(path, payloads: list[bytes]) -> list[int]:
    """Write ``payloads`` as a TFRecord file; returns each record's byte offset."""
    offsets = np.zeros(len(payloads) + 1, np.int64)
    offsets[1:] = np.cumsum([len(p) for p in payloads])
    data = np.frombuffer(b"".join(payloads), np.uint8) if payloads else np.zeros(0, np.uint8)
    framed, lengths = frame_payloads(data, offsets)
    with open(path, "wb") as f:
        f.write(framed.tobytes())
    return [0, *np.cumsum(lengths)[:-1].tolist()] if payloads else []


def write_uniform(path, n: int, size: int) -> None:
    """``n`` records of ``size`` bytes (>= 8): record i's payload starts with i (8 bytes little-endian)."""
    data = np.full((n, size), 0x5A, np.uint8)
    data[:, :8] = np.arange(n, dtype="<u8").view(np.uint8).reshape(n, 8)
    framed, _ = frame_payloads(data.reshape(-1), np.arange(n + 1, dtype=np.int64) * size)
    with open(path, "wb") as f:
        f.write(framed.tobytes())


def tampered(good: np.ndarray, how: str) -> np.ndarray:
    """``good`` (a file's record offsets, 21 or more) tampered with as ``how`` (one of ``TAMPERINGS``) says."""
    if how == "shifted forward":          # entry i names record i+1 (the last names the end of the file)
        return np.concatenate([good[1:], [good[-1] + (good[1] - good[0])]]).astype("<u8")
    if how == "shifted back":             # entry i names record i-1, the first is 0 twice
        return np.concatenate([[0], good[:-1]]).astype("<u8")
    if how == "one record dropped":       # one entry fewer, each after 19 names the next record
        return np.delete(good, 20)
    if how == "truncated":
        return good[:25]
    if how == "swapped":
        out = good.copy()
        out[19], out[20] = good[20], good[19]
        return out
    if how == "one too many":
        return np.concatenate([good, [good[-1] + 46]]).astype("<u8")
    if how == "zeros":
        return np.zeros(len(good), "<u8")
    return np.arange(len(good), dtype="<u8") * 40          # "other file": another file's index, same count


TAMPERINGS = ["shifted forward", "shifted back", "one record dropped", "truncated", "swapped", "one too many",
              "zeros", "other file"]
