"""A source set's vocabulary (``--vocab-from``) copied into the new set in bounded memory: its file streamed to
a local file (checked against the source manifest's size and sha256 as it goes; a mismatch stops the run before
any shard), and its lines, whose line number is the id, kept as sorted ``(value, id)`` runs (``IdRun``) in the
temporary area for ``merge_runs``: the same sorted lookup table a counted vocabulary has (``vocabwrite``). Every
line must be one StringLookup serves as it is: not empty, no carriage return or NUL as its last byte
(TensorFlow's line reader drops the one, numpy's fixed-width values the other); ``VocabFiles.copied`` refuses a
value listed twice."""
from __future__ import annotations

import hashlib
import os

import numpy as np

from ..util.errors import IntegrityError
from ..util.excerpt import excerpt
from .setinfo import SourceVocab
from .vocab import SortedRun, sort_key, write_run
from .vocablong import LONG

__all__ = ["copy_vocabulary", "IdRun", "READ_BYTES"]

READ_BYTES = 4 << 20  # bytes of the source file read at a time


class IdRun(SortedRun):
    """A sorted run of a source vocabulary's lines: the int64 beside each value is its id (its line number)."""


def copy_vocabulary(src: SourceVocab, text_path: str, area, stem: str,
                    read_bytes: int = READ_BYTES) -> list[IdRun]:
    """Copy ``src`` to ``text_path`` (local, fsynced); the sorted ``(value, id)`` runs of its lines (named
    ``stem-rNNNN`` in ``area``)."""
    h, runs, carry, at, ids = hashlib.sha256(), [], b"", 0, 0
    with open(text_path, "wb") as out:
        while at < src.nbytes:
            chunk = src.storage.read_range(src.name, at, min(at + read_bytes, src.nbytes))
            if not chunk:
                break
            at += len(chunk)
            h.update(chunk)
            out.write(chunk)
            data = carry + chunk
            cut = data.rfind(b"\n") + 1
            carry = data[cut:]
            if cut:
                _check_lines(data, cut, ids, src)
                ids = _spill(data[:cut - 1].split(b"\n"), ids, area, stem, runs)
        out.flush()
        os.fsync(out.fileno())
    if at != src.nbytes or src.storage.read_range(src.name, at, at + 1):
        raise IntegrityError(f"{src.label} is not the {src.nbytes:,} bytes its manifest lists")
    if h.hexdigest() != src.sha256:
        raise IntegrityError(f"{src.label} differs from its manifest's sha256")
    if carry:
        raise IntegrityError(f"{src.label}: its last line has no newline (not a vocabulary file tfpipe wrote)")
    if ids != src.values:
        raise IntegrityError(f"{src.label} lists {ids:,} values, its manifest's table size says {src.values:,}")
    return runs


def _check_lines(data: bytes, cut: int, ids: int, src: SourceVocab) -> None:
    """The complete lines ``data[:cut]`` (after ``ids`` lines) are servable values, else ``IntegrityError``
    naming the first bad line (vectorized: no Python step per line)."""
    buf = np.frombuffer(data, np.uint8, count=cut)
    ends = np.flatnonzero(buf == 10)
    starts = np.concatenate([[0], ends[:-1] + 1])
    last = buf[np.maximum(ends - 1, 0)]
    bad = np.flatnonzero((ends == starts) | (last == 13) | (last == 0))
    if bad.size:
        k = int(bad[0])
        line = bytes(buf[starts[k]:ends[k]])
        end = "a carriage return" if line[-1:] == b"\r" else "NUL"
        why = f"{excerpt(line)} ends with {end}" if line else "is empty"
        raise IntegrityError(f"{src.label}: line {ids + k + 1} {why}: not a vocabulary StringLookup serves as "
                             "tfpipe's ids")


def _spill(lines: list[bytes], first: int, area, stem: str, runs: list[IdRun]) -> int:
    """One sorted run of ``lines`` (ids ``first + 1``, ...), at the width of its longest line of at most
    ``vocablong.LONG`` bytes (longer lines: the run's long part); the last id."""
    ids = np.arange(first + 1, first + 1 + len(lines), dtype=np.int64)
    long = None
    if max(map(len, lines), default=0) > LONG:
        pairs = sorted((v, i) for v, i in zip(lines, ids.tolist()) if len(v) > LONG)
        long = ([v for v, _ in pairs], np.array([i for _, i in pairs], np.int64))
        keep = np.fromiter((len(v) <= LONG for v in lines), np.bool_, len(lines))
        lines, ids = [v for v in lines if len(v) <= LONG], ids[keep]
    values = np.array(lines, dtype="S") if lines else np.zeros(0, "S1")
    order = np.argsort(sort_key(values), kind="stable")
    runs.append(write_run(IdRun, area, f"{stem}-r{len(runs):04d}", values[order], ids[order], long))
    return first + len(long[0]) + values.size if long else first + values.size
