"""What a shard set's files are: the one place that knows. A set is its shards, the files its manifest keeps
beside them (``extra.files``: a tabular set's vocabularies ``vocab/<column>.txt``), a group's part manifests
and ``index.json`` itself. Every command that copies, moves, rewrites or publishes a set (upload, download,
reshard, ``--overwrite``, the Processing finalizer) asks here instead of listing shards.

Pure: names, sizes and sha256 from the manifest, no I/O."""
from __future__ import annotations

from dataclasses import dataclass

from .manifest import MANIFEST_NAME, Manifest

__all__ = ["SetFile", "set_files", "side_files_of", "listed_names", "side_dirs"]


@dataclass(frozen=True)
class SetFile:
    """One file of a set, as its manifest lists it: ``name`` relative to the set's location, its ``bytes`` and
    ``sha256``; ``side``: a file kept beside the shards (carried as it is by a command that rewrites the
    shards), else a shard."""

    name: str
    bytes: int
    sha256: str
    side: bool = False

    def __post_init__(self):
        if not self.name or self.bytes < 0:
            raise ValueError(f"a set's file needs a name and bytes >= 0, got {self.name!r} ({self.bytes})")


def side_files_of(manifest: Manifest) -> list[SetFile]:
    """The files the set keeps beside its shards (``extra.files``, checked when the manifest was read)."""
    entries = (manifest.extra or {}).get("files") or ()
    return [SetFile(e["name"], e["bytes"], e["sha256"], side=True) for e in entries]


def set_files(manifest: Manifest) -> list[SetFile]:
    """Every data file of the set: its shards in manifest order, then its side files."""
    return [SetFile(s.name, s.bytes, s.sha256) for s in manifest.shards] + side_files_of(manifest)


def listed_names(manifest: Manifest) -> list[str]:
    """Every name the set's manifest accounts for, relative to its location: ``index.json``, a group's part
    manifests, the shards and the side files."""
    return ([MANIFEST_NAME] + [f"{p.path}/{MANIFEST_NAME}" for p in manifest.parts]
            + [f.name for f in set_files(manifest)])


def side_dirs(names) -> list[str]:
    """The top-level folders that hold side files among ``names`` (``vocab`` for ``vocab/C1.txt``)."""
    return list(dict.fromkeys(n.split("/")[0] for n in names if "/" in n))
