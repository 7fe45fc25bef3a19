"""tfpipe converters: LibSVM and Pile/jsonl text into TFRecord shards with a manifest (``index.json``)."""
from __future__ import annotations

__version__ = "0.1.0"

from .errors import InputError, IntegrityError, OutputExistsError, TfpipeError
from .schema import FeatureSpec, Schema
from .manifest import InputStats, Manifest, ShardInfo, read_manifest
from .units import DEFAULT_SHARD_BYTES, format_size, parse_size

__all__ = [
    "__version__",
    "convert_libsvm",
    "convert_text",
    "read_manifest",
    "verify",
    "Manifest",
    "ShardInfo",
    "InputStats",
    "Schema",
    "FeatureSpec",
    "TfpipeError",
    "InputError",
    "IntegrityError",
    "OutputExistsError",
    "DEFAULT_SHARD_BYTES",
    "parse_size",
    "format_size",
]


def __getattr__(name):  # lazy: heavy converter modules load on first use
    if name == "convert_libsvm":
        from .libsvm_convert import convert_libsvm
        return convert_libsvm
    if name == "convert_text":
        from .text_convert import convert_text
        return convert_text
    if name == "verify":
        from .verify import verify
        return verify
    raise AttributeError(f"module 'converters' has no attribute {name!r}")
