"""Parse functions from a manifest's schema: one vectorized ``tf.io.parse_example`` call per batch, fixed-length
features as dense tensors, variable-length ones as ``tf.SparseTensor`` or ``tf.RaggedTensor``."""
from __future__ import annotations

from ..spec.pipelinespec import PipelineSpecBase

__all__ = ["feature_spec", "parse_fn", "spec_parse_fn"]


def feature_spec(schema, sparse_as: str = "sparse") -> dict:
    """A ``tf.io`` feature per feature of a manifest schema: ``FixedLenFeature`` for fixed shapes; for
    variable-length ones ``VarLenFeature`` (``sparse_as="sparse"``) or ``RaggedFeature`` (``"ragged"``)."""
    import tensorflow as tf

    dt = {"int64": tf.int64, "float32": tf.float32, "string": tf.string}  # string: adopted sets only

    def one(f):
        if not f.varlen:
            return tf.io.FixedLenFeature(list(f.shape), dt[f.dtype])
        if sparse_as == "ragged":
            return tf.io.RaggedFeature(dt[f.dtype], row_splits_dtype=tf.int64)
        return tf.io.VarLenFeature(dt[f.dtype])

    return {f.name: one(f) for f in schema.features}


def parse_fn(schema, output: str = "keras", *, sparse_as: str = "sparse",
             sparse_features: tuple[str, str] | None = None, num_features: int | None = None):
    """A function parsing a *batch* of serialized Examples into ``(features, label)`` or a dict.

    ``sparse_features=(ids, values)`` with ``sparse_as="sparse"``: both come out as ``tf.SparseTensor`` of
    ``dense_shape [batch, num_features]`` sharing indices ``[row, id]`` (values: the ids, and the values)."""
    import tensorflow as tf

    spec = feature_spec(schema, sparse_as)
    label = schema.label
    pair = sparse_features if sparse_as == "sparse" else None

    def parse(serialized):
        parsed = tf.io.parse_example(serialized, spec)
        if pair:
            ids, values = parsed[pair[0]], parsed[pair[1]]
            indices = tf.stack([ids.indices[:, 0], ids.values], axis=1)
            shape = tf.stack([ids.dense_shape[0], tf.constant(num_features, tf.int64)])
            parsed[pair[0]] = tf.SparseTensor(indices, ids.values, shape)
            parsed[pair[1]] = tf.SparseTensor(indices, values.values, shape)
        if output == "dict" or label is None:
            return parsed
        label_t = parsed.pop(label)
        return parsed, label_t

    return parse


def spec_parse_fn(spec: PipelineSpecBase):
    """``parse_fn`` with a spec's schema, output and variable-length settings."""
    return parse_fn(spec.schema, spec.output, sparse_as=spec.sparse_as, sparse_features=spec.sparse_features,
                    num_features=spec.num_features)
