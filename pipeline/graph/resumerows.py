"""The resumable order of a columnar set, positions in rows: the default graph of a seeded, shuffled columnar
read on one rank (``resume_choice``; ``resumable=True`` for an unshuffled one).

A columnar set's records are blocks of rows (every block of a file holds ``block_rows`` rows but the file's
last one). The resumable graph (``pipeline.graph.resumable``) reads the blocks of epoch ``e`` in its seeded
file order, decodes them in batches of blocks (``decode_raw``, no per-row work) and numbers the epoch's
*rows* ``0 .. N-1`` in that read order; the delay order (``pipeline.resume.delayorder``) then runs over rows
exactly as it runs over an Example set's records, so rows mix across blocks with about ``shuffle_buffer``
rows held, and the input state stays (epoch, position in rows).

Entering the epoch at row ``p`` (:func:`rows_reader`): the file holding it is found by the manifest's row
counts, its block by ``row // block_rows`` (the blocks before it are never decoded: a seek by the file's
record-offset index, or a skip of whole records), and the first ``row % block_rows`` rows of that block are
dropped after its decode. Later epochs read whole files (:func:`decoded_rows`).
"""
from __future__ import annotations

from typing import Any

from ..spec.blocks import decode_rows_for, file_blocks
from ..resume.state import locate

__all__ = ["blocks_per_decode", "decoded_rows", "rows_reader", "epoch_rows", "row_stages"]


