"""Every columnar block is checked where it is read (``verify`` is not the only guard): the graphs of a columnar
set (``pipeline.graph.columnar``, the resumable order of ``pipeline.graph.resumerows``) read chunks of blocks
tagged with their file and index (:func:`tag_file`, :func:`tag_stream`) and decode them with
:func:`block_decoder`. A file's tags are zipped onto its records (no function runs per chunk to tag them).

Over files whose row counts the manifest gives, each block must be exactly the block ``encode_block`` writes
for the rows the manifest puts there (``block_rows``, or the file's remainder in its last block): its length
and every byte outside the columns' data (``columnar.block_template``) are compared, a few vectorized string
ops per batch of blocks, and the columns are then cut out of the records by position. A file that ends a block
early, or runs on past the manifest's rows, fails at its end (an empty end marker tagged with the number of
blocks the file held follows its last block, and decodes to no rows). Anything else fails the read with one
``InvalidArgumentError`` line naming the shard and the block (``assertion failed: [SHARD: block K: why]``).

A streamed or piped read (no file identity) checks each decoded block's columns: whole rows, one row count,
between 1 and ``block_rows``; the error names the block by its index in the read."""
from __future__ import annotations

from typing import Any

import numpy as np

__all__ = ["file_tables", "tag_file", "drop_ends", "is_block", "tag_chunks", "tag_stream", "block_decoder",
           "knows_files", "decode_blocks_fn"]

VERIFY_HINT = "`tfpipe verify` names the fault"


def knows_files(spec) -> bool:
    """Whether the blocks come from local files with the manifest's row counts (checked exactly)."""
    return (spec.mode == "file" and spec.stream is None and bool(spec.file_records)
            and len(spec.file_records) == len(spec.files))


