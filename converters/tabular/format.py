"""The tabular format (Criteo-style TSV, CSV with a header, Parquet -> DeepFM / DLRM inputs), as the registry
(``converters.registry``) knows it. Importing this module imports nothing heavy."""
from __future__ import annotations

from ..registry import Format

__all__ = ["FORMAT", "TabularFormat"]


class TabularFormat(Format):
    name = "tabular"
    summary = "tab-separated/CSV/Parquet tables (Criteo) -> DeepFM ids/values or DLRM dense/sparse with vocabularies"
    options = "converters.tabular.options:TabularOptions"
    convert = "converters.tabular.convert:run"
    job = "converters.tabular.job:TabularJob"
    cli = "converters.cli.tabular"
    suffixes = None  # every file of a directory is an input (Criteo's day_0 .. day_23 have no suffix)
    extras = ("s3",)
    reasons = ("wrong_field_count", "not_an_integer", "int64_overflow", "bad_label", "line_too_long")
    routine = ("sampled_out",)
    layouts = ("example", "columnar")
    types_before_data = False
    one_job_when_sharded = True


FORMAT = TabularFormat()
