"""The window order: the resumable shuffle of a columnar set's rows (``pipeline.graph.resumerows``).

Number an epoch's blocks ``0 ..`` in their read order (the epoch's permuted files, each file's blocks in turn;
every block holds ``block_rows`` rows but a file's last). A window is ``K`` consecutive blocks
(:func:`window_blocks`: about ``WINDOW_BUFFERS × shuffle_buffer`` rows); its rows are decoded in one call and
leave in one stateless permutation (``stateless_shuffle``, seed from (seed, epoch, w)), each column cut in that
order in one pass: no sort, no per-row or per-batch step. Windows leave in order. Where the files are large enough
(:func:`file_windows`) windows stay within files: each file's blocks in windows of ``K`` from its first, its
last window the rest (the blocks are decoded as they are read, no regrouping); otherwise window ``w`` is blocks
``w·K .. (w+1)·K - 1`` of the epoch, across files.

A uniform permutation of ``W`` rows moves a row ``W/3`` on average; ``shuffle(B)`` moves one about ``0.73 B``
(measured), so windows of ``2.5 B`` rows move rows about 1.15× as far as ``shuffle(B)`` (the rank correlation
of position and row is lower too); windows within files are used only where their rows move at least
``FILE_WINDOWS_MIN`` as far as in full windows (about 1.03× ``shuffle(B)``). Memory: the windows being decoded
and permuted (at most ``WINDOW_CALLS`` at a time, each ``W`` rows read and its permuted rows).

Resuming at row ``p`` (:func:`window_entry`, :func:`file_window_entry`, pure): the block holding ``p`` gives its
window ``w``; reading restarts at the window's first block (the blocks before it are never decoded) and the
first ``p - rows before w`` rows of the window's permuted rows are left out. The state stays (epoch, position).
"""
from __future__ import annotations

import math

from ..spec.blocks import file_blocks, locate

__all__ = ["WINDOW_BUFFERS", "WINDOW_CALLS", "FILE_WINDOWS_MIN", "window_blocks", "window_rows", "window_entry",
           "file_windows", "within_files", "file_window_entry"]

WINDOW_BUFFERS = 2.5   # rows per window over shuffle_buffer: mean displacement ~1.15x shuffle(B)'s
WINDOW_CALLS = 2       # windows decoded and permuted at a time (two cores busy; the memory bound)
FILE_WINDOWS_MIN = 0.9  # windows stay within files where rows move at least this share as far as in full ones


def window_blocks(buffer: int, block_rows: int) -> int:
    """``K``: whole blocks per window, at least ``WINDOW_BUFFERS × buffer`` rows (at least one block)."""
    return max(1, math.ceil(WINDOW_BUFFERS * buffer / block_rows))


def window_rows(buffer: int, block_rows: int) -> int:
    """Rows of a window of full blocks (``explain`` shows it)."""
    return window_blocks(buffer, block_rows) * block_rows


def window_entry(rows: list[int], block_rows: int, k: int, position: int) -> tuple[int, int, int, int]:
    """(file in the read order, block in it, window, rows to leave out of the window) to enter an epoch whose
    files hold ``rows`` rows each (read order) at row ``position``, windows of ``k`` blocks."""
    blocks = [file_blocks(r, block_rows) for r in rows]
    j, r = locate(rows, min(position, sum(rows)))
    g = sum(blocks[:j]) + min(r // block_rows, blocks[j])      # the block holding the row (or the end)
    w = g // k
    fj, fb = locate(blocks, w * k)
    before = sum(rows[:fj]) + min(fb * block_rows, rows[fj])
    return fj, fb, w, max(0, position - before)


def file_windows(rows: list[int], block_rows: int, k: int) -> bool:
    """Whether windows of ``k`` blocks may stay within files of ``rows`` rows each (any order): the mean
    distance a row moves, ``sum(n_w ** 2) / (3 N)`` over the windows' row counts ``n_w``, is at least
    ``FILE_WINDOWS_MIN`` of full windows' ``W / 3``."""
    total, full = sum(rows), k * block_rows
    squares = 0
    for r in rows:
        whole, rest = divmod(r, full)
        squares += whole * full * full + rest * rest
    return squares >= FILE_WINDOWS_MIN * full * total


def within_files(spec) -> bool:
    """Whether a shuffled columnar spec's window order keeps windows within files (:func:`file_windows`): the
    manifest gives every file's rows (local or streamed) and the files are large enough. Not under a rank plan's
    own file lists: each rank decides from its files, and every rank's state must name one order."""
    rows, br = spec.file_records, spec.layout.block_rows
    return (spec.mode == "file" and bool(rows) and len(rows) == len(spec.files)
            and not spec.resuming.plan_fingerprint
            and file_windows(list(rows), br, window_blocks(spec.shuffle_buffer, br)))


def file_window_entry(rows: list[int], block_rows: int, k: int, position: int) -> tuple[int, int, int, int]:
    """:func:`window_entry` for windows within files: (file in the read order, block in it, window, rows to
    leave out of the window). A file of ``nb`` blocks holds ``ceil(nb / k)`` windows."""
    blocks = [file_blocks(r, block_rows) for r in rows]
    j, r = locate(rows, min(position, sum(rows)))
    g = min(r // block_rows, blocks[j])         # the block holding the row (or the file's end)
    first = g // k * k
    w = sum(-(-b // k) for b in blocks[:j]) + g // k
    return j, first, w, max(0, r - first * block_rows)
