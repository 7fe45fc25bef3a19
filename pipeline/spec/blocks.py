"""Row arithmetic of a columnar set (``converters.tfrecord.layout``), pure: the rows a rank reads when ranks
take whole blocks in turn (``shard(n, i)`` over the set's blocks, in file order) and the equal steps every rank
can run. Every block of a file holds ``block_rows`` rows except the file's last one."""
from __future__ import annotations

import math

from sharding.epochs import epoch_batches

# rows per decode call of a columnar read (the blocks of one call), the built-in rule's: large enough that
# tf.data's per-element costs vanish, small enough that a decoded chunk stays a few MiB (8,192 Criteo rows of
# ~0.5 KiB; 1,023 text windows of 2,049 int64 ids: 256 of them ran at 0.8x the speed of 1,024)
DECODE_ROWS = 8192
DECODE_BYTES = 16 << 20         # 16 MiB of decoded tensors per call at most


def decode_rows_for(schema) -> int:
    """Rows per decode call of the built-in rule: :data:`DECODE_ROWS`, fewer for wide rows (at most
    :data:`DECODE_BYTES` of decoded tensors)."""
    row = sum((8 if f.dtype == "int64" else 4) * math.prod(f.shape or ()) for f in schema.features)
    return max(1, min(DECODE_ROWS, DECODE_BYTES // max(1, row)))

__all__ = ["DECODE_ROWS", "DECODE_BYTES", "decode_rows_for", "file_blocks", "file_record_counts", "rank_rows", "smallest_rank_rows", "spec_file_rows", "block_rank_steps", "check_columnar", "locate"]


def file_blocks(rows: int, block_rows: int) -> int:
    """Blocks of a file of ``rows`` rows."""
    return -(-rows // block_rows)


def file_record_counts(spec) -> tuple[int, ...]:
    """Records (TFRecord records) per file of a spec: ``file_records``, or for a columnar set the blocks of
    its files' rows."""
    if spec.layout is None:
        return tuple(spec.file_records)
    return tuple(file_blocks(n, spec.layout.block_rows) for n in spec.file_records)


def rank_rows(file_records, block_rows: int, num_shards: int, index: int) -> int:
    """Rows rank ``index`` of ``num_shards`` reads when the ranks take the set's blocks in turn (block ``g`` of
    the set, counted across files in order, goes to rank ``g % num_shards``)."""
    total, first = 0, 0                       # first: global index of the file's first block
    for rows in file_records:
        k = file_blocks(rows, block_rows)
        if k:
            mine = (first + k - 1 - index) // num_shards - (first - 1 - index) // num_shards   # g in [first, first+k)
            last_mine = (first + k - 1) % num_shards == index
            total += mine * block_rows
            if last_mine:                     # the file's last block holds the remainder, not a full block
                total -= block_rows * k - rows
        first += k
    return total


def smallest_rank_rows(file_records, block_rows: int, num_shards: int) -> int:
    """Rows of the rank with the fewest (equal steps are counted from it)."""
    return min(rank_rows(file_records, block_rows, num_shards, i) for i in range(num_shards))


def spec_file_rows(spec) -> tuple[int, ...]:
    """Rows per file of a columnar spec, in read order (one file of ``records`` rows when the manifest's
    per-file counts are not in the spec)."""
    return spec.file_records or ((spec.records or 0),)


def block_rank_steps(spec) -> int:
    """Equal steps per epoch under block-level ``shard(n, i)``: from the rank with the fewest rows."""
    rows = smallest_rank_rows(spec_file_rows(spec), spec.layout.block_rows, spec.num_shards)
    return epoch_batches(rows, spec.batch_size, spec.drop_remainder)


def check_columnar(spec) -> None:
    """A ValueError for what a columnar spec cannot do, naming the way out."""
    spec.layout.check_schema(spec.schema)
    if spec.part_weights:
        raise ValueError("label_weights reads groups of example-layout sets; this set is columnar")
    if not spec.parse:
        raise ValueError("parse=False yields serialized records, and a columnar set's records are blocks of rows: "
                         "read it with parse=True")


def locate(counts: list[int], start: int) -> tuple[int, int]:
    """(file, record in it) of record ``start`` of the concatenation of files of ``counts`` records (the last
    file when ``start`` is at or past the end)."""
    j, k = 0, start
    while j < len(counts) - 1 and k >= counts[j]:
        k -= counts[j]
        j += 1
    return j, k
