"""The resumable order of a columnar set, positions in rows: the default graph of a seeded, shuffled columnar
read on one rank (``resume_choice``; ``resumable=True`` for an unshuffled one).

A columnar set's records are blocks of rows (every block of a file holds ``block_rows`` rows but the file's
last one). The resumable graph (``pipeline.graph.resumable``) reads the blocks of epoch ``e`` in its seeded
file order and numbers the epoch's *rows* ``0 .. N-1`` in that read order. Unshuffled, it decodes them in
batches of blocks (``decode_raw``, no per-row work) in that order. Shuffled, it reads the window order
(``pipeline.resume.windoworder``, :func:`windows`): windows of whole blocks (within files where they are
large enough, :func:`within_files`), each decoded and permuted in one call (one stateless permutation, one
gather per column), so rows move further than ``shuffle(B)`` moves them, and the input state stays (epoch,
position in rows).

Entering the epoch at row ``p`` (:func:`rows_reader`): the file holding it is found by the manifest's row
counts, its block by ``row // block_rows`` (the blocks before it are never decoded: a seek by the file's
record-offset index, or a skip of whole records), and the first ``row % block_rows`` rows of that block are
dropped after its decode; shuffled, the read enters at the first block of the window holding the row
(``windoworder.window_entry``, ``file_window_entry``) and the window's first permuted rows are dropped. Later
epochs read whole files (:func:`epoch_blocks`).
"""
from __future__ import annotations

from typing import Any

from ..spec.blocks import decode_rows_for, file_blocks, locate
from ..resume.windoworder import within_files

__all__ = ["blocks_per_decode", "decoded_rows", "blocks_reader", "rows_reader", "epoch_blocks", "epoch_rows",
           "windows", "row_stages"]


