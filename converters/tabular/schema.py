"""A table's columns and their roles: ``label``, ``numeric`` (integer counts) or ``categorical`` (strings), plus
``ignore`` for columns read but not converted.

``CRITEO`` is built in: ``label``, ``I1``..``I13`` (numeric), ``C1``..``C26`` (categorical), in that order. Other
tables name their columns' roles in a small JSON file (``--schema FILE``)::

    {"columns": [{"name": "clicked", "role": "label"},
                 {"name": "age", "role": "numeric"},
                 {"name": "country", "role": "categorical"}]}

Headerless text is read by position (the i-th field is the i-th column); a CSV with a header and Parquet are
read by name, without regard to case (the columns may be in any order; other columns are ignored), so two
columns of a schema may not differ only in case."""
from __future__ import annotations

import json
import os
import unicodedata
from dataclasses import dataclass

from ..storage.base import TMP_PREFIX
from ..util.errors import TfpipeError

__all__ = ["Column", "TableSchema", "CRITEO", "ROLES", "FORMATS", "load_schema"]

ROLES = ("label", "numeric", "categorical", "ignore")
FORMATS = ("tsv", "csv", "parquet")  # how an input is read (``--format``; by default its suffix or first line)


@dataclass(frozen=True)
class Column:
    name: str
    role: str

    def __post_init__(self):
        if (not isinstance(self.name, str) or not self.name or "/" in self.name or "\\" in self.name
                or any(unicodedata.category(c).startswith("C") for c in self.name)):
            raise ValueError(f"a column name is a non-empty string without / \\ or control characters (it names "
                             f"its vocabulary file), got {self.name!r}")
        if self.name.startswith(TMP_PREFIX):
            raise ValueError(f"column {self.name!r}: a column name may not start with {TMP_PREFIX!r} (tfpipe's "
                             "temporary names; it names the column's vocabulary file)")
        if self.role not in ROLES:
            raise ValueError(f"column {self.name!r}: role must be one of {ROLES}, got {self.role!r}")


@dataclass(frozen=True)
class TableSchema:
    """The columns in input order; exactly one label, at least one numeric or categorical column."""

    name: str
    columns: tuple[Column, ...]

    def __post_init__(self):
        object.__setattr__(self, "columns", tuple(self.columns))
        names = [c.name.lower() for c in self.columns]  # headers are matched without regard to case
        dup = sorted({c.name for c in self.columns if names.count(c.name.lower()) > 1})
        if dup:
            raise ValueError(f"schema {self.name!r}: duplicate column names {dup} (names are matched without "
                             "regard to case)")
        labels = [c.name for c in self.columns if c.role == "label"]
        if len(labels) != 1:
            raise ValueError(f"schema {self.name!r}: exactly one label column, got {labels}")
        if not self.numeric and not self.categorical:
            raise ValueError(f"schema {self.name!r}: no numeric or categorical column")

    def _of(self, role: str) -> tuple[str, ...]:
        return tuple(c.name for c in self.columns if c.role == role)

    @property
    def label(self) -> str:
        return self._of("label")[0]

    @property
    def numeric(self) -> tuple[str, ...]:
        return self._of("numeric")

    @property
    def categorical(self) -> tuple[str, ...]:
        return self._of("categorical")

    def positions(self) -> tuple[int, tuple[int, ...], tuple[int, ...]]:
        """Field positions (headerless text) of the label, the numeric and the categorical columns."""
        pos = {c.name: i for i, c in enumerate(self.columns)}
        return pos[self.label], tuple(pos[n] for n in self.numeric), tuple(pos[n] for n in self.categorical)

    def to_json(self) -> dict:
        return {"name": self.name, "columns": [{"name": c.name, "role": c.role} for c in self.columns]}

    @classmethod
    def from_json(cls, data: dict, name: str = "custom") -> "TableSchema":
        if not isinstance(data, dict) or not isinstance(data.get("columns"), list):
            raise ValueError(f"schema {name!r}: expected an object with a 'columns' list")
        cols = []
        for i, c in enumerate(data["columns"]):
            if not isinstance(c, dict) or set(c) - {"name", "role"}:
                raise ValueError(f"schema {name!r}: column {i} must be {{\"name\": ..., \"role\": ...}}, got {c!r}")
            cols.append(Column(c.get("name"), c.get("role")))
        return cls(str(data.get("name", name)), tuple(cols))


CRITEO = TableSchema("criteo", (Column("label", "label"),
                                *(Column(f"I{i}", "numeric") for i in range(1, 14)),
                                *(Column(f"C{i}", "categorical") for i in range(1, 27))))


def load_schema(spec: str | TableSchema) -> TableSchema:
    """``"criteo"``, a JSON schema file's path, or a ``TableSchema`` as is."""
    if isinstance(spec, TableSchema):
        return spec
    if spec == "criteo":
        return CRITEO
    if not os.path.isfile(str(spec)):
        raise TfpipeError(f"--schema {spec!r}: neither 'criteo' nor a schema file")
    try:
        with open(spec, encoding="utf-8") as fh:
            data = json.load(fh)
        return TableSchema.from_json(data, os.path.basename(str(spec)))
    except (ValueError, json.JSONDecodeError) as exc:
        raise TfpipeError(f"--schema {spec}: {exc}") from None
    except RecursionError:
        raise TfpipeError(f"--schema {spec}: nested too deeply to be a schema file") from None
