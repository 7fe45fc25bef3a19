"""A table's columns found by name (a CSV header, a Parquet file's columns): matched without regard to case
(``Label`` is ``label``), other columns ignored, a column named twice refused; every refusal names the columns
found, the ones missing and ``--schema FILE``."""
from __future__ import annotations

from ..util.errors import InputError
from .schema import TableSchema

__all__ = ["wanted", "missing_columns", "found_missing", "column_index"]


def wanted(schema: TableSchema) -> list[str]:
    """The columns a table read by name must have: every column but the ``ignore`` ones."""
    return [c.name for c in schema.columns if c.role != "ignore"]


def missing_columns(schema: TableSchema, names) -> list[str]:
    """The schema's columns not among ``names`` (matched without regard to case)."""
    low = {n.lower() for n in names}
    return [n for n in wanted(schema) if n.lower() not in low]


def found_missing(names, missing) -> str:
    """``found [...], missing [...]``, the found names capped: what every refusal of a header says."""
    shown = ", ".join(names[:_SHOWN]) + (f", ... ({len(names)} in all)" if len(names) > _SHOWN else "")
    return f"found {shown or 'no columns'}; missing {', '.join(missing)}"


_SHOWN = 45  # names of a header a refusal lists


def column_index(path: str, names, schema: TableSchema, what: str, line: int | None = None) -> dict[str, int]:
    """Each wanted column's index among a header's ``names``, matched without regard to case (``Label`` is
    ``label``); a missing column or one named twice is refused in one line naming the columns found, the
    missing ones and ``--schema FILE``."""
    missing = missing_columns(schema, names)
    if missing:
        raise InputError(f"{what} lacks columns of schema {schema.name!r}: {found_missing(names, missing)}; "
                         "--schema FILE names a table's columns and their roles", path=path, line=line,
                         reason="missing_column")
    at: dict[str, int] = {}
    low = {n.lower(): n for n in wanted(schema)}
    for i, n in enumerate(names):
        key = low.get(n.lower())
        if key is None:
            continue
        if key in at:
            raise InputError(f"{what} names column {key!r} twice (columns {at[key] + 1} and {i + 1}: "
                             f"{names[at[key]]!r}, {n!r}); one of them must go or be renamed", path=path,
                             line=line, reason="duplicate_column")
        at[key] = i
    return at
