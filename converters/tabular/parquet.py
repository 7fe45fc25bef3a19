"""Parquet tables (pyarrow), read by column name in batches: the label and the numeric columns must be integer
columns (a null numeric value is missing; a label other than 0/1, null included, is bad input named by file and
row), categorical columns of any type are read as their string bytes (null: missing)."""
from __future__ import annotations

from typing import Iterator

import numpy as np

from ..shardset.manifest import InputStats
from ..util.errors import InputError
from .rows import Rows
from .schema import TableSchema

__all__ = ["iter_parquet"]

BATCH_ROWS = 1 << 16


def iter_parquet(path: str, schema: TableSchema, stats: InputStats, on_error: str = "raise") -> Iterator:
    import pyarrow as pa
    import pyarrow.compute as pc
    import pyarrow.parquet as pq

    try:
        pf = pq.ParquetFile(path)
    except (OSError, pa.ArrowInvalid) as exc:
        raise InputError(f"cannot read as Parquet: {exc}", path=path, reason="unreadable_file") from None
    names = set(pf.schema_arrow.names)
    missing = [c.name for c in schema.columns if c.role != "ignore" and c.name not in names]
    if missing:
        raise InputError(f"no column {', '.join(missing)} of schema {schema.name!r}", path=path,
                         reason="missing_column")
    for name in (schema.label, *schema.numeric):
        t = pf.schema_arrow.field(name).type
        if not pa.types.is_integer(t):
            raise InputError(f"column {name} is {t}, not an integer column", path=path, reason="not_an_integer")
    first = 1
    wanted = [schema.label, *schema.numeric, *schema.categorical]
    for batch in pf.iter_batches(BATCH_ROWS, columns=wanted):
        n = batch.num_rows
        lab = batch.column(schema.label)
        lv = np.asarray(lab.fill_null(-1).to_numpy(zero_copy_only=False), np.int64)
        bad = np.flatnonzero((lv != 0) & (lv != 1))
        stats.records_read += n
        for r in bad[: (1 if on_error == "raise" else len(bad))]:
            text = "null" if lab[int(r)].as_py() is None else str(lv[r])
            msg = f"label {text} is not 0 or 1"
            if on_error == "raise":
                raise InputError(f"bad_label: {msg}", path=path, line=first + int(r), reason="bad_label")
            stats.skip("bad_label", 1, f"{path}:{first + int(r)}: bad_label: {msg}")
        good = np.ones(n, np.bool_)
        good[bad] = False
        nums = np.zeros((n, len(schema.numeric)), np.int64)
        miss = np.zeros((n, len(schema.numeric)), np.bool_)
        for j, name in enumerate(schema.numeric):
            col = batch.column(name)
            miss[:, j] = np.asarray(col.is_null().to_numpy(zero_copy_only=False), np.bool_)
            nums[:, j] = np.asarray(col.fill_null(0).to_numpy(zero_copy_only=False), np.int64)
        cats = []
        for name in schema.categorical:
            col = pc.cast(batch.column(name), pa.string()).fill_null("")
            values = pc.cast(col, pa.binary()).to_pylist()
            arr = np.array(values, dtype="S") if values else np.zeros(0, "S1")
            cats.append(arr[good])
        lines = first + np.flatnonzero(good).astype(np.int64)
        first += n
        if lines.size:
            yield Rows(lines, lv[good].astype(np.int8), nums[good], miss[good], cats)
