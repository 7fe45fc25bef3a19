"""Rewrite a shard set into N record-balanced shards (or shards of a target size), with a new manifest.

Use it to make the shard count divisible by hosts x workers (file sharding, ShardedByS3Key). Records are
copied in order with their TFRecord framing as it is (CRC-checked on the way by the converters' scan kernel,
never re-serialized); shard i of N gets records ``[i*R//N, (i+1)*R//N)``.

``layout`` re-lays the rows (``sharding.relayout``): example to columnar and back, or columnar with another
block size; a columnar source or output is always re-encoded (its shards hold blocks of rows), shard i of N
then gets blocks ``[i*B//N, (i+1)*B//N)`` of the B blocks, so every block is full but a shard's last.

The files the set keeps beside its shards (``shardset.setfiles``: a tabular set's vocabularies) are copied as
they are, checked against the manifest, and listed again by the new one.
"""
from __future__ import annotations

import contextlib
import logging
import os
import shutil
import tempfile
from typing import Iterator

import numpy as np

from converters.prep.shuffle import WriteShuffleOptions, ShuffleSink
from converters.shardset.layoutopts import LayoutOptions
from converters.shardset.links import check_no_links
from converters.shardset.manifest import Manifest
from converters.shardset.naming import ShardName
from converters.shardset.options import ShardOutputOptions
from converters.shardset.overlap import check_disjoint
from converters.shardset.reader import check_file, read_manifest_raw
from converters.shardset.setfiles import set_files, side_files_of
from converters.shardset.writer import ShardSetWriter
from converters.storage import is_s3, open_storage
from converters.tfrecord.layout import COLUMNAR, DEFAULT_BLOCK_ROWS, EXAMPLE_LAYOUT, RecordLayout
from converters.tfrecord.reader import iter_framed
from converters.util.errors import IntegrityError, TfpipeError
from converters.util.progress import progress_bar

from .relayout import ColumnarSink, as_examples, columnar_layout

__all__ = ["reshard", "balanced_bounds"]

log = logging.getLogger(__name__)

_NO_SIZE_LIMIT = 1 << 62


