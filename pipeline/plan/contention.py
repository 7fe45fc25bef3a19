"""Contention for ``tfpipe pipeline tune``'s last phase: busy processes beside the timed graphs.

A read config that wins on a quiet host can collapse beside other work (the host's other ranks, evaluation,
preprocessing): a chunk parse's coarse, in-order handover held a graph to about a quarter of a core beside
multi-threaded processes. The tuner therefore times its winner against the built-in rule once more while
:func:`busy_neighbours` keeps every core busy, and stores the winner only if it wins there too."""
from __future__ import annotations

import contextlib
import subprocess
import sys
import time

__all__ = ["BUSY_LOOP", "busy_neighbours", "SETTLE_S"]

BUSY_LOOP = "while True: pass"
SETTLE_S = 0.5          # the neighbours' start-up, before the first timed round


@contextlib.contextmanager
def busy_neighbours(count: int, settle_s: float = SETTLE_S):
    """``count`` Python processes spinning (one core each) while the block runs; killed after it, whatever
    happens in the block. Yields ``count``."""
    procs = [subprocess.Popen([sys.executable, "-c", BUSY_LOOP], stdin=subprocess.DEVNULL,
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL) for _ in range(max(0, count))]
    try:
        if procs:
            time.sleep(settle_s)
        yield len(procs)
    finally:
        for p in procs:
            p.kill()
        for p in procs:
            p.wait()
