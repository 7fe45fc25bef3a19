"""Pass 1's (encoding's) lookups of the vocabularies, kept per process: a column's lookup is opened from its
sorted table in the run's temporary area (``vocabstep`` writes it) the first time a unit of the run asks for it,
and kept for the next units until pass 1 is over (``clear_lookups``). A lookup within the column's share of
``--memory`` (``budget.MemoryBudget.lookup_bytes``) is in memory (a hash table of uint64 keys, or the sorted
values); a larger one reads its table from disk block by block (``disklookup``). Values longer than
``vocablong.LONG`` bytes are looked up in their own table (``vocablong.LongLookup``)."""
from __future__ import annotations

import logging
import os

import numpy as np

from ..util.units import format_size
from .disklookup import DiskLookup, table_bytes
from .vocab import Lookup
from .vocablong import LongLookup

__all__ = ["column_lookup", "clear_lookups"]

log = logging.getLogger(__name__)

_LOOKUPS: dict[tuple, Lookup] = {}  # per process: (run id, output, column) -> its vocabulary's lookup
_FETCHED: dict[str, str] = {}  # temporary-area URL -> a local copy (a temporary area on S3), per process


def clear_lookups() -> None:
    """Drop this process's lookups (pass 1 is over)."""
    _LOOKUPS.clear()


def column_lookup(area, name: str, size: int, budget: int) -> Lookup:
    """Column ``name``'s lookup (``size`` values) in run ``area``, within ``budget`` bytes: this process's, or
    opened from the column's table."""
    key = (area.run_id, area.out, name)
    lk = _LOOKUPS.get(key)
    if lk is None:
        if len(_LOOKUPS) > 256:
            _LOOKUPS.clear()
        lk = _open(area, name, size, budget)
        _LOOKUPS[key] = lk
    return lk


def _open(area, name: str, size: int, budget: int) -> Lookup:
    temp, stem = area.temp(), f"vocab-{name}"
    long = None
    if size and temp.exists(f"{stem}.le"):
        long = LongLookup(*(_local(temp, f"{stem}.{x}") for x in ("lv", "le", "lc")), budget)
        size -= long.size
    lk = _open_short(area, temp, stem, budget, name, size)
    lk.long = long
    return lk


def _open_short(area, temp, stem: str, budget: int, name: str, size: int) -> Lookup:
    if not size:
        return Lookup(np.zeros(0, "S1"))
    if temp.exists(f"{stem}.skeys"):
        nbytes, width = table_bytes(size), 0
    else:  # values longer than 8 bytes: a sorted copy in memory, 8 bytes of id beside each
        width = os.path.getsize(_local(temp, f"{stem}.svals")) // size
        nbytes = size * (width + 8)
    if nbytes <= budget:
        ids = area.get_array(f"{stem}.sids", np.uint32)
        if not width:
            return Lookup.of_table(area.get_array(f"{stem}.skeys", np.uint64), ids)
        return Lookup.of_sorted(np.fromfile(_local(temp, f"{stem}.svals"), f"S{width}"), ids)
    log.debug("%s: %d values, %s in memory past its %s: looked up in its sorted table on disk",
              name, size, format_size(nbytes), format_size(budget))
    keys = f"{stem}.svals" if width else f"{stem}.skeys"
    return Lookup.of_disk(DiskLookup(_local(temp, keys), _local(temp, f"{stem}.sids"), budget, width))


def _local(temp, name: str) -> str:
    """A local path of a temporary file: in place on a local disk, else fetched once per process."""
    path = temp.local_path(name)
    if path is not None:
        return path
    url = f"{temp.url}/{name}"
    if url not in _FETCHED:
        import atexit
        import shutil
        import tempfile

        d = tempfile.mkdtemp(prefix="tfpipe-lookup-")
        atexit.register(shutil.rmtree, d, True)
        temp.fetch(name, os.path.join(d, name))
        _FETCHED[url] = os.path.join(d, name)
    return _FETCHED[url]