def balanced_bounds(records: int, num_shards: int) -> list[int]:
    """Pure: record boundaries of ``num_shards`` shards differing by at most one record."""
    return [i * records // num_shards for i in range(num_shards + 1)]


def _batches(manifest: Manifest, storage_options: dict) -> Iterator[tuple[np.ndarray, np.ndarray]]:
    """The source's rows as framed example records, shard by shard, each shard checked against the manifest (a
    columnar source's blocks decoded, ``relayout.as_examples``)."""
    source = open_storage(manifest.location, **storage_options)
    staging = tempfile.mkdtemp(prefix="tfpipe-reshard-")
    try:
        for info in manifest.shards:
            path = source.local_path(info.name)
            if path is None:
                path = os.path.join(staging, info.name.replace("/", "__"))  # a group: "label=<v>/<shard>"
                source.fetch(info.name, path)
            check_file(path, info, manifest.location.rstrip("/"))  # what is copied is what the manifest lists
            n = records = 0
            for framed, lengths in iter_framed(path):
                records += len(lengths)
                framed, lengths = as_examples(framed, lengths, manifest, f"{manifest.location}/{info.name}",
                                              records - len(lengths))
                n += len(lengths)
                yield framed, lengths
            if n != info.records:
                raise IntegrityError(f"{manifest.location}/{info.name}: {n} records read, manifest says "
                                     f"{info.records} (run `tfpipe verify`)")
            if path.startswith(staging):
                os.unlink(path)
    finally:
        shutil.rmtree(staging, ignore_errors=True)


class _Bounded:
    """A writer that starts a new shard at given record boundaries (``--num-shards``: record-balanced)."""

    def __init__(self, writer: ShardSetWriter, bounds: list[int] | None):
        self.writer, self.bounds, self.written, self.shard = writer, bounds, 0, 0

    def write(self, framed, lengths, rows=None) -> None:
        offsets = np.zeros(len(lengths) + 1, dtype=np.int64)
        np.cumsum(lengths, out=offsets[1:])
        i, n = 0, len(lengths)
        while i < n:
            take = n - i if self.bounds is None else min(n - i, self.bounds[self.shard + 1] - self.written)
            self.writer.write(framed[offsets[i]:offsets[i + take]], lengths[i:i + take],
                              None if rows is None else rows[i:i + take])
            i += take
            self.written += take
            if (self.bounds is not None and self.written == self.bounds[self.shard + 1]
                    and self.shard < len(self.bounds) - 2):
                self.writer.close_shard()
                self.shard += 1

    def shard_records(self) -> list[int]:
        return self.writer.shard_records()


def reshard(src: str, out: str, num_shards: int | None = None, shard_size: int | None = None, *,
            overwrite: bool = False, progress: bool = False, prefix: str | None = None,
            compression: str | None = "same", endpoint_url: str | None = None,
            shuffle: WriteShuffleOptions | None = None, layout: str = "same",
            block_rows: int | None = None) -> Manifest:
    """Rewrite the shard set at ``src`` into ``out`` with exactly ``num_shards`` record-balanced shards, or
    with shards cut before ``shard_size`` bytes. Schema, kind, inputs and extra totals carry over; options
    gain ``reshard``. ``compression="same"`` keeps the source's. ``shuffle``: a global shuffle of the records
    on the way (``converters.prep.shuffle``: bounded memory, deterministic for the seed). ``layout``:
    ``"same"`` (the source's), ``"example"`` or ``"columnar"`` (blocks of ``block_rows`` rows; default the
    source's block size, else ``DEFAULT_BLOCK_ROWS``), see ``sharding.relayout``."""
    if (num_shards is None) == (shard_size is None):
        raise ValueError("give exactly one of num_shards and shard_size")
    if num_shards is not None and (not isinstance(num_shards, int) or num_shards < 1):
        raise ValueError(f"num_shards must be a positive integer, got {num_shards!r}")
    if shard_size is not None and shard_size < 1:
        raise ValueError(f"shard_size must be positive, got {shard_size!r}")
    if layout != "same":
        LayoutOptions(layout)  # a bad name fails before anything is read
    opts = {"endpoint_url": endpoint_url} if endpoint_url else {}
    src_opts = opts if is_s3(src) else {}
    # before anything is read or claimed: the output inside the source (a group's own part), the source inside
    # the output (a part into its group), the same location, or a part of another group
    check_disjoint(str(out), [str(src)], what="source set", **(opts if is_s3(out) else {}))
    manifest, _ = read_manifest_raw(src, **src_opts)
    check_no_links(open_storage(manifest.location, **src_opts), [f.name for f in set_files(manifest)],
                   manifest.location)  # the set's own files only
    R = manifest.records
    target = _target(manifest, layout, block_rows, lambda: _batches(manifest, src_opts))
    units = -(-R // target.block_rows) if target.columnar else R  # what a shard holds: blocks or rows
    if num_shards is not None and num_shards > units:
        raise TfpipeError(f"cannot make {num_shards} non-empty shards from {R} records"
                          + (f" in {units} blocks of {target.block_rows}: choose a smaller --block-rows"
                             if target.columnar else ""))
    if prefix is None:
        prefix = _prefix_of(manifest.shards[0].name) if manifest.shards else "train"
    if compression == "same":
        compression = manifest.compression
    bounds = balanced_bounds(units, num_shards) if num_shards is not None else None
    output = ShardOutputOptions(shard_size=shard_size or _NO_SIZE_LIMIT, compression=compression, prefix=prefix)
    extra = {k: v for k, v in manifest.extra.items() if k != "group"}  # a group resharded is one set
    with ShardSetWriter(out, output, overwrite=overwrite, **(opts if is_s3(out) else {})) as writer, \
            progress_bar(progress, desc="reshard", total=R, unit="rec", leave=False) as bar:
        bounded = _Bounded(writer, bounds)
        rows = ColumnarSink(bounded, manifest.schema, target, manifest.location) if target.columnar else bounded
        tmp_root = out if not is_s3(out) else tempfile.gettempdir()
        with (ShuffleSink(rows, shuffle, tmp_root=tmp_root, expected_bytes=manifest.total_bytes)
              if shuffle is not None else contextlib.nullcontext(rows)) as sink:
            read = 0
            for framed, lengths in _batches(manifest, src_opts):
                sink.write(framed, lengths)
                read += len(lengths)
                bar.update(len(lengths))
            if shuffle is not None:
                extra["shuffle"] = sink.finish()
        if target.columnar:
            rows.finish()
        if (rows.rows if target.columnar else bounded.written) != R or read != R:
            raise IntegrityError(f"{manifest.location}: read {read} records, manifest says {R}")
        options = dict(manifest.options)
        options["reshard"] = ({"from": manifest.location, "num_shards": num_shards} if num_shards is not None
                              else {"from": manifest.location, "shard_size": shard_size})
        if shuffle is not None:
            options["reshard"]["shuffle"] = shuffle.to_json()
        # the files beside the shards (vocabularies) do not depend on how rows are laid out: carried as they are
        writer.carry(open_storage(manifest.location, **src_opts), side_files_of(manifest), manifest.location)
        if target != manifest.layout:
            for k in ("layout", "block_rows"):  # what the conversion chose; the set is laid out anew
                options.pop(k, None)
            options["reshard"]["layout"] = target.kind
            if target.columnar:
                options["reshard"]["block_rows"] = target.block_rows
        result = writer.finish(schema=manifest.schema, inputs=manifest.inputs, options=options, kind=manifest.kind,
                               extra=extra, layout=target)
    log.info("resharded %s (%d shards) into %s (%d shards)", manifest.location, len(manifest.shards), out,
             len(result.shards))
    return result


def _target(manifest: Manifest, layout: str, block_rows: int | None, batches) -> RecordLayout:
    """The output's record layout: the source's (``"same"``, a new ``block_rows`` aside), the example layout, or
    columnar (stored types from the source's manifest or a first pass over ``batches()``)."""
    source = manifest.layout
    kind = source.kind if layout == "same" else layout
    if kind != COLUMNAR:
        if block_rows is not None:
            raise ValueError(f"block_rows applies to the columnar layout only, got {block_rows!r} for {kind}")
        return EXAMPLE_LAYOUT
    rows = LayoutOptions(COLUMNAR, block_rows or source.block_rows or DEFAULT_BLOCK_ROWS).block_rows
    return columnar_layout(manifest, rows, None if source.columnar else batches())


def _prefix_of(name: str) -> str:
    """The prefix of a tfpipe shard name; "train" for the own names of an adopted set (``tfpipe index``)."""
    try:
        return ShardName.parse(os.path.basename(name))[0]
    except ValueError:
        return "train"