def file_tables(spec) -> dict[str, Any]:
    """Pure: per-file block counts and rows, and the block templates (row 0: a full block; row ``1 + f``: file
    ``f``'s last block) as NumPy arrays, one entry per column for the header and data positions (int32: a
    block is at most 256 MiB, ``MAX_RECORD_BYTES``)."""
    from converters.tfrecord.columnar import block_template

    br = spec.layout.block_rows
    rows = np.asarray(spec.file_records, np.int64)
    nb = -(-rows // br)
    last = np.where(rows > 0, rows - (nb - 1) * br, br)
    temps = [block_template(spec.schema, spec.layout, br)]
    cache = {br: temps[0]}
    for r in last.tolist():
        temps.append(cache.setdefault(r, block_template(spec.schema, spec.layout, r)))
    ncol = len(spec.schema.features)
    return {"rows": rows, "blocks": nb, "expect": np.array([t.rows for t in temps], np.int64),
            "length": np.array([t.length for t in temps], np.int64),
            "headers": [np.array([t.headers[c] for t in temps], object) for c in range(ncol)],
            "header_at": [np.array([t.header_at[c] for t in temps], np.int32) for c in range(ncol)],
            "data_at": [np.array([t.data_at[c] for t in temps], np.int32) for c in range(ncol)],
            "data_len": [np.array([t.data_len[c] for t in temps], np.int32) for c in range(ncol)]}


def _fail_unless(ok, message) -> Any:
    """A boolean tensor that is ``ok``'s all-true, or an error carrying ``message()`` (built only then)."""
    import tensorflow as tf

    def fail():
        with tf.control_dependencies([tf.debugging.Assert(tf.constant(False), [message()])]):
            return tf.constant(False)

    return tf.cond(tf.reduce_all(ok), lambda: tf.constant(True), fail)


def tag_file(spec, tables: dict, f, records, k: int, first=0) -> Any:
    """The records (blocks) of file ``f`` (a scalar int64 tensor) from its block ``first`` in chunks of up to
    ``k`` blocks, each ``(f, block indices, (blocks, real))`` (vectors): the tags are zipped on, no function
    runs per chunk. An empty end marker (``real`` false) follows the file's last block, its index the number of
    blocks the file held: the decode fails it unless that is the manifest's count (:func:`drop_ends` checks and
    drops the markers of a read that regroups blocks)."""
    import tensorflow as tf

    d = tf.data.Dataset
    ends = d.from_tensors((tf.constant(""), tf.constant(False)))
    recs = d.zip((records, d.from_tensors(tf.constant(True)).repeat())).concatenate(ends)
    return d.zip((d.from_tensors(tf.cast(f, tf.int64)).repeat(), d.range(tf.cast(first, tf.int64), 1 << 62),
                  recs)).batch(k)


def _count_message(spec, names, nbt, rowst, f, b) -> Any:
    import tensorflow as tf

    return tf.strings.join([tf.gather(names, f), tf.strings.format(
        ": {} blocks, where the {} rows in the manifest make {} blocks of {} rows: the shard is short or runs "
        "on (truncated, replaced or rewritten); " + VERIFY_HINT,
        (b, tf.gather(rowst, f), tf.gather(nbt, f), spec.layout.block_rows))])


def drop_ends(spec, tables: dict, blocks) -> Any:
    """Chunks of :func:`tag_file` without their end markers, each file's block count checked first (for a read
    that regroups blocks, e.g. a block-level shard, so that the markers are not counted as blocks)."""
    import tensorflow as tf

    c = tf.constant
    names, nbt, rowst = c(list(spec.files)), c(tables["blocks"]), c(tables["rows"])

    def strip(f, b, blocks):
        recs, real = blocks
        ok = tf.logical_or(real, tf.equal(b, tf.gather(nbt, f)))
        i = tf.argmin(tf.cast(ok, tf.int32))
        with tf.control_dependencies([_fail_unless(ok, lambda: _count_message(spec, names, nbt, rowst, f[i],
                                                                                  b[i]))]):
            recs = tf.boolean_mask(recs, real)
        return tf.boolean_mask(f, real), tf.boolean_mask(b, real), (recs, tf.ones_like(recs, tf.bool))

    return blocks.map(strip)


def is_block(spec, tables: dict):
    """A ``filter`` predicate over single tagged blocks (``tag_file``'s chunks unbatched): true for a block,
    false for an end marker once the file's block count is checked against the manifest's (for a read that
    regroups blocks across files without copying them)."""
    import tensorflow as tf

    c = tf.constant
    names, nbt, rowst = c(list(spec.files)), c(tables["blocks"]), c(tables["rows"])

    @tf.autograph.experimental.do_not_convert
    def keep(f, b, block):
        real = block[1]
        ok = tf.logical_or(real, tf.equal(b, tf.gather(nbt, f)))
        with tf.control_dependencies([_fail_unless(ok, lambda: _count_message(spec, names, nbt, rowst, f, b))]):
            return tf.identity(real)

    return keep


def tag_chunks(chunks) -> Any:
    """Chunks of blocks of a read without file identity (vectors of any sizes, e.g. each streamed file's blocks
    in chunks of its own), each ``(-1s, indices in the read, blocks)``."""
    import tensorflow as tf

    def tagged(seen, recs):
        n = tf.shape(recs, out_type=tf.int64)[0]
        return seen + n, (tf.fill([n], tf.constant(-1, tf.int64)), seen + tf.range(n), recs)

    return chunks.scan(tf.constant(0, tf.int64), tagged)


def tag_stream(records, k: int) -> Any:
    """Blocks of a read without file identity (streamed, piped) in chunks of up to ``k`` blocks, each
    ``(-1s, indices in the read, blocks)`` (:func:`tag_chunks`)."""
    return tag_chunks(records.batch(k))


def decode_blocks_fn(schema, layout):
    """A function from a vector of serialized blocks to a dict of column tensors of the schema's dtypes, rows
    first (``[rows]`` for scalar features, ``[rows, *shape]`` otherwise): the same tensors the Example layout
    parses to."""
    import tensorflow as tf

    raw_spec = {f.name: tf.io.FixedLenFeature([], tf.string) for f in schema.features}
    plan = [(f.name, tf.as_dtype(layout.stored_type(f.name)), tf.as_dtype(f.dtype), [-1, *f.shape])
            for f in schema.features]

    def decode(blocks, parsed=None):   # parsed: tf.io.parse_example(blocks, ...) when the caller has it
        cols = tf.io.parse_example(blocks, raw_spec) if parsed is None else parsed
        out = {}
        for name, stored, dtype, shape in plan:   # reduce_join: a file's last block is shorter than the rest
            values = tf.io.decode_raw(tf.strings.reduce_join(cols[name]), stored, little_endian=True)
            out[name] = tf.cast(tf.reshape(values, shape), dtype)
        return out

    return decode


def _cut(cut, blocks, offsets, rows, sel, block_rows: int, stored, dtype, shape) -> Any:
    """One column of a chunk through the column kernel (``cutkernel``): all rows in order (``sel`` None) or the
    rows ``sel`` names by ordinal, as ``dtype`` in ``shape``."""
    import tensorflow as tf

    width = int(np.prod(shape[1:])) if len(shape) > 1 else 1
    ordered = sel is None
    values = cut(blocks, offsets, rows, tf.zeros([0], tf.int64) if ordered else sel, block_rows=block_rows,
                 width=width, ordered=ordered, S=stored, T=dtype)
    return tf.reshape(values, shape)


def _exact_decoder(spec, tables: dict, regrouped: bool, cut):
    import tensorflow as tf

    c = tf.constant
    names, nbt, rowst = c(list(spec.files)), c(tables["blocks"]), c(tables["rows"])
    expect, length = c(tables["expect"]), c(tables["length"])
    cols = [(f.name, tf.as_dtype(spec.layout.stored_type(f.name)), tf.as_dtype(f.dtype), [-1, *f.shape],
             c(tables["headers"][i].tolist(), tf.string), c(tables["header_at"][i]), c(tables["data_at"][i]),
             c(tables["data_len"][i]), int(tables["data_len"][i][0])) for i, f in enumerate(spec.schema.features)]
    stored = ", ".join(f"{n}:{t}" for n, t in spec.layout.stored)
    br = spec.layout.block_rows

    def decode(f, b, blocks, pick=None):
        blocks, real = blocks
        nb = tf.gather(nbt, f)
        t = tf.where(tf.equal(b, nb - 1), f + 1, tf.zeros_like(f))
        size = tf.cast(tf.strings.length(blocks), tf.int64)
        want = tf.gather(length, t)
        fits = tf.logical_and(real, tf.equal(size, want))
        ok = tf.logical_and(fits, b < nb)
        for _, _, _, _, heads, at, _, _, _ in cols:
            head = tf.gather(heads, t)
            got = tf.strings.substr(blocks, tf.where(fits, tf.gather(at, t), 0),
                                    tf.where(fits, tf.strings.length(head), 0))
            ok = tf.logical_and(ok, tf.equal(got, head))
        ok = tf.where(real, ok, tf.equal(b, nb))      # an end marker: the file held the manifest's blocks

        def message():
            i = tf.argmin(tf.cast(ok, tf.int32))
            fi, bi, rows = f[i], b[i], tf.gather(expect, t[i])
            why = tf.where(bi >= nb[i], tf.strings.format(
                "beyond the {} blocks the {} rows in the manifest make", (nb[i], tf.gather(rowst, fi))),
                tf.where(tf.equal(size[i], want[i]), tf.strings.format(
                    "its framing is not that of a block of {} rows of the layout (" + stored + "): the name, length "
                    "or varint of a column differs", (rows,)), tf.strings.format(
                    "{} bytes, where a block of {} rows of the layout (" + stored + ") is {} bytes: its row count or "
                    "the length of a column does not match", (size[i], rows, want[i]))))
            return tf.where(real[i], tf.strings.join([tf.gather(names, fi), ": block ", tf.strings.as_string(bi),
                                                      ": ", why, "; " + VERIFY_HINT]),
                            _count_message(spec, names, nbt, rowst, fi, bi))

        use = tf.logical_and(ok, real)                # an end marker decodes to no rows
        with tf.control_dependencies([_fail_unless(ok, message)]):
            rows = tf.where(use, tf.gather(expect, t), 0)
            if cut is not None:     # the column kernel: each column cut, widened (and permuted) in one pass
                sel = None if pick is None else pick(tf.reduce_sum(rows))
                return {name: _cut(cut, blocks, tf.cast(tf.where(use, tf.gather(at, t), 0), tf.int64), rows, sel,
                                   br, st, dtype, shape) for name, st, dtype, shape, _, _, at, _, _ in cols}
            # each block's column decoded into a slot of block_rows rows (a short block zero-padded): one
            # copy, no join; the rows kept are the slots' real rows
            if pick is None and not regrouped:    # one file's blocks in order: only the last can be short
                n, sel = tf.reduce_sum(rows), None
            else:
                idx = tf.where(tf.reshape(tf.sequence_mask(rows, br), [-1]))[:, 0]
                sel = idx if pick is None else tf.gather(idx, pick(tf.shape(idx, out_type=tf.int64)[0]))
            out = {}
            for name, st, dtype, shape, _, _, at, size, full in cols:
                data = tf.strings.substr(blocks, tf.where(use, tf.gather(at, t), 0),
                                         tf.where(use, tf.gather(size, t), 0))
                values = tf.reshape(tf.io.decode_raw(data, st, little_endian=True, fixed_length=full), shape)
                out[name] = tf.cast(values[:n] if sel is None else tf.gather(values, sel), dtype)
        return out

    return decode


def _checked_columns(spec, cut):
    """The decode of a read without file identity: ``decode_blocks_fn`` and, per block, whole rows of one row
    count in every column, between 1 and ``block_rows``."""
    import tensorflow as tf

    raw_spec = {f.name: tf.io.FixedLenFeature([], tf.string) for f in spec.schema.features}
    row_bytes = [(f.name, f.width * np.dtype(spec.layout.stored_type(f.name)).itemsize)
                 for f in spec.schema.features]
    per_row = ", ".join(f"{n} {rb}" for n, rb in row_bytes)
    br = spec.layout.block_rows
    inner = decode_blocks_fn(spec.schema, spec.layout)
    kinds = {f.name: (tf.as_dtype(spec.layout.stored_type(f.name)), tf.as_dtype(f.dtype), [-1, *f.shape])
             for f in spec.schema.features}

    def decode(f, b, blocks, pick=None):
        cols = tf.io.parse_example(blocks, raw_spec)
        sizes = [tf.cast(tf.strings.length(cols[n]), tf.int64) for n, _ in row_bytes]
        rows = sizes[0] // row_bytes[0][1]
        ok = tf.logical_and(rows >= 1, rows <= br)
        for size, (_, rb) in zip(sizes, row_bytes):
            ok = tf.logical_and(ok, tf.logical_and(tf.equal(size % rb, 0), tf.equal(size // rb, rows)))

        def message():
            i = tf.argmin(tf.cast(ok, tf.int32))
            listed = tf.strings.reduce_join([tf.strings.format("{} {} bytes", (n, s[i]))
                                             for (n, _), s in zip(row_bytes, sizes)], separator=", ")
            return tf.strings.format("block {} of the read: its columns ({}) are not whole rows of one row "
                                     "count between 1 and {} (bytes per row: " + per_row + "); " + VERIFY_HINT,
                                     (b[i], listed, br))

        with tf.control_dependencies([_fail_unless(ok, message)]):
            if cut is not None:     # the column kernel: each parsed column cut, widened (and permuted) at once
                sel = None if pick is None else pick(tf.reduce_sum(rows))
                zero = tf.zeros_like(rows)
                return {n: _cut(cut, cols[n], zero, rows, sel, br, *kinds[n]) for n, _ in row_bytes}
            out = inner(blocks, {n: tf.identity(v) for n, v in cols.items()})
        if pick is None:
            return out
        sel = pick(tf.reduce_sum(rows))
        return {n: tf.gather(v, sel) for n, v in out.items()}

    return decode


def block_decoder(spec, tables: dict | None = None, regrouped: bool = True, kernel: bool = True):
    """``decode(f, b, blocks, pick=None)``: a chunk of tagged blocks to a dict of column tensors (rows first, the
    schema's dtypes), every block checked (see the module docstring); ``pick``: a function from the chunk's
    row count ``n`` (an int64 scalar) to the rows to give, in that order, by their ordinals ``0 .. n-1`` in
    the chunk (one gather per column). Each column is cut, widened and picked in one pass by the column kernel
    (``pipeline.graph.cutkernel``) where it is on and ``kernel``, else by TensorFlow's ops (the same tensors).
    ``tables``: ``file_tables(spec)`` when the blocks carry file numbers, else None. ``regrouped``: whether a
    chunk may hold blocks of more than one file (a short block, a file's last, then not last in its chunk);
    False for :func:`tag_file`'s chunks as they come, whose rows are then cut as a prefix, not gathered."""
    from .cutkernel import column_cut

    cut = column_cut() if kernel else None
    return _exact_decoder(spec, tables, regrouped, cut) if tables is not None else _checked_columns(spec, cut)
