"""The cache policy of a pipeline (pure): memory, a file, or none, and why; and applying it to a dataset."""
from __future__ import annotations

from converters.util.system import total_memory
from converters.util.units import format_size

from ..spec.pipelinespec import PipelineSpecBase

__all__ = ["choose_cache", "cache_dataset", "total_memory", "MEMORY_CACHE_FRACTION"]

MEMORY_CACHE_FRACTION = 0.25      # memory cache only for data under 25% of RAM


def choose_cache(spec: PipelineSpecBase) -> tuple[str, str | None, str]:
    """(policy "memory"|"file"|"none", file path or None, why)."""
    if spec.mode == "pipe":
        return "none", None, "Pipe mode streams every epoch from a new FIFO"
    if spec.cache == "none":
        return "none", None, "asked for (cache='none')"
    if spec.cache == "memory":
        return "memory", None, "asked for (cache='memory')"
    if spec.cache.startswith("file:"):
        path = spec.cache[5:]
        if spec.num_shards > 1:  # ranks on one host must not share a cache file
            path = f"{path}.{spec.shard_index}-of-{spec.num_shards}"
        return "file", path, "asked for (cache='file:PATH'; one file per rank when sharded)"
    if spec.epochs == 1:
        return "none", None, "one epoch: a cache would be filled once and never read back"
    if not spec.total_bytes:
        return "none", None, "dataset size unknown"
    data = spec.total_bytes // (spec.num_shards if spec.num_shards > 1 else 1)
    ram = spec.memory_bytes or total_memory()
    limit = int(ram * MEMORY_CACHE_FRACTION)
    if data < limit:
        return "memory", None, (f"dataset {format_size(data)} < {MEMORY_CACHE_FRACTION:.0%} of RAM "
                                f"({format_size(ram)})")
    return "none", None, (f"dataset {format_size(data)} ≥ {MEMORY_CACHE_FRACTION:.0%} of RAM ({format_size(ram)}): "
                          f"a memory cache could exhaust RAM; re-read from disk (or cache='file:PATH')")


def cache_dataset(ds, spec: PipelineSpecBase, suffix: str = ""):
    """``ds`` cached as ``choose_cache`` decides (a file cache's path gets ``suffix``)."""
    policy, path, _ = choose_cache(spec)
    if policy == "memory":
        return ds.cache()
    if policy == "file":
        return ds.cache(path + suffix)
    return ds
