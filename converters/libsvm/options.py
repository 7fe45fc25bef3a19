"""What decides a LibSVM conversion's output: ``ParseOptions`` (how a line becomes a record, the kernel's view)
and ``LibsvmOptions`` (everything recorded in the manifest: parsing, feature names and the shared
``ShardOutputOptions``), plus the feature schema they imply."""
from __future__ import annotations

from dataclasses import dataclass, field

from ..shardset.options import ShardOutputOptions
from ..tfrecord.schema import FeatureSpec, Schema

__all__ = ["ParseOptions", "LibsvmOptions", "libsvm_schema", "INDEX_BASES"]

INDEX_BASES = ("auto", 0, 1)
_INT64_MAX = (1 << 63) - 1


def _check_field_size(v) -> None:
    if not isinstance(v, int) or isinstance(v, bool) or v <= 0:
        raise ValueError(f"field_size must be a positive integer, got {v!r}")


def _check_max_index(v) -> None:
    if v is not None and (not isinstance(v, int) or isinstance(v, bool) or v < 0):
        raise ValueError(f"max_index must be a non-negative integer or None, got {v!r}")


@dataclass(frozen=True)
class ParseOptions:
    """How lines become records. ``index_base`` is 0 or 1 here (``auto`` is decided by the caller over all
    inputs with ``min_index``). ``max_index`` bounds indices as written in the file."""

    field_size: int
    index_base: int = 1
    pad: bool = False
    truncate: bool = False
    allow_nonfinite: bool = False
    max_index: int | None = None

    def __post_init__(self):
        _check_field_size(self.field_size)
        if self.index_base not in (0, 1) or isinstance(self.index_base, bool):
            raise ValueError(f"index_base must be 0 or 1 here, got {self.index_base!r}")
        _check_max_index(self.max_index)

    @property
    def kernel_max_index(self) -> int:
        """``max_index`` as the kernel takes it: -1 for no bound."""
        return -1 if self.max_index is None else min(self.max_index, _INT64_MAX)


@dataclass(frozen=True)
class LibsvmOptions:
    """Everything that decides the output bytes of a LibSVM conversion (validated; bad values named).

    ``index_base`` is ``"auto"`` (decided over all inputs: zero-based if any index 0 appears anywhere),
    0 or 1. ``output`` holds the options every converter shares (shard size, compression, prefix, on-error).
    """

    field_size: int
    index_base: str | int = "auto"
    pad: bool = False
    truncate: bool = False
    allow_nonfinite: bool = False
    max_index: int | None = None
    label_key: str = "label"
    ids_key: str = "ids"
    values_key: str = "values"
    output: ShardOutputOptions = field(default_factory=ShardOutputOptions)

    def __post_init__(self):
        _check_field_size(self.field_size)
        base = self.index_base
        if isinstance(base, str) and base in ("0", "1"):
            object.__setattr__(self, "index_base", int(base))
        elif base not in INDEX_BASES or isinstance(base, bool):
            raise ValueError(f"index_base must be 'auto', 0 or 1, got {base!r}")
        _check_max_index(self.max_index)
        for k in self.keys:
            if not isinstance(k, str) or not k:
                raise ValueError(f"feature names must be non-empty strings, got {k!r}")
        if len(set(self.keys)) != 3:
            raise ValueError(f"label/ids/values feature names must differ, got {self.keys}")
        if not isinstance(self.output, ShardOutputOptions):
            raise ValueError(f"output must be a ShardOutputOptions, got {type(self.output).__name__}")

    @property
    def keys(self) -> tuple[str, str, str]:
        return self.label_key, self.ids_key, self.values_key

    @property
    def schema(self) -> Schema:
        return libsvm_schema(self.field_size, *self.keys)

    def parse_options(self, index_base: int) -> ParseOptions:
        """The kernel's options once the index base is known (``auto`` resolved)."""
        return ParseOptions(self.field_size, index_base, self.pad, self.truncate, self.allow_nonfinite,
                            self.max_index)

    def to_json(self) -> dict:
        """The manifest's ``options``: one flat dict (parsing, names and the shard-output options)."""
        own = {k: getattr(self, k) for k in ("field_size", "index_base", "pad", "truncate", "allow_nonfinite",
                                              "max_index", "label_key", "ids_key", "values_key")}
        return {**own, **self.output.to_json()}


def libsvm_schema(field_size: int, label: str = "label", ids: str = "ids", values: str = "values") -> Schema:
    """The fixed-width LibSVM schema: float32 label, int64 ids[field_size], float32 values[field_size]."""
    return Schema((FeatureSpec(label, "float32"), FeatureSpec(ids, "int64", (field_size,)),
                   FeatureSpec(values, "float32", (field_size,))), label=label)