def blocks_per_decode(spec) -> int:
    """Blocks per decode call: the built-in rule's rows per call (``decode_rows_for``) in whole blocks."""
    return max(1, decode_rows_for(spec.schema) // spec.layout.block_rows)


def decoded_rows(spec, blocks, drop: int = 0, tables=None) -> Any:
    """The rows of ``blocks`` (chunks of tagged blocks: ``graph.blockcheck.tag_file`` with ``tables`` its
    ``file_tables``, or ``tag_stream``), every block checked, as chunks of decoded columns (dicts, rows first),
    in order, in the spec's output (``columnar.row_output``); the first ``drop`` rows (fewer than the first
    block's) left out."""
    import tensorflow as tf

    from .blockcheck import block_decoder

    from .columnar import row_output

    calls = tf.data.AUTOTUNE if spec.parse_parallelism is None else spec.parse_parallelism
    decode, out = block_decoder(spec, tables, regrouped=False), row_output(spec)
    ds = blocks.map(lambda *chunk: out(decode(*chunk)), num_parallel_calls=calls, deterministic=True)
    if drop:
        @tf.autograph.experimental.do_not_convert
        def cut(i, cols):
            start = tf.where(i == 0, tf.constant(drop, tf.int64), tf.constant(0, tf.int64))
            return tf.nest.map_structure(lambda v: v[start:], cols)

        ds = ds.enumerate().map(cut)
    return ds


def blocks_reader(spec, order: list[int], enter, source=None, per: int | None = None, within: bool = False):
    """A function ``(j, block) -> (tagged chunks of up to per blocks, tables)``: the blocks of the epoch whose
    files come in ``order`` (file numbers, Python ints) from block ``block`` of its ``j``-th file on, whole
    files after it (``enter``: ``resumable.enter``, the one place a file is entered in the middle; or
    ``source``: a ``resumestream.StreamedShards``); ``tables``: ``blockcheck.file_tables`` or None (no file
    identity: ``tag_stream`` chunks, or with ``within`` each streamed file's blocks in chunks of its own, as
    local files' chunks always are)."""
    import tensorflow as tf

    from .blockcheck import file_tables, knows_files, tag_chunks, tag_file, tag_stream
    from ..plan.readplan import DEFAULT_BUFFER_BYTES

    rows = [spec.file_records[f] for f in order]
    br = spec.layout.block_rows
    ctype, buf = spec.compression_type, (spec.buffer_size or DEFAULT_BUFFER_BYTES)
    tables = file_tables(spec) if source is None and knows_files(spec) else None
    per = per or blocks_per_decode(spec)      # blocks per chunk

    def read(j: int, block: int):
        if source is not None:
            if within:
                return tag_chunks(source.records(order, j, block, chunk=per)), None
            return tag_stream(source.records(order, j, block), per), None
        f = order[j]
        digest = spec.file_sha256[f] if spec.file_sha256 else None
        first = enter(spec.files[f], block, ctype, buf, file_blocks(rows[j], br), digest)
        if tables is None:
            if j + 1 < len(order):
                first = first.concatenate(tf.data.TFRecordDataset([spec.files[f] for f in order[j + 1:]],
                                                                  ctype, buf))
            return tag_stream(first, per), None
        blocks = tag_file(spec, tables, tf.constant(f, tf.int64), first, per, block)
        if j + 1 < len(order):
            blocks = blocks.concatenate(_tagged_files(spec, tables, order[j + 1:], ctype, buf, per))
        return blocks, tables

    return read


def rows_reader(spec, order: list[int], enter, source=None):
    """A function ``start -> the decoded rows of the epoch whose files come in order`` (file numbers, Python
    ints) from its row ``start``: whole files before it skipped by their row counts, the file holding it
    entered at the block holding it (:func:`blocks_reader`), the rows of that block before ``start`` dropped."""
    rows = [spec.file_records[f] for f in order]
    br = spec.layout.block_rows
    blocks = blocks_reader(spec, order, enter, source)

    def read(start: int):
        j, k = locate(rows, start)
        block, drop = divmod(k, br)
        if block >= file_blocks(rows[j], br):       # at the end of the last file: nothing left
            block, drop = file_blocks(rows[j], br), 0
        chunks, tables = blocks(j, block)
        return decoded_rows(spec, chunks, drop, tables)

    return read

def _tagged_files(spec, tables, order, ctype, buf, per: int | None = None) -> Any:
    """The tagged blocks of the whole files ``order`` (file numbers: a list or an int64 tensor), in order, in
    chunks of up to ``per`` blocks."""
    import tensorflow as tf

    from .blockcheck import tag_file

    paths = tf.constant(list(spec.files))
    per = per or blocks_per_decode(spec)
    return tf.data.Dataset.from_tensor_slices(tf.cast(order, tf.int64)).flat_map(
        lambda f: tag_file(spec, tables, f, tf.data.TFRecordDataset(tf.gather(paths, f), ctype, buf), per))


def epoch_blocks(spec, order, source=None, per: int | None = None, within: bool = False) -> tuple[Any, Any]:
    """(tagged chunks of up to ``per`` blocks, ``file_tables`` or None) of an epoch whose files come in
    ``order`` (an int64 tensor): the generic graph of the epochs after the first (``source``: a
    ``resumestream.StreamedShards``; ``within``: as :func:`blocks_reader`)."""
    import tensorflow as tf

    from .blockcheck import file_tables, knows_files, tag_chunks, tag_stream
    from ..plan.readplan import DEFAULT_BUFFER_BYTES

    ctype, buf = spec.compression_type, (spec.buffer_size or DEFAULT_BUFFER_BYTES)
    per = per or blocks_per_decode(spec)
    if source is not None:
        if within:
            return tag_chunks(source.records(order, chunk=per)), None
        return tag_stream(source.records(order), per), None
    if not knows_files(spec):
        return tag_stream(tf.data.TFRecordDataset(tf.gather(tf.constant(list(spec.files)), order), ctype, buf),
                          per), None
    tables = file_tables(spec)
    return _tagged_files(spec, tables, order, ctype, buf, per), tables


def epoch_rows(spec, order, source=None) -> Any:
    """The decoded rows of an epoch whose files come in ``order`` (an int64 tensor), every block checked."""
    chunks, tables = epoch_blocks(spec, order, source)
    return decoded_rows(spec, chunks, tables=tables)


def windows(spec, chunks, tables, seed, first_window: int = 0, drop: int = 0, within: bool = False) -> Any:
    """The window order (``pipeline.resume.windoworder``) of tagged ``chunks`` of ``K`` blocks (from window
    ``first_window``'s first block on): windows of ``K`` blocks, within files (``within``, as the chunks were
    read: each chunk a window, a local file's end marker checked in the decode) or across them (local files'
    markers checked and dropped, the blocks regrouped), each decoded (every block checked) and its rows permuted
    by one stateless permutation (``seed``: the epoch's ``[2]`` seed, window ``w``'s folded in; windows numbered
    in order, a chunk of no blocks, a file's end marker alone, not counted), each column cut in that order; the first
    ``drop`` rows of the first window left out. Rows first, in the spec's output (``columnar.row_output``).
    glibc's malloc is set to keep freed window memory (``graph.heap.keep_freed_memory``)."""
    import tensorflow as tf

    from .blockcheck import block_decoder, is_block
    from .columnar import row_output
    from .heap import keep_freed_memory
    from ..resume.windoworder import WINDOW_CALLS, window_blocks

    keep_freed_memory()     # each window's memory reused by the next, not handed back and faulted in again
    k = window_blocks(spec.shuffle_buffer, spec.layout.block_rows)
    if tables is not None and not within:    # across files: the markers checked and dropped
        chunks = chunks.unbatch().filter(is_block(spec, tables)).batch(k)
    decode, out = block_decoder(spec, tables), row_output(spec)

    @tf.autograph.experimental.do_not_convert
    def window(w, chunk):
        def pick(n):            # the window's rows permuted, the first drop left out in the first window
            perm = tf.random.experimental.stateless_shuffle(
                tf.range(n), tf.random.experimental.stateless_fold_in(seed, w), alg="philox")
            start = tf.where(tf.equal(w, first_window), tf.minimum(tf.constant(drop, tf.int64), n), 0)
            return perm[start:]

        return out(decode(*chunk, pick=pick))

    @tf.autograph.experimental.do_not_convert
    def number(w, chunk):       # (this chunk's window number, the chunk); an end marker alone is no window
        blocks = chunk[2]
        has = tf.reduce_any(blocks[1]) if tables is not None else tf.size(blocks) > 0
        return w + tf.cast(has, tf.int64), (w, chunk)

    numbered = chunks.scan(tf.constant(first_window, tf.int64), number)
    return numbered.map(window, num_parallel_calls=WINDOW_CALLS, deterministic=True)


def row_stages(spec, stages: list) -> list:
    """``resumable_stages`` of a columnar spec: the source reads blocks, a decode stage follows it, the order
    (the window order when shuffled) and the batches are over rows, and no parse stage (the decode gives the
    schema's tensors)."""
    from dataclasses import replace

    from ..spec.stage import Stage

    from ..resume.windoworder import WINDOW_CALLS, window_blocks
    from .cutkernel import KERNEL_FN

    lay = spec.layout
    k = blocks_per_decode(spec)
    calls = "AUTOTUNE" if spec.parse_parallelism is None else spec.parse_parallelism
    if spec.shuffle_buffer > 0:     # the window order decodes a window per call
        k, calls = window_blocks(spec.shuffle_buffer, lay.block_rows), WINDOW_CALLS
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
                                              "fn": KERNEL_FN,
                                              "stored": ", ".join(f"{n}:{t}" for n, t in lay.stored),
                                              "num_parallel_calls": calls, "deterministic": True,
                                              "output": spec.output},
                               "every block checked, then each column cut and cast to the schema's dtype in one pass; "
                               + ("the window's rows permuted in the same call" if spec.shuffle_buffer > 0
                                  else "rows in the read order")))
            continue
        if s.name == "shuffle" and s.enabled:
            b = spec.shuffle_buffer
            rows = k * lay.block_rows
            within = within_files(spec)
            s = replace(s, settings={"buffer": b, "seed": spec.seed, "order": "window", "unit": "row",
                                     "window_blocks": k, "window_rows": rows, "windows_at_a_time": WINDOW_CALLS,
                                     "windows": "within files" if within else "across files"},
                        why=f"rows permuted within windows of {k} whole blocks ({rows} rows, ~2.5x shuffle_buffer; "
                            + ("each file's blocks in windows of its own, its last window the rest" if within else
                               "counted across files: the files are too small for windows of their own")
                            + "): one stateless permutation per window (a pure function of (seed, epoch, window)) and "
                            "each column cut in that order in one pass; rows move further than shuffle(B) moves "
                            f"them; memory: up to {WINDOW_CALLS} windows at a time, each read and its permuted rows "
                            f"(about {2 * WINDOW_CALLS * rows / b:.0f}x shuffle_buffer rows)")
        if s.name == "batch":
            s = replace(s, settings={**s.settings, "how": "rebatch of decoded rows"},
                        why="any batch size: rebatch cuts the decoded columns, no per-row step")
        out.append(s)
    return out