def blocks_per_decode(spec) -> int:
    """Blocks per decode call: the built-in rule's rows per call (``decode_rows_for``) in whole blocks."""
    return max(1, decode_rows_for(spec.schema) // spec.layout.block_rows)


def decoded_rows(spec, blocks, drop: int = 0, tables=None) -> Any:
    """The rows of ``blocks`` (chunks of tagged blocks: ``graph.blockcheck.tag_file`` with ``tables`` its
    ``file_tables``, or ``tag_stream``), every block checked, as chunks of decoded columns (dicts, rows first),
    in order; the first ``drop`` rows (fewer than the first block's) left out."""
    import tensorflow as tf

    from .blockcheck import block_decoder

    calls = tf.data.AUTOTUNE if spec.parse_parallelism is None else spec.parse_parallelism
    ds = blocks.map(block_decoder(spec, tables), num_parallel_calls=calls, deterministic=True)
    if drop:
        @tf.autograph.experimental.do_not_convert
        def cut(i, cols):
            start = tf.where(i == 0, tf.constant(drop, tf.int64), tf.constant(0, tf.int64))
            return {k: v[start:] for k, v in cols.items()}

        ds = ds.enumerate().map(cut)
    return ds


def rows_reader(spec, order: list[int], enter, source=None):
    """A function ``start -> the decoded rows of the epoch whose files come in order`` (file numbers, Python
    ints) from its row ``start``: whole files before it skipped by their row counts, the file holding it
    entered at the block holding it (``enter``: ``resumable.enter``, the one place a file is entered in the
    middle; or ``source``: a ``resumestream.StreamedShards``)."""
    import tensorflow as tf

    from .blockcheck import file_tables, knows_files, tag_file, tag_stream
    from ..plan.readplan import DEFAULT_BUFFER_BYTES

    rows = [spec.file_records[f] for f in order]
    br = spec.layout.block_rows
    ctype, buf = spec.compression_type, (spec.buffer_size or DEFAULT_BUFFER_BYTES)
    tables = file_tables(spec) if source is None and knows_files(spec) else None
    per = blocks_per_decode(spec)      # blocks per chunk

    def read(start: int):
        j, k = locate(rows, start)
        block, drop = divmod(k, br)
        if block >= file_blocks(rows[j], br):       # at the end of the last file: nothing left
            block, drop = file_blocks(rows[j], br), 0
        if source is not None:
            return decoded_rows(spec, tag_stream(source.records(order, j, block), per), drop)
        f = order[j]
        digest = spec.file_sha256[f] if spec.file_sha256 else None
        first = enter(spec.files[f], block, ctype, buf, file_blocks(rows[j], br), digest)
        if tables is None:
            if j + 1 < len(order):
                first = first.concatenate(tf.data.TFRecordDataset([spec.files[f] for f in order[j + 1:]],
                                                                  ctype, buf))
            return decoded_rows(spec, tag_stream(first, per), drop)
        blocks = tag_file(spec, tables, tf.constant(f, tf.int64), first, per, block)
        if j + 1 < len(order):
            blocks = blocks.concatenate(_tagged_files(spec, tables, order[j + 1:], ctype, buf))
        return decoded_rows(spec, blocks, drop, tables)

    return read

def _tagged_files(spec, tables, order, ctype, buf) -> Any:
    """The tagged blocks of the whole files ``order`` (file numbers: a list or an int64 tensor), in order."""
    import tensorflow as tf

    from .blockcheck import tag_file

    paths = tf.constant(list(spec.files))
    return tf.data.Dataset.from_tensor_slices(tf.cast(order, tf.int64)).flat_map(
        lambda f: tag_file(spec, tables, f, tf.data.TFRecordDataset(tf.gather(paths, f), ctype, buf),
                           blocks_per_decode(spec)))


def epoch_rows(spec, order, source=None) -> Any:
    """The decoded rows of an epoch whose files come in ``order`` (an int64 tensor), every block checked: the
    generic graph of the epochs after the first (``source``: a ``resumestream.StreamedShards``)."""
    import tensorflow as tf

    from .blockcheck import file_tables, knows_files, tag_stream
    from ..plan.readplan import DEFAULT_BUFFER_BYTES

    ctype, buf = spec.compression_type, (spec.buffer_size or DEFAULT_BUFFER_BYTES)
    if source is not None:
        return decoded_rows(spec, tag_stream(source.records(order), blocks_per_decode(spec)))
    if not knows_files(spec):
        return decoded_rows(spec, tag_stream(tf.data.TFRecordDataset(
            tf.gather(tf.constant(list(spec.files)), order), ctype, buf), blocks_per_decode(spec)))
    tables = file_tables(spec)
    return decoded_rows(spec, _tagged_files(spec, tables, order, ctype, buf), tables=tables)


def row_stages(spec, stages: list) -> list:
    """``resumable_stages`` of a columnar spec: the source reads blocks, a decode stage follows it, the order
    and the batches are over rows, and no parse stage (the decode gives the schema's tensors)."""
    from dataclasses import replace

    from ..spec.stage import Stage

    lay = spec.layout
    k = blocks_per_decode(spec)
    calls = "AUTOTUNE" if spec.parse_parallelism is None else spec.parse_parallelism
    out = []
    for s in stages:
        if s.name == "parse":
            continue
        if s.name == "source":
            s = replace(s, settings={**s.settings, "layout": "columnar", "block_rows": lay.block_rows,
                                     "position": "row"},
                        why=s.why + "; positions are rows: a resume enters the block holding its row (the blocks "
                                    "before it are not decoded) and drops that block's rows before it")
            out.append(s)
            out.append(Stage("decode", True, {"blocks_per_call": k, "rows_per_call": k * lay.block_rows,
                                              "fn": "tf.io.decode_raw",
                                              "stored": ", ".join(f"{n}:{t}" for n, t in lay.stored),
                                              "num_parallel_calls": calls, "deterministic": True,
                                              "output": spec.output},
                               "one parse_example of the blocks' raw columns, then one decode_raw per column, cast "
                               "to the schema's dtypes; rows in the read order"))
            continue
        if s.name == "shuffle" and s.enabled:
            s = replace(s, settings={**s.settings, "unit": "row"},
                        why=s.why.replace("record", "row"))
        if s.name == "batch":
            s = replace(s, settings={**s.settings, "how": "rebatch of decoded rows"},
                        why="any batch size: rebatch cuts the decoded columns, no per-row step")
        out.append(s)
    return out
