"""Parquet tables (pyarrow), read by column name (without regard to case; other columns ignored) in batches.

* The label and the numeric columns: any integer type (unsigned ones included), ``bool``, or a floating type
  holding integral values (what pandas writes for an integer column with gaps). Each value is checked like
  text: past int64 (a ``uint64`` of 2**63 or more, an integral float out of range, an infinity) is
  ``int64_overflow``, a fractional float ``not_an_integer``; a null or NaN count is missing; a label other than
  0/1 (null included) is ``bad_label``. Each named by file and row.
* Categorical columns: ``binary`` (and large/fixed-size binary) as their bytes (non-UTF-8 bytes included),
  ``string`` as its UTF-8 bytes, a dictionary column by its values, other scalar types (integers, floats, bools,
  decimals, dates, times, timestamps) as the text pyarrow's cast to string gives (``12``, ``1.5``, ``true``,
  ``2024-01-31``); null is missing. A nested column (list, struct, map) is refused in one line naming the file
  and the column, as are two columns whose names differ only in case (or not at all) and a file or page that
  cannot be decoded."""
from __future__ import annotations

from typing import Iterable, Iterator

import numpy as np

from ..shardset.manifest import InputStats
from ..util.errors import InputError
from .header import column_index
from .rows import GATHER_BYTES, Rows, slices
from .schema import TableSchema

__all__ = ["iter_parquet"]

BATCH_ROWS = 1 << 16
_INT64 = float(1 << 63)
OK, NOT_INT, OVERFLOW = 0, 1, 2
_REASON = {NOT_INT: "not_an_integer", OVERFLOW: "int64_overflow"}


def iter_parquet(path: str, schema: TableSchema, stats: InputStats, on_error: str = "raise") -> Iterator[Rows]:
    import pyarrow as pa

    try:
        import pyarrow.parquet as pq

        pf = pq.ParquetFile(path)
        names = list(pf.schema_arrow.names)
    except (OSError, pa.ArrowException) as exc:
        raise InputError(f"cannot read as Parquet: {_one_line(exc)}", path=path, reason="unreadable_file") from None
    at = column_index(path, names, schema, "the Parquet file")
    real = {n: names[i] for n, i in at.items()}  # the schema's name -> the file's spelling
    for name in (schema.label, *schema.numeric):
        _check_count_type(path, name, pf.schema_arrow.field(at[name]).type)
    for name in schema.categorical:
        _check_categorical_type(path, name, pf.schema_arrow.field(at[name]).type)
    first = 1
    batches = pf.iter_batches(BATCH_ROWS, columns=[names[i] for i in sorted(set(at.values()))])
    while True:
        try:
            batch = next(batches, None)
        except (OSError, pa.ArrowException) as exc:
            raise InputError(f"cannot decode the Parquet data after row {first - 1}: {_one_line(exc)}", path=path,
                             reason="unreadable_file") from None
        if batch is None:
            return
        parts = _batch(path, batch, real, schema, stats, on_error, first)
        first += batch.num_rows
        yield from parts


def _batch(path: str, batch, real: dict, schema: TableSchema, stats: InputStats, on_error: str,
           first: int) -> Iterable[Rows]:
    """One batch's good rows (``_sliced``; none when it has none); its bad rows raised or counted."""
    n = batch.num_rows
    stats.records_read += n
    col = {name: batch.column(batch.schema.get_field_index(real[name])) for name in real}
    lv, lmiss, lst = _counts(col[schema.label])
    status = np.where(lmiss | (lst != OK) | ((lv != 0) & (lv != 1)), 3, 0).astype(np.int8)  # 3: bad label
    errcol = np.full(n, -1, np.int64)
    nums = np.zeros((n, len(schema.numeric)), np.int64)
    miss = np.zeros((n, len(schema.numeric)), np.bool_)
    for j, name in enumerate(schema.numeric):
        nums[:, j], miss[:, j], st = _counts(col[name])
        new = (status == OK) & (st != OK)
        status[new] = st[new]
        errcol[new] = j
    bad = np.flatnonzero(status != OK)
    for r in bad[: (1 if on_error == "raise" else len(bad))]:
        reason, msg = _message(int(status[r]), int(errcol[r]), int(r), col, schema)
        if on_error == "raise":
            raise InputError(f"{reason}: {msg}", path=path, line=first + int(r), reason=reason)
        stats.skip(reason, 1, f"{path}:{first + int(r)}: {reason}: {msg}")
    good = np.flatnonzero(status == OK)
    if not good.size:
        return ()
    return _sliced(first, good, lv.astype(np.int8), nums, miss, [_binary(col[name]) for name in schema.categorical])


