"""What decides a LibSVM conversion's output: ``ParseOptions`` (how a line becomes a record, the kernel's view)
and ``LibsvmOptions`` (everything recorded in the manifest: parsing, feature names and the shared
``ShardOutputOptions``), plus the feature schema they imply.

Two layouts: fixed width (``field_size`` pairs per line: ``ids``/``values`` of shape ``[field_size]``) and
sparse (``sparse=True``: any number of pairs per line, ``ids``/``values`` of variable length, optionally a
multi-label ``label`` list and a ``qid``).

How ids are read differs by layout. Fixed width is positional (Criteo/DeepFM): the ids of a line are the
feature ids of ``field_size`` fields, kept as written (index base ``asis``: no shift), in line order, repeats
kept; ``strict_ids=True`` applies scikit-learn's rules instead (sorted, unique). Sparse mode is scikit-learn's
sparse vector: sorted unique indices, one-based shifted to zero-based (index base ``auto`` by default)."""
from __future__ import annotations

from dataclasses import dataclass, field

from ..util.checks import as_int, is_integral, set_int
from ..shardset.options import ShardOutputOptions
from ..tfrecord.schema import FeatureSpec, Schema

__all__ = ["ParseOptions", "LibsvmOptions", "libsvm_schema", "INDEX_BASES", "ids_interpretation", "SPARSE_COLUMNAR"]

INDEX_BASES = ("asis", "auto", 0, 1)
_INT64_MAX = (1 << 63) - 1
SPARSE_COLUMNAR = ("--layout columnar holds fixed-width rows only: --sparse rows have variable length (write them "
                   "with --layout example, or give --field-size N with --pad/--truncate)")


def _check_layout(field_size, sparse, pad, truncate, multilabel, keep_qid) -> None:
    """Exactly one of ``field_size`` / ``sparse``; the options of the other layout are refused, naming them."""
    for name, v in (("sparse", sparse), ("pad", pad), ("truncate", truncate), ("multilabel", multilabel),
                    ("keep_qid", keep_qid)):
        if not isinstance(v, bool):
            raise ValueError(f"{name} must be True or False, got {v!r}")
    if sparse:
        if field_size is not None:
            raise ValueError(f"sparse rows have any number of pairs: give field_size=None, got {field_size!r}")
        if pad or truncate:
            raise ValueError("pad/truncate apply to fixed-width rows (field_size), not to sparse=True")
        return
    if field_size is None:
        raise ValueError("give field_size (pairs per line) or sparse=True (any number of pairs per line)")
    as_int(field_size, "field_size", minimum=1)
    if multilabel or keep_qid:
        raise ValueError(f"{'multilabel' if multilabel else 'keep_qid'} needs sparse=True (variable-length rows)")


def _check_counts(options) -> None:
    """``field_size`` and ``max_index`` (any integral type) stored as plain ints."""
    if options.field_size is not None:
        set_int(options, "field_size", minimum=1)
    set_int(options, "max_index", minimum=0, none=True)


@dataclass(frozen=True)
class ParseOptions:
    """How lines become records. ``index_base`` is 0 or 1 here (``auto`` is decided by the caller over all
    inputs with ``min_index``; ``asis`` is 0: no shift, index 0 allowed). ``max_index`` bounds indices as written
    in the file. ``field_size`` for fixed-width rows, or ``sparse=True`` (then ``multilabel`` and ``keep_qid``
    may be set). ``strict_ids``: fixed-width ids must be sorted and unique along a line (scikit-learn's rule,
    else ``unsorted_index``/``duplicate_index``); without it they are positional fields, taken in line order
    with repeats (such rows are counted, not refused). Sparse rows are always strict."""

    field_size: int | None = None
    index_base: int = 1
    pad: bool = False
    truncate: bool = False
    allow_nonfinite: bool = False
    max_index: int | None = None
    sparse: bool = False
    multilabel: bool = False
    keep_qid: bool = False
    strict_ids: bool = False

    def __post_init__(self):
        _check_layout(self.field_size, self.sparse, self.pad, self.truncate, self.multilabel, self.keep_qid)
        if self.index_base not in (0, 1) or not is_integral(self.index_base):
            raise ValueError(f"index_base must be 0 or 1 here, got {self.index_base!r}")
        _check_counts(self)
        if not isinstance(self.strict_ids, bool):
            raise ValueError(f"strict_ids must be True or False, got {self.strict_ids!r}")

    @property
    def kernel_max_index(self) -> int:
        """``max_index`` as the kernel takes it: -1 for no bound."""
        return -1 if self.max_index is None else min(self.max_index, _INT64_MAX)


