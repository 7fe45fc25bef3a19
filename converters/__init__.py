"""tfpipe converters: raw tabular click logs (Criteo TSV/CSV/Parquet -> DeepFM/DLRM training sets with their
vocabularies), LibSVM and Pile/jsonl text into TFRecord shards with a manifest (``index.json``).

The base layer of tfpipe, in subpackages from the bottom up: ``util`` (errors, units, digests, progress, ...),
``tfrecord`` (framing, CRC32C, Example serialization), ``storage`` (local and S3), ``shardset`` (naming,
manifest, size-bounded atomic writer, reader, verify), ``sources`` (input discovery, compressed streams),
the formats ``tabular``, ``libsvm`` and ``text``, the ``engines`` that run them, and ``cli``. Heavy modules load
on first use of a name below.
"""
from __future__ import annotations

from .shardset.manifest import InputStats, Manifest, ShardInfo
from .shardset.options import ShardOutputOptions
from .tfrecord.schema import FeatureSpec, Schema
from .util.errors import (
    InputError,
    IntegrityError,
    MissingInputError,
    OutputError,
    OutputExistsError,
    OutputInUseError,
    TfpipeError,
)
from .util.lazy import lazy_exports
from .util.units import DEFAULT_SHARD_BYTES, format_size, parse_size
from .util.version import __version__

__all__ = [
    "__version__",
    "convert_libsvm",
    "convert_text",
    "LibsvmOptions",
    "TextOptions",
    "ShardOutputOptions",
    "read_manifest",
    "verify",
    "index_set",
    "Manifest",
    "ShardInfo",
    "InputStats",
    "Schema",
    "FeatureSpec",
    "TfpipeError",
    "InputError",
    "MissingInputError",
    "IntegrityError",
    "OutputExistsError",
    "OutputInUseError",
    "OutputError",
    "DEFAULT_SHARD_BYTES",
    "parse_size",
    "format_size",
]

__getattr__, __dir__ = lazy_exports(__name__, {
    "convert_libsvm": ".libsvm.convert", "LibsvmOptions": ".libsvm.options",
    "convert_text": ".text.convert", "TextOptions": ".text.options",
    "read_manifest": ".shardset.reader", "verify": ".shardset.verify", "index_set": ".shardset.index",
}, globals())