def _sliced(first: int, good: np.ndarray, labels, nums, miss, cats: list) -> Iterator[Rows]:
    """The ``good`` rows of a batch, cut as the text reader cuts a block (``rows.slices``) where the categorical
    columns' long values would make their bytes arrays much larger than their bytes, each slice's arrays made as
    it is iterated: a long value costs its own length, not the batch's rows times it."""
    import pyarrow as pa
    import pyarrow.compute as pc

    lens = np.stack([pc.binary_length(c).to_numpy(zero_copy_only=False) for c in cats], axis=1)[good] \
        if cats else np.zeros((good.size, 0), np.int64)
    long = [j for j in range(len(cats)) if int(lens[:, j].max()) > 8]
    parts = slices(good, lens[:, long].max(axis=1) * len(long), max(GATHER_BYTES, 4 * int(lens[:, long].sum()))) \
        if long else [good]
    for part in parts:
        at = pa.array(part)
        values = [c.take(at).to_pylist() for c in cats]
        yield Rows(first + part.astype(np.int64), labels[part], nums[part], miss[part],
                   [np.array(v, dtype="S") if v else np.zeros(0, "S1") for v in values])


def _message(status: int, j: int, r: int, col: dict, schema: TableSchema) -> tuple[str, str]:
    from ..util.excerpt import excerpt

    if status == 3:
        value = col[schema.label][r].as_py()
        return "bad_label", f"label {'null' if value is None else excerpt(str(value).encode())} is not 0 or 1"
    name = schema.numeric[j]
    text = excerpt(str(col[name][r].as_py()).encode())
    what = "is out of the int64 range" if status == OVERFLOW else "is not an integer"
    return _REASON[status], f"column {name}: {text} {what}"


def _counts(column) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """A count column's int64 values, its missing mask (null, NaN) and each value's status (``OK``,
    ``NOT_INT``, ``OVERFLOW``), every integer type checked against int64's range."""
    import pyarrow as pa

    t = column.type
    n = len(column)
    miss = np.asarray(column.is_null().to_numpy(zero_copy_only=False), np.bool_)
    status = np.zeros(n, np.int8)
    if pa.types.is_boolean(t):
        column, t = column.cast(pa.int8()), pa.int8()
    if pa.types.is_integer(t):
        raw = column.fill_null(0).to_numpy(zero_copy_only=False)
        if t == pa.uint64():
            over = raw > np.uint64((1 << 63) - 1)
            status[over] = OVERFLOW
            return np.where(over, 0, raw).astype(np.int64), miss, status
        return raw.astype(np.int64), miss, status
    a = np.asarray(column.cast(pa.float64()).fill_null(0.0).to_numpy(zero_copy_only=False), np.float64)
    miss |= np.isnan(a)
    a = np.where(miss, 0.0, a)
    over = ~np.isfinite(a) | (a >= _INT64) | (a < -_INT64)
    frac = ~over & (a != np.floor(np.where(over, 0.0, a)))
    status[over] = OVERFLOW
    status[frac] = NOT_INT
    return np.where(over | frac, 0.0, a).astype(np.int64), miss, status


def _check_count_type(path: str, name: str, t) -> None:
    import pyarrow as pa

    if not (pa.types.is_integer(t) or pa.types.is_boolean(t) or pa.types.is_floating(t)):
        raise InputError(f"column {name} is {t}: the label and the numeric columns are integer (or integral "
                         "float) columns", path=path, reason="not_an_integer")


def _check_categorical_type(path: str, name: str, t) -> None:
    import pyarrow as pa

    value = t.value_type if pa.types.is_dictionary(t) else t
    if pa.types.is_nested(value) or isinstance(value, pa.ExtensionType):
        raise InputError(f"column {name} is {t}: a categorical column holds one scalar value per row (strings, "
                         "bytes, numbers, dates), not lists, structs or maps", path=path, reason="unreadable_column")


def _binary(column):
    """A categorical column's values as a pyarrow ``large_binary`` array, by the module's rule; null: ``b""``."""
    import pyarrow as pa
    import pyarrow.compute as pc

    t = column.type
    if pa.types.is_dictionary(t):
        column, t = column.cast(t.value_type), t.value_type
    if not (pa.types.is_binary(t) or pa.types.is_large_binary(t) or pa.types.is_fixed_size_binary(t)
            or pa.types.is_string(t) or pa.types.is_large_string(t)):
        column = pc.cast(column, pa.string())
    return pc.cast(column, pa.large_binary()).fill_null(b"")  # bytes as they are: no UTF-8 check


def _one_line(exc: BaseException) -> str:
    return " ".join(str(exc).split()) or type(exc).__name__