@dataclass(frozen=True)
class LibsvmOptions:
    """Everything that decides the output bytes of a LibSVM conversion (validated; bad values named).

    ``index_base`` is ``"asis"`` (ids kept as written: no shift), ``"auto"`` (decided over all inputs:
    zero-based if any index 0 appears anywhere, else one-based and shifted down by one), 0 or 1; None (the
    default) is the layout's own: ``asis`` for fixed width (positional fields), ``auto`` for sparse (as
    scikit-learn). ``strict_ids`` (fixed width only): refuse unsorted/repeated ids as scikit-learn does; sparse
    rows are always strict. ``output`` holds the options every converter shares (shard size, compression, prefix,
    on-error). Give ``field_size`` (fixed width) or ``sparse=True``; ``multilabel`` and ``keep_qid`` (feature
    ``qid_key``) go with ``sparse``.
    """

    field_size: int | None = None
    index_base: str | int | None = None
    pad: bool = False
    truncate: bool = False
    allow_nonfinite: bool = False
    max_index: int | None = None
    label_key: str = "label"
    ids_key: str = "ids"
    values_key: str = "values"
    output: ShardOutputOptions = field(default_factory=ShardOutputOptions)
    sparse: bool = False
    multilabel: bool = False
    keep_qid: bool = False
    qid_key: str = "qid"
    strict_ids: bool = False

    def __post_init__(self):
        _check_layout(self.field_size, self.sparse, self.pad, self.truncate, self.multilabel, self.keep_qid)
        base = self.index_base
        if base is None:
            object.__setattr__(self, "index_base", "auto" if self.sparse else "asis")
        elif isinstance(base, str) and base in ("0", "1"):
            object.__setattr__(self, "index_base", int(base))
        elif base not in INDEX_BASES or not (isinstance(base, str) or is_integral(base)):
            raise ValueError(f"index_base must be 'asis', 'auto', 0 or 1, got {base!r}")
        elif is_integral(base):
            object.__setattr__(self, "index_base", int(base))
        if not isinstance(self.strict_ids, bool):
            raise ValueError(f"strict_ids must be True or False, got {self.strict_ids!r}")
        if self.strict_ids and self.sparse:
            raise ValueError("strict_ids applies to fixed-width rows (field_size): sparse rows are always strict")
        _check_counts(self)
        for k in (*self.keys[:3], self.qid_key):
            if not isinstance(k, str) or not k:
                raise ValueError(f"feature names must be non-empty strings, got {k!r}")
        if len(set(self.keys)) != len(self.keys):
            raise ValueError(f"feature names must differ, got {self.keys}")
        if not isinstance(self.output, ShardOutputOptions):
            raise ValueError(f"output must be a ShardOutputOptions, got {type(self.output).__name__}")
        if self.sparse and self.output.columnar:
            raise ValueError(SPARSE_COLUMNAR)

    @property
    def keys(self) -> tuple[str, ...]:
        """Feature names: label, ids, values (and qid with ``keep_qid``)."""
        own = (self.label_key, self.ids_key, self.values_key)
        return (*own, self.qid_key) if self.keep_qid else own

    @property
    def schema(self) -> Schema:
        return libsvm_schema(self.field_size, self.label_key, self.ids_key, self.values_key,
                             multilabel=self.multilabel, qid=self.qid_key if self.keep_qid else None)

    def parse_options(self, index_base: int | str) -> ParseOptions:
        """The kernel's options once the index base is known (``auto`` resolved; ``asis`` is no shift: 0)."""
        return ParseOptions(self.field_size, 0 if index_base == "asis" else index_base, self.pad, self.truncate,
                            self.allow_nonfinite, self.max_index, self.sparse, self.multilabel, self.keep_qid,
                            self.strict_ids)

    def to_json(self) -> dict:
        """The manifest's ``options``: one flat dict (parsing, names and the shard-output options). The sparse
        options appear only for a sparse conversion, ``strict_ids`` only for a fixed-width one."""
        names = ["field_size", "index_base", "pad", "truncate", "allow_nonfinite", "max_index", "label_key",
                 "ids_key", "values_key"]
        names += ["sparse", "multilabel", "keep_qid", "qid_key"] if self.sparse else ["strict_ids"]
        return {**{k: getattr(self, k) for k in names}, **self.output.to_json()}

    def ids_json(self, base: int | str) -> str:
        """How the ids were read, in words, for the manifest (``ids_interpretation``)."""
        return ids_interpretation(self.sparse, self.strict_ids, base)


def ids_interpretation(sparse: bool, strict_ids: bool, base: int | str | None) -> str:
    """The manifest's ``options.ids``: how a conversion read the ids, given the index base it used."""
    how = ("as written" if base in ("asis", 0) else "one-based, shifted to zero-based" if base == 1
           else f"base {base}")
    if sparse:
        return f"sparse vector (sorted, unique; scikit-learn), {how}"
    if strict_ids:
        return f"fixed width, sorted and unique (--strict-ids), {how}"
    return f"positional (line order, repeats kept), {how}"


def libsvm_schema(field_size: int | None, label: str = "label", ids: str = "ids", values: str = "values", *,
                  multilabel: bool = False, qid: str | None = None) -> Schema:
    """The LibSVM schema. Fixed width: float32 label, int64 ids[field_size], float32 values[field_size].
    Sparse (``field_size=None``): variable-length int64 ids and float32 values; the label a float32 scalar, or
    a variable-length float32 list with ``multilabel``; plus an int64 scalar ``qid`` if named."""
    if field_size is None:
        feats = [FeatureSpec(label, "float32", None if multilabel else ()), FeatureSpec(ids, "int64", None),
                 FeatureSpec(values, "float32", None)]
        if qid is not None:
            feats.append(FeatureSpec(qid, "int64"))
        return Schema(tuple(feats), label=label)
    return Schema((FeatureSpec(label, "float32"), FeatureSpec(ids, "int64", (field_size,)),
                   FeatureSpec(values, "float32", (field_size,))), label=label)
