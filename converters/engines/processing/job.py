"""The conversion a Processing job runs: a ``ConvertJob`` (format name, inputs, output, the validated options
object and the local engine's knobs; parsed from ``convert FORMAT ...`` by ``converters.cli.convert_argv``), and
``convert_part``, which runs the format's local converter on some of the inputs (one instance's share) into a
location of the work area. Formats are looked up by name in ``converters.registry``."""
from __future__ import annotations

import os
from dataclasses import dataclass, replace
from typing import Any, Sequence

from converters import registry
from converters.shardset.manifest import Manifest
from converters.util.errors import TfpipeError

__all__ = ["ConvertJob", "convert_part", "input_files"]


@dataclass(frozen=True)
class ConvertJob:
    """One ``tfpipe convert`` command: ``format`` a registered format's name, ``options`` its options object."""

    format: str
    argv: tuple[str, ...]
    inputs: tuple[str, ...]
    out: str
    options: Any
    workers: int | None = None
    overwrite: bool = False
    prep: Any = None  # converters.prep.PrepOptions: write-time shuffle, balance, split by label

    def __post_init__(self):
        registry.get(self.format)  # an unknown name is a ValueError listing the known ones
        if not self.inputs:
            raise ValueError("a conversion needs at least one input")

    @property
    def kind(self) -> str:
        return self.format

    @property
    def fmt(self) -> registry.Format:
        """The format (``converters.registry``)."""
        return registry.get(self.format)

    def with_options(self, **changes) -> "ConvertJob":
        """The same job with some options changed (e.g. the index base decided over all instances)."""
        return replace(self, options=replace(self.options, **changes))


def convert_part(job: ConvertJob, files: Sequence[str], out: str) -> Manifest:
    """Convert ``files`` (this instance's share of the inputs) into a complete shard set at ``out`` with the
    job's options, replacing whatever an earlier attempt left there; inputs without a valid record give a
    manifest with no shard (their accounting still counts)."""
    if not files:
        raise TfpipeError("convert_part needs at least one file")
    return job.fmt.part(files, out, job.options, workers=job.workers)


def input_files(job: ConvertJob, *, allow_empty_dirs: bool) -> list[str]:
    """The job's inputs expanded into files as the local converter expands them; with ``allow_empty_dirs``
    an existing directory that holds no input file counts as none (an instance of a ShardedByS3Key job may
    get no object)."""
    from converters.sources import expand_inputs

    suffixes = job.fmt.suffixes
    files: list[str] = []
    seen: set[str] = set()
    for item in job.inputs:
        if allow_empty_dirs and os.path.isdir(item) and not _has_files(item):
            continue
        for f in expand_inputs([item], suffixes=suffixes):
            if os.path.abspath(f) not in seen:
                seen.add(os.path.abspath(f))
                files.append(f)
    return files


def _has_files(directory: str) -> bool:
    for _, dirs, names in os.walk(directory):
        dirs[:] = [d for d in dirs if not d.startswith(".")]
        if any(not n.startswith(".") for n in names):
            return True
    return False
